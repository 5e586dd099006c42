/**
 * An ingestion thread's work (ingest-thread.ts), run here in the test's own thread over real ZMQ sockets: what
 * it reports to the main thread when a socket's receive fails for good, and its stop (what a thread that
 * fails or is asked to end does before it ends: zeromq aborts the process over a thread ending with a socket
 * open).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { encodeSeq, MAX_BATCH_ELEMENTS } from '../../src/events/index.js';
import { IngestThread, type IngestReport } from '../../src/events/ingest-thread.js';
import { eachPackedBatch } from '../../src/events/packed-batch.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';
import { until } from '../helpers/until.js';
import { watchSubscribers } from '../helpers/zmq-receive.js';
import { deepRankBatch } from './stream-fixture.js';

const BS = 4;

/** Batches packed in every post so far. */
function packedCount(reports: readonly IngestReport[]): number {
  let n = 0;
  for (const r of reports) if (r.op === 'batches') eachPackedBatch(r.packed, () => n++);
  return n;
}

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

function stored(first: number, tag: bigint) {
  const tokens = [first, first + 1, first + 2, first + 3];
  return { type: 'stored' as const, blockHashes: [tag], parent: null, tokens, blockSize: BS };
}

describe('IngestThread', () => {
  it('a receive that fails ends the stream: reported once, its socket closed; its removal still answered', async () => {
    const { sockets, restore } = watchSubscribers();
    cleanups.push(restore);
    const pub = await TestKvPublisher.start({ topic: 'kv-events' });
    cleanups.push(() => pub.close());
    const reports: IngestReport[] = [];
    const thread = new IngestThread((r) => reports.push(r));
    const of = (op: IngestReport['op']) => reports.filter((r) => r.op === op);
    thread.handle({
      op: 'add',
      id: 5,
      endpoint: pub.endpoint,
      topic: 'kv-events',
      receiveHighWaterMark: 1000,
      maxMessageBytes: 1 << 20,
      eagle: false,
      maxBatchElements: MAX_BATCH_ELEMENTS,
    });
    cleanups.push(async () => {
      thread.handle({ op: 'remove', id: 5 });
      await until(() => of('removed').length === 1, 'the removal');
    });
    expect(of('added')).toEqual([{ op: 'added', id: 5 }]);
    await pub.waitForSubscribers();
    await pub.publish([stored(1, 10n)]);
    await until(() => of('batches').length === 1, 'the first batch');
    expect(sockets).toHaveLength(1);
    const sub = sockets[0]!;
    // The receive after the next message times out: a receive error, which ZMQ does not recover from.
    sub.receiveTimeout = 1;
    await pub.publish([stored(5, 20n)]);
    await until(() => of('ended').length > 0, 'the end of the stream');
    expect(of('ended')).toEqual([{ op: 'ended', id: 5, error: expect.stringMatching(/timed out/) }]);
    // Nothing reads the socket any more: closed, so ZMQ neither reconnects it nor queues what the engine sends.
    expect(sub.closed).toBe(true);
    await until(() => of('batches').length === 2, 'the batch received before the end');
    thread.handle({ op: 'remove', id: 5 });
    await until(() => of('removed').length === 1, 'the removal');
    cleanups.pop();
    expect(of('ended')).toHaveLength(1);
  });

  it('a message whose decoding throws is posted raw and the stream goes on; it never ends the subscription', async () => {
    const pub = await TestKvPublisher.start();
    cleanups.push(() => pub.close());
    const reports: IngestReport[] = [];
    const thread = new IngestThread((r) => reports.push(r));
    const of = (op: IngestReport['op']) => reports.filter((r) => r.op === op);
    const add = { op: 'add', id: 3, endpoint: pub.endpoint, topic: '', receiveHighWaterMark: 1000 } as const;
    thread.handle({ ...add, maxMessageBytes: 1 << 20, eagle: false, maxBatchElements: MAX_BATCH_ELEMENTS });
    cleanups.push(() => thread.stop());
    await pub.waitForSubscribers();
    // Rendering its dp rank in an error message overflowed the stack.
    const poison = deepRankBatch();
    await pub.sendFrames(['', encodeSeq(0n), poison]);
    await pub.publish([stored(1, 10n)]);
    await until(() => of('batches').length > 0 && packedCount(reports) === 1, 'the batch after the poisoned frame');
    expect(of('ended')).toEqual([]);
    const raw = reports.flatMap((r) => (r.op === 'batches' ? r.raw : []));
    expect(raw).toHaveLength(1);
    expect(raw[0]!.id).toBe(3);
    expect(Buffer.from(raw[0]!.frames[2]!).equals(Buffer.from(poison))).toBe(true);
  });

  it('stop closes every socket and waits for their loops; then it posts nothing and opens no socket', async () => {
    const { sockets, restore } = watchSubscribers();
    cleanups.push(restore);
    const pubs = [await TestKvPublisher.start(), await TestKvPublisher.start()];
    cleanups.push(async () => {
      for (const p of pubs) await p.close();
    });
    const reports: IngestReport[] = [];
    const thread = new IngestThread((r) => reports.push(r));
    const add = (id: number, endpoint: string) =>
      thread.handle({
        op: 'add',
        id,
        endpoint,
        topic: '',
        receiveHighWaterMark: 1000,
        maxMessageBytes: 1 << 20,
        eagle: false,
        maxBatchElements: MAX_BATCH_ELEMENTS,
      });
    add(1, pubs[0]!.endpoint);
    add(2, pubs[1]!.endpoint);
    for (const p of pubs) await p.waitForSubscribers();
    await pubs[0]!.publish([stored(1, 10n)]);
    await pubs[1]!.publish([stored(5, 20n)]);
    await until(() => sockets.length === 2, 'both sockets receiving');
    const before = reports.length;
    await thread.stop();
    expect(sockets.map((s) => s.closed)).toEqual([true, true]);
    // Nothing more: no report of the closing, no subscription taken after the stop.
    add(3, pubs[0]!.endpoint);
    thread.handle({ op: 'remove', id: 1 });
    await pubs[0]!.publish([stored(9, 30n)]);
    await new Promise((r) => setImmediate(r));
    expect(reports.slice(before)).toEqual([]);
    await thread.stop();
  });
});
