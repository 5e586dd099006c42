// issue 23 section 2: floods of random frames on a KV-event stream. Garbage is dropped and moves
// nothing (no reset, no timer), frames that cannot be read never start or restart a slot, garbage
// parked while a slot restores is dropped by the restore's answer, a publisher that moved its
// sequence far ahead is a restart, and batches a flood pushed out are caught up from the replay buffer.
import { describe, expect, it } from 'vitest';
import { mulberry32 } from '../helpers/rng.js';
import { encodeBatch } from '../helpers/zmq-publisher.js';
import { chain, randomSeq, stored } from './stream-fixture.js';

/** A well-formed batch that would wipe the worker if it were applied. */
const WIPE = encodeBatch([{ type: 'cleared' }]);
/** msgpack nobody can read: a reserved byte; nested array32 headers claiming 4 GiB-1 elements each. */
const UNREADABLE = [
  Uint8Array.of(0xc1),
  Uint8Array.from(Array.from({ length: 8 }, () => [0xdd, 0xff, 0xff, 0xff, 0xff]).flat()),
];

describe('garbage never resets a slot nor starts its consistency timer', () => {
  it('one far-ahead frame on an idle stream: no reset however long it stays idle, one catch-up replay, the index intact', async () => {
    const t = chain({ options: { inconsistentAfterMs: 3000 } });
    for (let i = 0; i < 100; i++) t.deliver(t.next());
    t.window(10); // history longer than the replay buffer: a cleared slot could not be rebuilt
    t.deliver({ seq: 1n << 60n, payload: WIPE });
    for (let s = 0; s < 30; s++) {
      t.clock.advance(1000);
      t.stream.checkConsistency();
      await t.stream.whenSettled();
    }
    const s = t.counters.snapshot();
    expect(s.resets).toEqual({
      restart: 0,
      gap_without_replay: 0,
      replay_failed: 0,
      replay_incomplete: 0,
      inconsistent: 0,
      apply_failed: 0,
    });
    expect(s.dropped.garbage).toBe(1);
    expect(t.engine.requests).toEqual([100n]); // the catch-up after the flood: nothing was missing
    expect(t.depth(t.tokens)).toBe(100);
    expect(t.stream.cursor).toBe(99n);
    t.deliver(t.next());
    expect(t.depth(t.tokens)).toBe(101);
  });

  it('a flood lasting ten seconds: batches between garbage applied, at most one catch-up replay a second, nothing reset', async () => {
    const rng = mulberry32(23);
    const t = chain({ options: { inconsistentAfterMs: 3000 } });
    for (let i = 0; i < 20; i++) t.deliver(t.next());
    for (let ms = 0; ms < 10_000; ms += 50) {
      for (let g = 0; g < 40; g++) t.deliver({ seq: randomSeq(rng), payload: rng() < 0.5 ? WIPE : UNREADABLE[g % 2]! });
      if (ms % 500 === 0) t.deliver(t.next());
      t.clock.advance(50);
      t.stream.checkConsistency();
      await t.stream.whenSettled();
    }
    const s = t.counters.snapshot();
    expect(s.resets).toEqual({
      restart: 0,
      gap_without_replay: 0,
      replay_failed: 0,
      replay_incomplete: 0,
      inconsistent: 0,
      apply_failed: 0,
    });
    expect(s.dropped.garbage + s.decodeErrors.msgpack).toBe(200 * 40);
    expect(t.engine.requests.length).toBeGreaterThan(0);
    expect(t.engine.requests.length).toBeLessThanOrEqual(10);
    expect(t.depth(t.tokens)).toBe(t.count());
  });
});

describe('frames that cannot be read never start a slot nor restart it', () => {
  it('seq 0 again, or below the newest seen, with a payload nobody can read: no restart, counted as a decode error', () => {
    const t = chain();
    for (let i = 0; i < 100; i++) t.deliver(t.next());
    for (const payload of UNREADABLE) {
      t.deliver({ seq: 0n, payload });
      t.deliver({ seq: 3n, payload });
    }
    const s = t.counters.snapshot();
    expect(s.resets.restart).toBe(0);
    expect(s.decodeErrors.msgpack).toBe(4);
    expect(t.depth(t.tokens)).toBe(100);
    t.deliver(t.next());
    expect(t.depth(t.tokens)).toBe(101);
  });

  it("a slot without a cursor (no replay endpoint) is not started by an unreadable frame: the engine's next batch starts it", () => {
    const t = chain({ replay: false });
    t.engine.seq = 5n; // the gateway joined late
    for (const payload of UNREADABLE) t.deliver({ seq: 1n << 62n, payload });
    expect(t.stream.cursor).toBeNull();
    t.deliver(t.next());
    t.deliver(t.next());
    expect(t.stream.cursor).toBe(6n);
    expect(t.depth(t.tokens)).toBe(2);
    expect(t.counters.snapshot().resets.restart).toBe(0);
  });
});

describe('a slot restoring from the replay buffer under a flood', () => {
  it("garbage parked meanwhile is dropped by the restore's answer, and the next genuine batch applies at once", async () => {
    const rng = mulberry32(5);
    const t = chain();
    t.engine.auto = false;
    for (let i = 0; i < 20; i++) t.next(); // published before the gateway subscribed
    t.deliver(t.next()); // seq 20: the slot restores from the engine first
    expect(t.engine.requests).toEqual([0n]);
    for (let g = 0; g < 2000; g++) t.deliver({ seq: randomSeq(rng), payload: WIPE });
    t.engine.answer();
    await new Promise((r) => setImmediate(r)); // the answer settles and is applied (inline scheduler)
    expect(t.depth(t.tokens)).toBe(21);
    expect(t.stream.recovering).toBe(false);
    expect(t.counters.snapshot().dropped.garbage).toBe(2000);
    t.deliver(t.next());
    expect(t.depth(t.tokens)).toBe(22);
    expect(t.engine.requests).toEqual([0n]);
    expect(t.counters.snapshot().resets).toMatchObject({ restart: 0, inconsistent: 0, replay_incomplete: 0 });
  });
});

describe('a publisher that moved its sequence far ahead', () => {
  it('two far-ahead batches close together (TensorRT-LLM restarted: seq from time_ns) are a restart, restored from replay', async () => {
    const t = chain();
    for (let i = 0; i < 50; i++) t.deliver(t.next());
    const old = [...t.tokens];
    t.engine.seq = 1_790_000_000_000_000_000n;
    t.engine.buffer.length = 0;
    const fresh = [9001, 9002, 9003, 9004];
    t.deliver(t.engine.batch([stored(90, null, fresh)]));
    expect(t.counters.snapshot().resets.restart).toBe(0); // one far-ahead batch is garbage
    t.deliver(t.engine.batch([stored(91, 9000, [9005, 9006, 9007, 9008])]));
    await t.stream.whenSettled();
    expect(t.counters.snapshot().resets.restart).toBe(1);
    expect(t.depth(old)).toBe(0);
    expect(t.depth([...fresh, 9005, 9006, 9007, 9008])).toBe(2);
    expect(t.stream.cursor).toBe(1_790_000_000_000_000_001n);
  });
});

describe('batches a flood pushed out are caught up', () => {
  it('lost on the wire during a flood, the engine then idle: replayed once the stream is calm, without a reset', async () => {
    const rng = mulberry32(9);
    const t = chain();
    for (let i = 0; i < 50; i++) t.deliver(t.next());
    for (let k = 0; k < 3; k++) {
      for (let g = 0; g < 100; g++) t.deliver({ seq: randomSeq(rng), payload: WIPE });
      t.next(); // dropped at a high-water mark: nothing after it reveals the hole
    }
    t.clock.advance(999);
    t.stream.checkConsistency();
    expect(t.engine.requests).toEqual([]);
    t.clock.advance(1);
    t.stream.checkConsistency();
    await t.stream.whenSettled();
    expect(t.engine.requests).toEqual([50n]);
    expect(t.depth(t.tokens)).toBe(53);
    expect(t.counters.snapshot().resets).toMatchObject({ replay_failed: 0, replay_incomplete: 0, inconsistent: 0 });
  });

  it('a catch-up that fails keeps the slot and is asked again a second later', async () => {
    const t = chain();
    for (let i = 0; i < 10; i++) t.deliver(t.next());
    t.engine.auto = false;
    t.deliver({ seq: 1n << 61n, payload: WIPE });
    t.next(); // lost
    t.clock.advance(1000);
    t.stream.checkConsistency();
    expect(t.engine.requests).toEqual([10n]);
    t.engine.fail();
    await t.stream.whenSettled();
    expect(t.counters.snapshot().resets.replay_failed).toBe(0);
    expect(t.depth(t.tokens.slice(0, 40))).toBe(10);
    t.clock.advance(1000);
    t.stream.checkConsistency();
    expect(t.engine.requests).toEqual([10n, 10n]);
    t.engine.answer();
    await t.stream.whenSettled();
    expect(t.depth(t.tokens)).toBe(11);
  });
});

describe('a replay answer holding seqs the publisher cannot have sent', () => {
  it('a far-ahead batch in a gap answer is dropped as garbage: the gap is filled, and live batches still apply', async () => {
    const t = chain();
    for (let i = 0; i < 10; i++) t.deliver(t.next());
    t.next(); // seq 10: lost
    const b11 = t.next();
    // A corrupt reply message after the genuine ones: a cleared batch numbered 2^60.
    t.engine.buffer.push({ seq: 1n << 60n, payload: WIPE });
    t.deliver(b11);
    await t.stream.whenSettled();
    expect(t.engine.requests).toEqual([10n]);
    expect(t.stream.cursor).toBe(11n);
    expect(t.depth(t.tokens)).toBe(12);
    for (let i = 0; i < 5; i++) t.deliver(t.next());
    expect(t.stream.cursor).toBe(16n);
    expect(t.depth(t.tokens)).toBe(17);
    const s = t.counters.snapshot();
    expect(s.dropped.garbage).toBe(1);
    expect(s.replays).toMatchObject({ recovered: 1, incomplete: 0, failed: 0 });
    expect(s.slots['7:0']!.resets).toBe(0);
  });

  it('an endpoint that answers only garbage fails the replay: the slot is cleared and follows live batches again', async () => {
    const t = chain();
    for (let i = 0; i < 10; i++) t.deliver(t.next());
    t.next(); // seq 10: lost
    const b11 = t.next();
    t.engine.buffer.length = 0;
    t.engine.buffer.push({ seq: 1n << 60n, payload: WIPE });
    t.deliver(b11);
    await t.stream.whenSettled();
    expect(t.counters.snapshot().resets.replay_failed).toBe(1);
    expect(t.stream.cursor).toBe(11n); // the parked batch starts the slot over
    expect(t.counters.snapshot().replays).toMatchObject({ recovered: 0, failed: 1 });
    // Not deaf: what the engine stores from now on is indexed.
    const fresh = [7001, 7002, 7003, 7004];
    t.deliver(t.engine.batch([stored(70, null, fresh)]));
    expect(t.stream.cursor).toBe(12n);
    expect(t.depth(fresh)).toBe(1);
  });
});
