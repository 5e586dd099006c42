// issue 13 items 6 and 7: reordered batches do not look like restarts and replays coalesce;
// garbage sequence numbers are dropped without moving the cursor, and a stream inconsistent for too long is reset.
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { decodeKvEventBatch, type KvEventStream } from '../../src/events/index.js';
import { TurnScheduler } from '../../src/events/turn-scheduler.js';
import { mulberry32 } from '../helpers/rng.js';
import { encodeBatch } from '../helpers/zmq-publisher.js';
import { chain, randomSeq, stored } from './stream-fixture.js';

describe('reordered batches (issue 13 item 6)', () => {
  it('swapped pairs over a long run: no restart, no reset, at most one replay in flight, index equal to the engine', async () => {
    const rng = mulberry32(13);
    const t = chain();
    t.engine.auto = false;
    let maxWaiting = 0;
    for (let i = 0; i < 400; i++) {
      if (rng() < 0.5) {
        const a = t.next();
        const b = t.next();
        t.deliver(b);
        t.deliver(a);
      } else t.deliver(t.next());
      maxWaiting = Math.max(maxWaiting, t.engine.waiting);
      if (rng() < 0.1) while (t.engine.waiting > 0) t.engine.answer();
      await Promise.resolve();
    }
    while (t.engine.waiting > 0) t.engine.answer();
    await t.stream.whenSettled();
    const s = t.counters.snapshot();
    expect(s.resets).toMatchObject({ restart: 0, replay_incomplete: 0, replay_failed: 0, inconsistent: 0 });
    expect(maxWaiting).toBeLessThanOrEqual(1);
    expect(t.depth(t.tokens)).toBe(t.count());
    expect(t.stream.cursor).toBe(BigInt(t.count() - 1));
    expect(s.dropped.garbage).toBe(0);
  });

  it('a pair swapped within one event-loop turn needs no replay at all', () => {
    const clock = new ManualClock();
    const queued: (() => void)[] = [];
    const scheduler = new TurnScheduler({
      clock,
      maxEventsPerTurn: 1000,
      maxTurnMs: 1000,
      defer: (fn) => queued.push(fn),
    });
    const t = chain({ clock, scheduler });
    t.deliver(t.next());
    for (let i = 0; i < 50; i++) {
      const a = t.next();
      const b = t.next();
      t.deliver(b);
      t.deliver(a);
      while (queued.length > 0) queued.shift()!();
    }
    expect(t.engine.requests).toEqual([]);
    expect(t.depth(t.tokens)).toBe(101);
  });

  it('live batches filling the gap are applied at once, not held behind the replay in flight', () => {
    const t = chain();
    t.engine.auto = false;
    t.deliver(t.next());
    const late = t.next();
    t.deliver(t.next()); // gap: seq 1 not yet here
    expect(t.engine.requests).toEqual([1n]);
    t.deliver(late); // the reordered batch arrives while the replay is in flight
    t.deliver(t.next());
    expect(t.stream.recovering).toBe(true);
    expect(t.depth(t.tokens)).toBe(4);
  });

  it('a real restart is still detected: seq 0 again, or repeated batches far below, even reordered', async () => {
    const t = chain();
    for (let i = 0; i < 200; i++) t.deliver(t.next());
    // Restarted engine, empty cache: its first batches come swapped, seq 1 before 0.
    t.engine.seq = 0n;
    t.engine.buffer.length = 0;
    const fresh = [9001, 9002, 9003, 9004];
    const b0 = t.engine.batch([stored(90, null, fresh)]);
    const b1 = t.engine.batch([stored(91, 9000, [9005, 9006, 9007, 9008])]);
    t.deliver(b1);
    t.deliver(b0);
    await t.stream.whenSettled();
    expect(t.counters.snapshot().resets.restart).toBe(1);
    expect(t.depth(t.tokens)).toBe(0);
    expect(t.depth([...fresh, 9005, 9006, 9007, 9008])).toBe(2);

    // A restart whose seq 0 was missed: two batches far below the newest confirm it; a replay from 0 restores.
    const u = chain();
    for (let i = 0; i < 200; i++) u.deliver(u.next());
    u.engine.seq = 0n;
    u.engine.buffer.length = 0;
    u.engine.batch([stored(80, null, fresh)]); // missed
    u.engine.batch([{ type: 'removed', blockHashes: [1n] }]); // missed
    u.deliver(u.engine.batch([stored(81, 8000, [9005, 9006, 9007, 9008])]));
    expect(u.counters.snapshot().resets.restart).toBe(0); // one batch is not proof
    u.deliver(u.engine.batch([{ type: 'removed', blockHashes: [999n] }]));
    await u.stream.whenSettled();
    expect(u.counters.snapshot().resets.restart).toBe(1);
    expect(u.engine.requests).toEqual([0n]);
    expect(u.depth([...fresh, 9005, 9006, 9007, 9008])).toBe(2);
  });

  it('coalesces replays: gaps during a replay ask nothing more; a restart aborts the replay in flight', async () => {
    const t = chain();
    t.engine.auto = false;
    t.deliver(t.next());
    t.next(); // lost
    t.deliver(t.next());
    t.next(); // lost
    t.deliver(t.next());
    t.next(); // lost
    t.deliver(t.next());
    // Three holes, one request: the answer (the engine's buffer when asked) covers the first;
    // the next request goes out only once it is applied.
    expect(t.engine.requests).toEqual([1n]);
    t.engine.answer();
    await new Promise((r) => setImmediate(r));
    expect(t.engine.requests).toEqual([1n, 3n]);
    t.engine.answer();
    await t.stream.whenSettled();
    expect(t.engine.requests).toEqual([1n, 3n]);
    expect(t.depth(t.tokens)).toBe(7);
    // Another hole, replay in flight; then the engine restarts.
    t.next();
    t.deliver(t.next());
    expect(t.engine.requests).toEqual([1n, 3n, 7n]);
    t.engine.seq = 0n;
    t.engine.buffer.length = 0;
    t.deliver(t.engine.batch([stored(70, null, [7001, 7002, 7003, 7004])]));
    expect(t.engine.signals[2]!.aborted).toBe(true);
    expect(t.stream.recovering).toBe(false);
    expect(t.depth([7001, 7002, 7003, 7004])).toBe(1);
  });
});

describe('garbage sequence numbers (issue 13 item 7)', () => {
  it('a flood of random sequence numbers between genuine batches is dropped; the cursor and the index stay true', async () => {
    const rng = mulberry32(7);
    const t = chain();
    const junk = encodeBatch([stored(66, null, [66, 66, 66, 66])]);
    for (let i = 0; i < 300; i++) {
      t.deliver(t.next());
      for (let g = 0; g < 50; g++) t.deliver({ seq: randomSeq(rng), payload: junk });
    }
    await t.stream.whenSettled();
    const s = t.counters.snapshot();
    expect(s.dropped.garbage).toBe(300 * 50);
    expect(t.stream.cursor).toBe(299n);
    expect(t.depth(t.tokens)).toBe(300);
    expect(t.depth([66, 66, 66, 66])).toBe(0);
    expect(s.resets).toMatchObject({ restart: 0, replay_incomplete: 0, inconsistent: 0 });
    expect(t.engine.requests).toEqual([]);
  });

  it('a plausible-looking garbage seq is found out by the replay and dropped, without a reset', async () => {
    const t = chain();
    for (let i = 0; i < 10; i++) t.deliver(t.next());
    t.deliver({ seq: 5000n, payload: encodeBatch([stored(66, null, [66, 66, 66, 66])]) });
    await t.stream.whenSettled();
    expect(t.engine.requests).toEqual([10n]);
    for (let i = 0; i < 10; i++) t.deliver(t.next());
    await t.stream.whenSettled();
    expect(t.counters.snapshot().dropped.garbage).toBe(1);
    expect(t.counters.snapshot().resets.replay_incomplete).toBe(0);
    expect(t.depth(t.tokens)).toBe(20);
    expect(t.depth([66, 66, 66, 66])).toBe(0);
  });

  it('a stream inconsistent for longer than the bound is reset from a replay, and logged', async () => {
    const clock = new ManualClock();
    const lines: Record<string, unknown>[] = [];
    const log = {
      warn: (o: Record<string, unknown>) => void lines.push(o),
      info: () => {},
      error: () => {},
      debug: () => {},
      child: () => log,
    } as never;
    const t = chain({ clock, logger: log, options: { inconsistentAfterMs: 3000 } });
    for (let i = 0; i < 100; i++) t.deliver(t.next());
    // A restarted engine publishes once (its seq 0 missed), then goes quiet: one piece of evidence only.
    t.engine.seq = 1n;
    t.engine.buffer.length = 0;
    t.deliver(t.engine.batch([stored(50, null, [5001, 5002, 5003, 5004])]));
    expect(t.counters.snapshot().resets.restart).toBe(0);
    clock.advance(2999);
    t.stream.checkConsistency();
    expect(t.engine.requests).toEqual([]);
    clock.advance(1);
    t.stream.checkConsistency();
    await t.stream.whenSettled();
    expect(t.counters.snapshot().resets.inconsistent).toBe(1);
    expect(t.engine.requests).toEqual([0n]);
    expect(t.depth(t.tokens)).toBe(0);
    expect(t.depth([5001, 5002, 5003, 5004])).toBe(1);
    expect(lines.some((l) => l.workerId === 7 && typeof l.forMs === 'number')).toBe(true);
  });

  it('without a replay endpoint the inconsistent slot is cleared and scored approximately', () => {
    const clock = new ManualClock();
    const t = chain({ clock, replay: false, options: { inconsistentAfterMs: 3000 } });
    for (let i = 0; i < 100; i++) t.deliver(t.next());
    t.deliver({ seq: 3n, payload: encodeBatch([stored(50, null, [5001, 5002, 5003, 5004])]) });
    clock.advance(3000);
    t.stream.checkConsistency();
    expect(t.counters.snapshot().resets.inconsistent).toBe(1);
    expect(t.depth(t.tokens)).toBe(0);
    expect(t.liveness.status(7, 0)).toBe('stale');
    // Events rebuild it from the next batch on.
    t.deliver({ seq: 4n, payload: encodeBatch([stored(51, null, [5001, 5002, 5003, 5004])]) });
    expect(t.depth([5001, 5002, 5003, 5004])).toBe(1);
  });
});

describe('a batch for another dp rank (a mis-wired endpoint)', () => {
  const otherRank = (id: number): Uint8Array =>
    encodeBatch([{ type: 'cleared' }, stored(id, null, [id, id, id, id])], { dpRank: 1 });
  /** Delivered raw (main-thread ingestion) or already decoded (an ingestion thread's). */
  const paths: [string, (stream: KvEventStream, seq: bigint, payload: Uint8Array) => void][] = [
    ['raw', (stream, seq, payload) => stream.onMessage(seq, payload)],
    [
      'decoded',
      (stream, seq, payload) => {
        const r = decodeKvEventBatch(payload);
        if (!r.ok) throw new Error(r.error.message);
        stream.onDecoded(seq, r.batch);
      },
    ],
  ];

  for (const [path, offer] of paths) {
    it(`${path}: its seq 0 does not restart the slot; the slot keeps its blocks and its cursor`, () => {
      const t = chain();
      for (let i = 0; i < 5; i++) t.deliver(t.next());
      offer(t.stream, 0n, otherRank(900));
      const s = t.counters.snapshot();
      expect(s.resets.restart).toBe(0);
      expect(s.decodeErrors.dp_rank_mismatch).toBe(1);
      expect(t.stream.cursor).toBe(4n);
      expect(t.depth(t.tokens)).toBe(5);
      t.deliver(t.next());
      expect(t.depth(t.tokens)).toBe(6);
      expect(t.counters.snapshot().gaps).toBe(0);
    });

    it(`${path}: it does not start a slot that has no cursor yet`, () => {
      const t = chain({ replay: false });
      offer(t.stream, 7n, otherRank(900));
      expect(t.stream.cursor).toBeNull();
      expect(t.counters.snapshot().decodeErrors.dp_rank_mismatch).toBe(1);
      // The engine's own first batch starts it, with no restart to clear.
      t.deliver(t.next());
      t.deliver(t.next());
      expect(t.stream.cursor).toBe(1n);
      expect(t.depth(t.tokens)).toBe(2);
      expect(t.counters.snapshot().resets.restart).toBe(0);
    });
  }
});
