/**
 * Ingestion threads that fail (ingest-pool.ts, ingest-thread-runtime.ts), through `KvEventManager` with real
 * threads (dist/workers/kv-ingest.js, so `npm run build` first) and real ZMQ publishers. The pool's test hook
 * (`failNextIngestThread`, the in-process twin of `KVGATE_TEST_INGEST_THREAD_FAILURE`) makes the next thread
 * fail for real, once. A thread that fails with sockets open used to abort the whole process (zeromq.js #411);
 * here it closes them, is restarted and counted, and its streams follow their publishers again. Its
 * streams being removed are not subscribed again (their removal resolves), and a subscription the new thread
 * refuses is counted and logged. The pool's release stops its threads without terminating them.
 *
 * The pool is pointed at test/fixtures/fake-ingest-thread.mjs, the real thread unless it starts while
 * KVGATE_TEST_FAKE_INGEST_THREAD is set: then it opens no socket and refuses every subscription (`refuse`),
 * or never answers a stop (`deaf`).
 */
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock, type Logger, type WorkerRank } from '../../src/common/index.js';
import { KvEventApplier, KvEventManager, type IngestThreadRestartReason } from '../../src/events/index.js';
import { failNextIngestThread } from '../../src/events/ingest-worker.js';
import { blockHashes } from '../../src/wasm/index.js';
import { until } from '../helpers/until.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';

vi.mock('../../src/common/index.js', async (importOriginal) => {
  const common = await importOriginal<typeof import('../../src/common/index.js')>();
  const fixture = fileURLToPath(new URL('../fixtures/fake-ingest-thread.mjs', import.meta.url));
  return {
    ...common,
    workerEntryFile: (url: string, name: string, depth: number) =>
      name === 'kv-ingest' ? fixture : common.workerEntryFile(url, name, depth),
  };
});

const BS = 4;
const FAKE = 'KVGATE_TEST_FAKE_INGEST_THREAD';

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  failNextIngestThread(undefined);
  delete process.env[FAKE];
  while (cleanups.length > 0) await cleanups.pop()!();
});

interface Line {
  level: string;
  msg: string;
  fields: Record<string, unknown>;
}

/** A manager on one ingestion thread, its log lines, restarts and refusals, and publishers for workers 7 and 8. */
async function setup(opts: { fake?: boolean; add?: boolean } = {}): Promise<{
  manager: KvEventManager;
  lines: Line[];
  restarts: IngestThreadRestartReason[];
  refused: WorkerRank[];
  pubs: TestKvPublisher[];
  depth(tokens: number[]): number;
  /** Publishes a fresh document of `blocks` blocks on `pub`; resolves to its tokens. */
  publishDoc(pub: TestKvPublisher, blocks: number): Promise<number[]>;
}> {
  const lines: Line[] = [];
  const log: Logger = {
    debug: (fields, msg) => lines.push({ level: 'debug', msg, fields }),
    info: (fields, msg) => lines.push({ level: 'info', msg, fields }),
    warn: (fields, msg) => lines.push({ level: 'warn', msg, fields }),
    error: (fields, msg) => lines.push({ level: 'error', msg, fields }),
    child: () => log,
  };
  const restarts: IngestThreadRestartReason[] = [];
  const refused: WorkerRank[] = [];
  const manager = new KvEventManager({
    applier: new KvEventApplier({ blockSize: BS }),
    clock: new ManualClock(),
    ingestThreads: 1,
    logger: log,
    hooks: { onResubscribeRefused: (slot) => refused.push(slot) },
    onIngestThreadRestart: (reason) => restarts.push(reason),
  });
  const pubs = [await TestKvPublisher.start(), await TestKvPublisher.start()];
  cleanups.push(async () => {
    await manager.close();
    for (const p of pubs) await p.close();
    manager.indexes.dispose();
  });
  if (opts.add !== false)
    for (const [i, pub] of pubs.entries())
      await manager.add({ workerId: 7 + i, dpRank: 0, endpoint: pub.endpoint, replayEndpoint: pub.replayEndpoint });
  // A fake thread (KVGATE_TEST_FAKE_INGEST_THREAD) opens no socket.
  if (opts.fake !== true && opts.add !== false) for (const pub of pubs) await pub.waitForSubscribers();
  let next = 1;
  return {
    manager,
    lines,
    restarts,
    refused,
    pubs,
    depth(tokens) {
      const m = manager.indexes.device.findMatches(blockHashes(tokens, BS));
      return m.count === 0 ? 0 : Math.max(...m.depths.subarray(0, m.count));
    },
    async publishDoc(pub, blocks) {
      const tokens = Array.from({ length: blocks * BS }, (_, i) => next * 1000 + i);
      const tag = BigInt(next++) << 20n;
      const blockTags = Array.from({ length: blocks }, (_, i) => tag + BigInt(i));
      await pub.publish([{ type: 'stored', blockHashes: blockTags, parent: null, tokens, blockSize: BS }]);
      return tokens;
    },
  };
}

describe('an ingestion thread that fails', () => {
  it('with an unhandled rejection while both sockets receive: restarted, counted, its streams follow again', async () => {
    failNextIngestThread({ at: 'batches', afterPosts: 1, rejection: true });
    const s = await setup();
    const first = await s.publishDoc(s.pubs[0]!, 2);
    await until(() => s.restarts.length === 1, 'the restart');
    expect(s.restarts).toEqual(['unhandled_rejection']);
    const failed = s.lines.filter((l) => l.level === 'error');
    expect(failed).toHaveLength(1);
    expect(failed[0]!.msg).toMatch(/^KV-event ingestion thread failed/);
    expect(failed[0]!.fields).toMatchObject({
      thread: 0,
      streams: 2,
      reason: 'unhandled_rejection',
      err: expect.stringContaining('KVGATE_TEST_INGEST_THREAD_FAILURE'),
    });
    // Both subscribe again on the new thread (a second subscription at each publisher) and connect.
    for (const pub of s.pubs) await pub.waitForSubscribers(2);
    await until(() => s.manager.counters.snapshot().connections.connected === 4, 'both streams connected again');
    // Events flow again on both; what the dead thread may not have posted comes back by replay.
    const after = [await s.publishDoc(s.pubs[0]!, 3), await s.publishDoc(s.pubs[1]!, 5)];
    await until(() => s.depth(after[0]!) === 3 && s.depth(after[1]!) === 5, 'new blocks of both publishers');
    await until(() => s.depth(first) === 2, 'the first document');
    expect(s.manager.connections(7)).toEqual({ connected: 1, ranks: 1 });
    expect(s.restarts).toHaveLength(1);
    // The release stops the thread (it closes its sockets), never terminates it.
    await s.manager.close();
    expect(s.lines.filter((l) => /terminat/.test(l.msg))).toEqual([]);
  }, 30_000);

  it('while a stream is being removed: the removal resolves, and only the other stream subscribes again', async () => {
    failNextIngestThread({ at: 'remove' });
    const s = await setup();
    // The thread dies instead of handling the removal, with both sockets open. (Before, the stream was
    // subscribed again on the new thread and its removal never resolved.)
    let removed = false;
    void s.manager.remove(7).then(() => (removed = true));
    await until(() => removed, "worker 7's removal", 10_000);
    expect(s.restarts).toEqual(['uncaught_exception']);
    const restarted = s.lines.find((l) => l.msg.startsWith('KV-event ingestion thread restarted'));
    expect(restarted?.fields).toMatchObject({ reason: 'uncaught_exception', streams: 1 });
    await s.pubs[1]!.waitForSubscribers(2);
    const doc = await s.publishDoc(s.pubs[1]!, 4);
    await until(() => s.depth(doc) === 4, "worker 8's new blocks");
    expect(s.manager.sources().map((src) => src.workerId)).toEqual([8]);
  }, 30_000);

  it('replaced by a thread that refuses to subscribe a stream again: counted and logged as refused', async () => {
    failNextIngestThread({ at: 'batches', afterPosts: 1 });
    const s = await setup();
    // The thread started next (the restart) refuses every subscription.
    process.env[FAKE] = 'refuse';
    await s.publishDoc(s.pubs[0]!, 2);
    await until(() => s.refused.length === 2, 'both subscriptions refused on the restarted thread');
    expect(s.restarts).toEqual(['uncaught_exception']);
    expect(s.refused.map((r) => r.workerId).sort()).toEqual([7, 8]);
    const warns = s.lines.filter((l) => l.msg.includes('KV events not subscribed again'));
    expect(warns.map((l) => l.fields)).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ workerId: 7, dpRank: 0, err: 'Too many open files (test)' }),
        expect.objectContaining({ workerId: 8, dpRank: 0, err: 'Too many open files (test)' }),
      ]),
    );
    expect(s.manager.connections(7)).toEqual({ connected: 0, ranks: 1 });
    // Still subscribed as far as the manager knows: its removal is answered.
    await s.manager.remove(7);
  }, 30_000);
});

describe('an ingestion thread that keeps failing at once', () => {
  it('is restarted after a back-off that doubles, each death logged and counted', async () => {
    process.env[FAKE] = 'die';
    const s = await setup({ fake: true, add: false });
    await until(() => s.restarts.length >= 4, 'four restarts', 10_000);
    // The next thread starts without the fake: a real one, which the release stops.
    delete process.env[FAKE];
    expect(s.restarts.slice(0, 4)).toEqual(['died', 'died', 'died', 'died']);
    const delays = s.lines
      .filter((l) => l.msg.startsWith('KV-event ingestion thread restarted'))
      .map((l) => l.fields['delayMs'] as number);
    // Each drawn from [step / 2, step], the step doubling from 100 ms.
    expect(delays.slice(0, 4).map((d, n) => d >= 50 * 2 ** n && d <= 100 * 2 ** n)).toEqual([true, true, true, true]);
    const died = s.lines.filter((l) => l.level === 'error' && l.msg.startsWith('KV-event ingestion thread died'));
    expect(died.length).toBeGreaterThanOrEqual(4);
    expect(died[0]!.fields).toMatchObject({ reason: 'died', err: 'the fake ingestion thread dies as it starts' });
  }, 30_000);
});

describe("the pool's release", () => {
  it('terminates a thread that does not stop in time, and says so', async () => {
    process.env[FAKE] = 'deaf';
    const s = await setup({ fake: true });
    await s.manager.close();
    const late = s.lines.filter((l) => l.level === 'error');
    expect(late).toHaveLength(1);
    expect(late[0]!.msg).toMatch(/^KV-event ingestion thread did not close its sockets within 5000 ms: terminating it/);
    expect(late[0]!.fields).toMatchObject({ thread: 0, timeoutMs: 5000 });
    expect(s.restarts).toEqual([]);
  }, 30_000);
});
