import { afterEach, describe, expect, it } from 'vitest';
import { encode } from '@msgpack/msgpack';
import { blockHashes } from '../../src/wasm/index.js';
import { ManualClock, silentLogger, type Logger } from '../../src/common/index.js';
import { KvEventApplier, KvEventManager } from '../../src/events/index.js';
import { captureWarnings } from '../helpers/capture-log.js';
import { ENCODINGS, TestKvPublisher, type TestEvent } from '../helpers/zmq-publisher.js';
import { until } from '../helpers/until.js';
import { watchSubscribers } from '../helpers/zmq-receive.js';

const BS = 4;
/** Worker 1's rank 0, the slot most tests subscribe. */
const W1 = { workerId: 1, dpRank: 0 };
const A = [1, 2, 3, 4];
const B = [5, 6, 7, 8];
const C = [9, 10, 11, 12];
const D = [13, 14, 15, 16];

/** Engine hash of block `i` of chain `id` (above 2^63, so it travels as a u64 / negative i64). */
function chainHash(id: number, i = 0): bigint {
  return (1n << 63n) + BigInt(id) * 1000n + BigInt(i);
}

/** A store of chain `id` under block 0 of chain `parent`. */
function stored(id: number, parent: number | null, tokens: number[]): TestEvent {
  const hashes = Array.from({ length: tokens.length / BS }, (_, i) => chainHash(id, i));
  return {
    type: 'stored',
    blockHashes: hashes,
    parent: parent === null ? null : chainHash(parent),
    tokens,
    blockSize: BS,
  };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function fixture(
  opts: {
    encoding?: (typeof ENCODINGS)[number];
    dpRank?: number;
    replay?: boolean;
    replayTimeoutMs?: number;
    logger?: Logger;
    maxMessageBytes?: number;
    maxReplyBytes?: number;
  } = {},
) {
  const pub = await TestKvPublisher.start({
    encoding: opts.encoding,
    dpRank: opts.dpRank,
    replay: opts.replay,
    topic: 'kv-events',
  });
  const clock = new ManualClock();
  const manager = new KvEventManager({
    applier: new KvEventApplier({ blockSize: BS }),
    clock,
    staleAfterMs: 1000,
    replayTimeoutMs: opts.replayTimeoutMs ?? 2000,
    logger: opts.logger,
    maxMessageBytes: opts.maxMessageBytes,
    maxReplyBytes: opts.maxReplyBytes,
  });
  cleanups.push(async () => {
    await manager.close();
    await pub.close();
    manager.indexes.dispose();
  });
  return { pub, manager, clock };
}

function depth(manager: KvEventManager, tokens: number[], workerId: number, dpRank = 0): number {
  const ix = manager.indexes.device;
  const m = ix.findMatches(blockHashes(tokens, BS));
  const slot = ix.findSlot(workerId, dpRank);
  for (let i = 0; i < m.count; i++) if (m.slots[i] === slot) return m.depths[i]!;
  return 0;
}

describe('KvEventSubscriber over real ZMQ sockets', () => {
  for (const encoding of ENCODINGS) {
    it(`${encoding}: stored chains and removals reach the index`, async () => {
      const dpRank = encoding.startsWith('sglang') ? 1 : 0;
      const { pub, manager } = await fixture({ encoding, dpRank });
      await manager.add({
        workerId: 3,
        dpRank,
        endpoint: pub.endpoint,
        replayEndpoint: pub.replayEndpoint,
        topic: 'kv-events',
      });
      await pub.waitForSubscribers();
      expect(manager.eventStatus(3)).toBe('never');
      await pub.publish([stored(1, null, [...A, ...B])]);
      await pub.publish([{ type: 'stored', blockHashes: [77n], parent: chainHash(1, 1), tokens: C, blockSize: BS }]);
      await until(() => depth(manager, [...A, ...B, ...C], 3, dpRank) === 3, 'three blocks');
      expect(manager.eventStatus(3, dpRank)).toBe('live');
      await pub.publish([{ type: 'removed', blockHashes: [77n] }]);
      await until(() => depth(manager, [...A, ...B, ...C], 3, dpRank) === 2, 'removal');
      const snap = manager.counters.snapshot();
      expect(snap.gaps).toBe(0);
      expect(snap.events.stored.ok).toBe(2);
      expect(snap.events.removed.ok).toBe(1);
      expect(snap.batches.live).toBe(3);
      expect(snap.decodeErrors.dp_rank_mismatch).toBe(0);
    });
  }

  it('dropped batches are recovered through replay over DEALER/ROUTER', async () => {
    const { pub, manager } = await fixture();
    await manager.add({
      workerId: 1,
      dpRank: 0,
      endpoint: pub.endpoint,
      replayEndpoint: pub.replayEndpoint,
      topic: 'kv-events',
    });
    await pub.waitForSubscribers();
    const s1 = stored(1, null, A);
    await pub.publish([s1]);
    await pub.publish([stored(2, 1, B)], { drop: true });
    await pub.publish([stored(3, null, C)], { drop: true });
    await pub.publish([stored(4, null, D)]);
    await until(
      () => manager.subscriber(W1)!.stream.cursor === 3n && !manager.subscriber(W1)!.stream.recovering,
      'recovery',
    );
    expect(pub.replayRequests).toEqual([1n]);
    expect(depth(manager, [...A, ...B], 1)).toBe(2);
    expect(depth(manager, C, 1)).toBe(1);
    expect(depth(manager, D, 1)).toBe(1);
    const s = manager.counters.snapshot();
    expect(s.gaps).toBe(1);
    expect(s.replays.recovered).toBe(1);
    expect(s.replayedBatches).toBe(3);
    expect(s.resets).toEqual({
      restart: 0,
      gap_without_replay: 0,
      replay_failed: 0,
      replay_incomplete: 0,
      inconsistent: 0,
      apply_failed: 0,
    });
  });

  it('a router joining late restores from the replay buffer', async () => {
    const { pub, manager } = await fixture();
    await pub.publish([stored(1, null, A)]); // nobody listening yet
    await pub.publish([stored(2, 1, B)]);
    await manager.add({
      workerId: 1,
      dpRank: 0,
      endpoint: pub.endpoint,
      replayEndpoint: pub.replayEndpoint,
      topic: 'kv-events',
    });
    await pub.waitForSubscribers();
    await pub.publish([stored(3, null, C)]);
    await until(
      () => manager.subscriber(W1)!.stream.cursor === 2n && !manager.subscriber(W1)!.stream.recovering,
      'restore',
    );
    expect(pub.replayRequests).toEqual([0n]);
    expect(depth(manager, [...A, ...B], 1)).toBe(2);
    expect(depth(manager, C, 1)).toBe(1);
  });

  it('a publisher restart clears and rebuilds that worker only', async () => {
    const { pub, manager } = await fixture();
    const other = await TestKvPublisher.start({ topic: 'kv-events' });
    cleanups.push(() => other.close());
    await manager.add({
      workerId: 1,
      dpRank: 0,
      endpoint: pub.endpoint,
      replayEndpoint: pub.replayEndpoint,
      topic: 'kv-events',
    });
    await manager.add({
      workerId: 2,
      dpRank: 0,
      endpoint: other.endpoint,
      replayEndpoint: other.replayEndpoint,
      topic: 'kv-events',
    });
    await pub.waitForSubscribers();
    await other.waitForSubscribers();
    await other.publish([stored(9, null, A)]);
    await pub.publish([stored(1, null, A)]);
    await pub.publish([stored(2, 1, B)]);
    await until(() => depth(manager, [...A, ...B], 1) === 2 && depth(manager, A, 2) === 1, 'both workers');
    pub.restart();
    await pub.publish([stored(5, null, C)]);
    await pub.publish([stored(6, 5, D)]);
    await until(() => depth(manager, [...C, ...D], 1) === 2, 'rebuild');
    expect(depth(manager, A, 1)).toBe(0);
    expect(depth(manager, A, 2)).toBe(1);
    expect(manager.counters.snapshot().resets.restart).toBe(1);
    expect(pub.replayRequests).toEqual([]);
  });

  it('garbled payloads and wrong frame counts are counted and logged with the worker, an unknown tag skipped; nothing else changes', async () => {
    const lines: Record<string, unknown>[] = [];
    const { pub, manager } = await fixture({ logger: captureWarnings(lines) });
    const other = await TestKvPublisher.start({ topic: 'kv-events' });
    cleanups.push(() => other.close());
    await manager.add({
      workerId: 1,
      dpRank: 0,
      endpoint: pub.endpoint,
      replayEndpoint: pub.replayEndpoint,
      topic: 'kv-events',
    });
    await manager.add({ workerId: 2, dpRank: 0, endpoint: other.endpoint, topic: 'kv-events' });
    await pub.waitForSubscribers();
    await other.waitForSubscribers();
    await other.publish([stored(9, null, A)]);
    await pub.publish([stored(1, null, B)]);
    await pub.sendFrames(['kv-events', Buffer.alloc(8)]);
    await pub.sendFrames(['kv-events', Buffer.alloc(3), Buffer.from([0x90])]);
    await pub.publishPayload(Uint8Array.of(0xc1, 0xff, 0x00));
    await pub.publishPayload(encode([1.5, [['Teleported', [1]]], 0]));
    await pub.publish([stored(2, null, C)]);
    await until(() => depth(manager, C, 1) === 1, 'the valid batch after the garbage');
    const s = manager.counters.snapshot();
    expect(s.decodeErrors).toMatchObject({ frame_count: 1, bad_sequence: 1, msgpack: 1, unknown_tag: 0 });
    expect(s.slots['1:0']!.decodeErrors).toBe(3);
    expect(s.unknownSkipped).toBe(1);
    expect(s.slots['2:0']?.decodeErrors ?? 0).toBe(0);
    expect(depth(manager, B, 1)).toBe(1);
    expect(depth(manager, A, 2)).toBe(1);
    expect(manager.indexes.device.blockCount(2, 0)).toBe(1);
    // The unknown tag's event is skipped, its (empty) batch not refused: one line for the episode, no drop.
    expect(s.slots['1:0']!.dropped).toBe(0);
    expect(lines.filter((l) => l.workerId === 1).length).toBe(4);
    expect(s.gaps).toBe(0);
  });

  it('a replay endpoint that never answers times out; the slot is cleared and ingestion continues', async () => {
    const { pub, manager } = await fixture({ replayTimeoutMs: 100 });
    pub.replayMode = 'silent';
    await manager.add({
      workerId: 1,
      dpRank: 0,
      endpoint: pub.endpoint,
      replayEndpoint: pub.replayEndpoint,
      topic: 'kv-events',
    });
    await pub.waitForSubscribers();
    await pub.publish([stored(1, null, A)]);
    await pub.publish([{ type: 'removed', blockHashes: [chainHash(1)] }], { drop: true });
    await pub.publish([stored(3, null, C)]);
    await until(
      () => manager.counters.snapshot().replays.failed === 1 && !manager.subscriber(W1)!.stream.recovering,
      'replay failure',
    );
    expect(depth(manager, A, 1)).toBe(0);
    expect(depth(manager, C, 1)).toBe(1);
    expect(manager.counters.snapshot().resets.replay_failed).toBe(1);
    pub.replayMode = 'answer';
    await pub.publish([stored(4, 3, D)]);
    await until(() => depth(manager, [...C, ...D], 1) === 2, 'continuing');
  });
});

describe('a subscription whose socket fails for good', () => {
  it('stops counting as connected, closes its socket, and is counted and logged once', async () => {
    const { sockets, restore } = watchSubscribers();
    cleanups.push(() => Promise.resolve(restore()));
    const warnings: { msg: string; fields: Record<string, unknown> }[] = [];
    const log: Logger = { ...silentLogger, warn: (fields, msg) => warnings.push({ msg, fields }), child: () => log };
    const { pub, manager } = await fixture({ logger: log });
    await manager.add({ ...W1, endpoint: pub.endpoint, replayEndpoint: pub.replayEndpoint, topic: 'kv-events' });
    await pub.waitForSubscribers();
    await pub.publish([stored(1, null, A)]);
    await until(() => depth(manager, A, 1) === 1 && manager.connections(1).connected === 1, 'the first batch');
    expect(sockets).toHaveLength(1);
    const sub = sockets[0]!;
    // The receive after the next message times out: a receive error, which ZMQ does not recover from.
    sub.receiveTimeout = 1;
    await pub.publish([stored(2, 1, B)]);
    const ended = () => warnings.filter((w) => w.msg.includes('KV event subscription ended'));
    await until(() => ended().length > 0, 'the end of the subscription');
    expect(manager.connections(1)).toEqual({ connected: 0, ranks: 1 });
    expect(manager.counters.snapshot().connections).toEqual({ connected: 1, disconnected: 0, ended: 1 });
    // Nothing reads the socket any more: closed, so ZMQ neither reconnects it nor queues what the engine sends.
    expect(sub.closed).toBe(true);
    await until(() => depth(manager, [...A, ...B], 1) === 2, 'the batch received before the end');
    expect(manager.connections(1)).toEqual({ connected: 0, ranks: 1 });
    expect(ended()).toHaveLength(1);
    expect(ended()[0]!.fields).toMatchObject({ workerId: 1, dpRank: 0, endpoint: pub.endpoint });
    expect(warnings.filter((w) => w.msg.includes('disconnected'))).toEqual([]);
  });
});

describe('KvEventManager', () => {
  it('starts and stops subscribers as workers come and go, and forgets removed workers', async () => {
    const { pub, manager, clock } = await fixture();
    const p2 = await TestKvPublisher.start({ topic: 'kv-events', dpRank: 1 });
    cleanups.push(() => p2.close());
    await manager.sync([
      { workerId: 1, dpRank: 0, endpoint: pub.endpoint, replayEndpoint: pub.replayEndpoint, topic: 'kv-events' },
      { workerId: 1, dpRank: 1, endpoint: p2.endpoint, replayEndpoint: p2.replayEndpoint, topic: 'kv-events' },
    ]);
    await pub.waitForSubscribers();
    await p2.waitForSubscribers();
    await pub.publish([stored(1, null, A)]);
    await until(() => depth(manager, A, 1, 0) === 1, 'rank 0');
    expect(manager.eventStatus(1, 0)).toBe('live');
    expect(manager.eventStatus(1, 1)).toBe('never');
    expect(manager.eventStatus(1)).toBe('never');
    await p2.publish([stored(2, null, B)]);
    await until(() => depth(manager, B, 1, 1) === 1, 'rank 1');
    expect(manager.eventStatus(1)).toBe('live');
    manager.noteDispatch({ workerId: 1, dpRank: 1 });
    clock.advance(1000);
    expect(manager.eventStatus(1, 1)).toBe('stale');
    expect(manager.eventStatus(1)).toBe('stale');

    // Same sources again: nothing restarts.
    const sub0 = manager.subscriber(W1);
    await manager.sync(manager.sources());
    expect(manager.subscriber(W1)).toBe(sub0);

    await manager.sync([
      { workerId: 1, dpRank: 0, endpoint: pub.endpoint, replayEndpoint: pub.replayEndpoint, topic: 'kv-events' },
    ]);
    expect(manager.subscriber({ workerId: 1, dpRank: 1 })).toBeUndefined();
    expect(manager.indexes.device.findSlot(1, 1)).toBeUndefined();
    expect(manager.eventStatus(1)).toBe('live');
    await manager.remove(1);
    expect(manager.sources()).toEqual([]);
    expect(manager.indexes.device.size).toBe(0);
    expect(manager.eventStatus(1)).toBe('never');
  });

  it('rejects invalid sources with a typed error', async () => {
    const { manager } = await fixture();
    await expect(manager.add({ workerId: -1, dpRank: 0, endpoint: 'tcp://127.0.0.1:1' })).rejects.toMatchObject({
      code: 'KVG_ERR_INVALID_ARGUMENT',
    });
    await expect(manager.add({ workerId: 1, dpRank: 0, endpoint: 'http://x' })).rejects.toMatchObject({
      code: 'KVG_ERR_INVALID_ARGUMENT',
    });
    await expect(manager.add({ workerId: 1, dpRank: 0, endpoint: 'tcp://127.0.0.1' })).rejects.toMatchObject({
      code: 'KVG_ERR_INVALID_ARGUMENT',
    });
    expect(manager.sources()).toEqual([]);
  });

  describe('a replay answer is bounded as live messages are', () => {
    /** A gap whose replay answer holds `payloads` (raw bytes: the bounds apply before anything is decoded). */
    async function gapAnswered(opts: Parameters<typeof fixture>[0], payloads: Uint8Array[]) {
      const lines: Record<string, unknown>[] = [];
      const { pub, manager } = await fixture({ ...opts, logger: captureWarnings(lines) });
      await manager.add({ ...W1, endpoint: pub.endpoint, replayEndpoint: pub.replayEndpoint, topic: 'kv-events' });
      await pub.waitForSubscribers();
      await pub.publish([stored(1, null, A)]);
      for (const p of payloads) await pub.publishPayload(p, { drop: true });
      await pub.publish([stored(3, null, C)]);
      await until(
        () => manager.counters.snapshot().replays.failed === 1 && !manager.subscriber(W1)!.stream.recovering,
        'replay failure',
      );
      expect(pub.replayRequests).toEqual([1n]);
      // Failed as any replay: the slot is cleared and follows live batches.
      expect(manager.counters.snapshot().resets.replay_failed).toBe(1);
      expect(depth(manager, A, 1)).toBe(0);
      return lines.filter((l) => l.workerId === 1 && typeof l.from === 'string');
    }

    it('a reply message over maxMessageBytes is never taken: the replay fails, counted and logged', async () => {
      const lines = await gapAnswered({ maxMessageBytes: 64 * 1024, replayTimeoutMs: 300 }, [
        new Uint8Array(256 * 1024),
      ]);
      expect(lines).toHaveLength(1);
      expect(String(lines[0]!.err)).toMatch(/reply message over 65536 bytes/);
    });

    it('an answer over maxReplyBytes in all fails the replay, counted and logged', async () => {
      const chunk = () => new Uint8Array(40 * 1024);
      const lines = await gapAnswered({ maxReplyBytes: 100 * 1024 }, [chunk(), chunk(), chunk()]);
      expect(lines).toHaveLength(1);
      expect(String(lines[0]!.err)).toMatch(/answer over 102400 bytes/);
    });
  });
});
