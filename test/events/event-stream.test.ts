import { describe, expect, it } from 'vitest';
import { encode } from '@msgpack/msgpack';
import { ManualClock } from '../../src/common/index.js';
import { captureWarnings } from '../helpers/capture-log.js';
import { KvEventApplier, KvEventStream, SequenceCursor, encodeSeq, ingestContext } from '../../src/events/index.js';
import { encodeBatch } from '../helpers/zmq-publisher.js';
import { A, B, BS, C, D, FakeEngine, deepRankBatch, setup, stored } from './stream-fixture.js';

describe('SequenceCursor', () => {
  it('classifies initial, contiguous, stale and gap', () => {
    const c = new SequenceCursor();
    expect(c.observe(5n)).toBe('initial');
    c.advance(5n);
    expect(c.observe(6n)).toBe('contiguous');
    expect(c.observe(5n)).toBe('stale');
    expect(c.observe(2n)).toBe('stale');
    expect(c.observe(8n)).toBe('gap');
    c.reset();
    expect(c.last).toBeNull();
  });
});

describe('KvEventStream', () => {
  it('applies a contiguous stream', () => {
    const { engine, stream, deliver, depth, counters } = setup();
    deliver(engine.batch([stored(1, null, A)]));
    deliver(engine.batch([stored(2, 100, B)]));
    deliver(engine.batch([stored(3, 200, C)]));
    expect(stream.cursor).toBe(2n);
    expect(depth([...A, ...B, ...C])).toBe(3);
    expect(engine.requests).toEqual([]);
    expect(counters.snapshot().gaps).toBe(0);
  });

  it('gap -> replay from the first missing seq -> recovered, with live batches parked meanwhile', async () => {
    const { engine, stream, deliver, depth, counters } = setup();
    engine.auto = false;
    deliver(engine.batch([stored(1, null, A)]));
    engine.batch([stored(2, 100, B)]); // lost on the wire
    deliver(engine.batch([stored(3, 200, C)]));
    expect(stream.recovering).toBe(true);
    expect(engine.requests).toEqual([1n]);
    // A batch arriving during the replay is parked, not applied out of order.
    const late = engine.batch([stored(4, 300, D)]);
    deliver(late);
    expect(stream.pendingCount).toBe(2);
    expect(depth([...A, ...B, ...C, ...D])).toBe(1);
    engine.answer();
    await stream.whenSettled();
    expect(stream.recovering).toBe(false);
    expect(stream.cursor).toBe(3n);
    expect(depth([...A, ...B, ...C, ...D])).toBe(4);
    const s = counters.snapshot();
    expect(s.gaps).toBe(1);
    expect(s.replays).toEqual({ recovered: 1, incomplete: 0, failed: 0 });
    // The answer holds seqs 1 and 2; the parked 2 is then stale and the parked 3 applies.
    expect(s.replayedBatches).toBe(2);
    expect(s.staleBatches).toBe(1);
    expect(s.resets.replay_incomplete).toBe(0);
  });

  it('a replay buffer that no longer holds the missing batches clears the slot and continues', async () => {
    const { engine, stream, deliver, depth, counters, applier } = setup();
    engine.auto = false;
    deliver(engine.batch([stored(1, null, A)]));
    engine.batch([{ type: 'removed', blockHashes: [100n] }]); // lost on the wire...
    const next = engine.batch([stored(3, null, C)]);
    engine.buffer.splice(0, 2); // ...and gone from the engine's buffer
    deliver(next);
    engine.answer();
    await stream.whenSettled();
    // Block A was removed by the lost batch; keeping it would over-predict.
    expect(depth(A)).toBe(0);
    expect(depth(C)).toBe(1);
    expect(applier.indexes.device.blockCount(7, 0)).toBe(1);
    expect(stream.cursor).toBe(2n);
    const s = counters.snapshot();
    expect(s.replays.incomplete).toBe(1);
    expect(s.resets.replay_incomplete).toBe(1);
  });

  it('a failed replay clears the slot and continues from the parked live batches', async () => {
    const { engine, stream, deliver, depth, counters } = setup();
    engine.auto = false;
    deliver(engine.batch([stored(1, null, A)]));
    engine.batch([{ type: 'removed', blockHashes: [100n] }]);
    deliver(engine.batch([stored(3, null, C)]));
    deliver(engine.batch([stored(4, 300, D)]));
    engine.fail();
    await stream.whenSettled();
    expect(depth(A)).toBe(0);
    expect(depth([...C, ...D])).toBe(2);
    expect(stream.cursor).toBe(3n);
    expect(counters.snapshot().replays.failed).toBe(1);
    expect(counters.snapshot().resets.replay_failed).toBe(1);
  });

  it('without a replay endpoint a gap clears the slot at once', () => {
    const { engine, deliver, depth, counters } = setup({ replay: false });
    deliver(engine.batch([stored(1, null, A)]));
    engine.batch([]);
    deliver(engine.batch([stored(3, null, C)]));
    expect(depth(A)).toBe(0);
    expect(depth(C)).toBe(1);
    expect(counters.snapshot().resets.gap_without_replay).toBe(1);
  });

  it('a restarted publisher (seq going backwards) clears the slot and rebuilds from what follows', () => {
    const { engine, stream, deliver, depth, counters } = setup();
    deliver(engine.batch([stored(1, null, A)]));
    deliver(engine.batch([stored(2, 100, B)]));
    engine.seq = 0n;
    engine.buffer.length = 0;
    deliver(engine.batch([stored(5, null, C)]));
    deliver(engine.batch([stored(6, 500, D)]));
    expect(depth([...A, ...B])).toBe(0);
    expect(depth([...C, ...D])).toBe(2);
    expect(stream.cursor).toBe(1n);
    expect(counters.snapshot().resets.restart).toBe(1);
  });

  it('a restart while a replay is in flight discards the stale answer', async () => {
    const { engine, stream, deliver, depth } = setup();
    engine.auto = false;
    deliver(engine.batch([stored(1, null, A)]));
    engine.batch([stored(2, 100, B)]);
    deliver(engine.batch([stored(3, 200, C)]));
    expect(stream.recovering).toBe(true);
    engine.seq = 0n;
    engine.buffer.length = 0;
    deliver(engine.batch([stored(9, null, D)]));
    expect(stream.recovering).toBe(false);
    // The old publisher's answer arrives late and must not be applied.
    engine.answer();
    await Promise.resolve();
    await stream.whenSettled();
    expect(depth(A)).toBe(0);
    expect(depth(D)).toBe(1);
    expect(stream.cursor).toBe(0n);
  });

  it('joining late (first seq > 0) restores what the engine buffer holds from seq 0', async () => {
    const { engine, stream, deliver, depth, counters } = setup();
    engine.batch([stored(1, null, A)]);
    engine.batch([stored(2, 100, B)]);
    engine.batch([stored(3, 200, C)]);
    engine.buffer.shift(); // the window starts at seq 1
    deliver(engine.batch([stored(4, 300, D)]));
    await stream.whenSettled();
    expect(engine.requests).toEqual([0n]);
    // Seq 1 stores under a parent from seq 0, which the window lost: refused, not guessed.
    expect(depth([...A, ...B, ...C, ...D])).toBe(0);
    expect(counters.snapshot().events.stored.parent_not_found).toBe(3);
    expect(stream.cursor).toBe(3n);
    expect(counters.snapshot().resets.replay_incomplete).toBe(0);
    // A TensorRT-LLM-like publisher (seq from a timestamp) restores the same way.
    const t = setup();
    t.engine.seq = 1_700_000_000_000_000_000n;
    t.deliver(t.engine.batch([stored(1, null, A)]));
    await t.stream.whenSettled();
    expect(t.depth(A)).toBe(1);
    expect(t.engine.requests).toEqual([0n]);
  });

  it('bounded parking: overflowing batches are dropped (counted, logged) and recovered by the next replay', async () => {
    const lines: Record<string, unknown>[] = [];
    const { engine, stream, deliver, depth, counters } = setup({ maxPending: 2, logger: captureWarnings(lines) });
    engine.auto = false;
    const E = [17, 18, 19, 20];
    deliver(engine.batch([stored(1, null, A)]));
    engine.batch([stored(2, 100, B)]);
    deliver(engine.batch([stored(3, 200, C)])); // gap: replay asked for 1.., this batch parked
    deliver(engine.batch([stored(4, 300, D)])); // parked
    deliver(engine.batch([stored(5, 400, E)])); // dropped: the parking is full
    expect(counters.snapshot().dropped.pending_full).toBe(1);
    expect(lines).toEqual([{ workerId: 7, dpRank: 0, seq: '4', parked: 2 }]); // the batch of seq 4 (the fifth)
    engine.answer();
    await stream.whenSettled();
    expect(stream.cursor).toBe(3n);
    expect(depth([...A, ...B, ...C, ...D, ...E])).toBe(4);
    // The next live batch shows the hole; a second replay fills it.
    deliver(engine.batch([stored(6, 500, [21, 22, 23, 24])]));
    expect(engine.requests).toEqual([1n, 4n]);
    engine.answer();
    await stream.whenSettled();
    expect(depth([...A, ...B, ...C, ...D, ...E, 21, 22, 23, 24])).toBe(6);
    expect(counters.snapshot().replays.recovered).toBe(2);
  });

  it('an unexpected throw while applying a replay leaves the stream usable, not half-recovered', async () => {
    const engine = new FakeEngine();
    engine.auto = false;
    class FlakyApplier extends KvEventApplier {
      explode = false;
      override applyBatch(...args: Parameters<KvEventApplier['applyBatch']>): number {
        if (this.explode) throw new Error('bug');
        return super.applyBatch(...args);
      }
    }
    const applier = new FlakyApplier({ blockSize: BS });
    const lines: Record<string, unknown>[] = [];
    const stream = new KvEventStream(
      { workerId: 7, dpRank: 0 },
      ingestContext({ applier, logger: captureWarnings(lines) }),
      engine,
    );
    const deliver = (b: { seq: bigint; payload: Uint8Array }): void => stream.onMessage(b.seq, b.payload);
    deliver(engine.batch([stored(1, null, A)]));
    engine.batch([stored(2, 100, B)]);
    deliver(engine.batch([stored(3, 200, C)]));
    applier.explode = true;
    engine.answer();
    await stream.whenSettled();
    await new Promise((r) => setImmediate(r));
    expect(stream.recovering).toBe(false);
    expect(lines.some((l) => typeof l.err === 'string' && l.err.includes('bug'))).toBe(true);
    applier.explode = false;
    deliver(engine.batch([stored(5, null, D)]));
    expect(applier.indexes.device.blockCount(7, 0)).toBe(1);
    expect(stream.cursor).toBe(3n);
  });

  it('an exception while applying events resets the slot as apply_failed, not replay_failed, and goes on', () => {
    // A hook that throws (they must not) is a bug on the apply path like any other: thrown from inside the
    // applier's loop over the batch's events, with no replay anywhere.
    let bug = true;
    const lines: Record<string, unknown>[] = [];
    const { engine, stream, deliver, depth, counters } = setup({
      logger: captureWarnings(lines),
      onApplied: () => {
        if (bug) throw new Error('observer bug');
      },
    });
    bug = false;
    deliver(engine.batch([stored(1, null, A)]));
    bug = true;
    deliver(engine.batch([stored(2, 100, B)]));
    bug = false;
    const s = counters.snapshot();
    expect(s.resets.apply_failed).toBe(1);
    expect(s.resets.replay_failed).toBe(0);
    expect(s.replays.failed).toBe(0);
    expect(engine.requests).toEqual([]);
    expect(depth(A)).toBe(0);
    expect(lines.filter((l) => l.err === 'observer bug')).toHaveLength(1);
    // The slot starts over from the next live batch.
    deliver(engine.batch([stored(3, null, C)]));
    expect(depth(C)).toBe(1);
    expect(stream.cursor).toBe(2n);
  });

  it('garbled frames and payloads are counted with the worker, never thrown, never touch other slots', () => {
    const lines: Record<string, unknown>[] = [];
    const log = captureWarnings(lines);
    const { engine, stream, deliver, depth, counters, applier } = setup({ logger: log });
    // Another worker's entries in the same index.
    const other = { workerId: 8, dpRank: 0 };
    applier.applyBatch(other, {
      ts: 0,
      dpRank: 0,
      errors: [],
      events: [
        {
          type: 'stored',
          tier: 'device',
          parentHash: null,
          blockHashes: BigUint64Array.of(1n),
          tokenIds: Uint32Array.from(A),
          blockSize: BS,
          droppedBlocks: 0,
          loraName: undefined,
          loraId: undefined,
          cacheSalt: undefined,
          mmHashes: undefined,
          groupIdx: 0,
        },
      ],
    });
    deliver(engine.batch([stored(1, null, A)]));
    stream.onFrames([Buffer.from('t'), encodeSeq(1n)]); // 2 frames
    stream.onFrames([Buffer.from('t'), Buffer.from('x'), Buffer.from('y')]); // 1-byte seq
    stream.onFrames([Buffer.from('t'), encodeSeq(1n), Uint8Array.of(0xc1)]); // garbage payload, seq 1 consumed
    stream.onFrames([Buffer.from('t'), encodeSeq(2n), encodeBatch([{ type: 'cleared' }], { dpRank: 3 })]); // another rank
    stream.onFrames([Buffer.from('t'), encodeSeq(3n), encode([1.5, [['BlockStored', 7, null, A, BS]], 0])]); // a bad field
    expect(stream.cursor).toBe(3n);
    const s = counters.snapshot();
    expect(s.decodeErrors).toMatchObject({
      frame_count: 1,
      bad_sequence: 1,
      msgpack: 1,
      dp_rank_mismatch: 1,
      bad_event: 1,
    });
    expect(s.slots['7:0']!.decodeErrors).toBe(5);
    expect(s.gaps).toBe(0);
    expect(depth(A)).toBe(1); // the cleared event for rank 3 was not applied
    expect(applier.indexes.device.blockCount(8, 0)).toBe(1);
    // And the bad event's batch refused whole: one more line, and a drop.
    expect(s.dropped.refused).toBe(1);
    expect(lines.length).toBe(6);
    expect(lines.every((l) => l.workerId === 7 && l.dpRank === 0)).toBe(true);
    // The stream keeps going.
    deliver({ seq: 4n, payload: encodeBatch([stored(5, 100, B)]) });
    expect(depth([...A, ...B])).toBe(2);
  });

  it('a payload whose fields cannot be rendered is a decode error of its seq: the slot is not reset', () => {
    const { engine, stream, deliver, depth, counters } = setup();
    deliver(engine.batch([stored(1, null, A)]));
    // Rendering its dp rank in an error message overflowed the stack.
    const poison = deepRankBatch();
    stream.onFrames([Buffer.from('t'), encodeSeq(1n), poison]);
    const s = counters.snapshot();
    expect(s.decodeErrors).toMatchObject({ batch_shape: 1 });
    expect(s.slots['7:0']!.resets).toBe(0);
    expect(depth(A)).toBe(1);
    deliver({ seq: 2n, payload: encodeBatch([stored(5, 100, B)]) });
    expect(depth([...A, ...B])).toBe(2);
  });

  it('throttles repeated log lines per kind and reports how many were suppressed', () => {
    const lines: Record<string, unknown>[] = [];
    const clock = new ManualClock();
    const { stream } = setup({ logger: captureWarnings(lines), clock });
    for (let i = 0; i < 10; i++) stream.onFrames([Buffer.from('x')]);
    expect(lines.length).toBe(1);
    clock.advance(10_001);
    stream.onFrames([Buffer.from('x')]);
    expect(lines.length).toBe(2);
    expect(lines[1]).toMatchObject({ kind: 'frame_count', suppressed: 9 });
  });
});

describe('liveness', () => {
  it('never -> live -> stale while serving without events -> live again', () => {
    const clock = new ManualClock();
    const { engine, deliver, liveness } = setup({ clock });
    expect(liveness.status(7)).toBe('never');
    expect(liveness.status(7, 0)).toBe('never');
    expect(liveness.status(99)).toBe('never');
    deliver(engine.batch([stored(1, null, A)]));
    expect(liveness.status(7, 0)).toBe('live');
    // Idle silence is fine.
    clock.advance(60_000);
    expect(liveness.status(7)).toBe('live');
    liveness.noteDispatch({ workerId: 7, dpRank: 0 });
    clock.advance(999);
    liveness.noteDispatch({ workerId: 7, dpRank: 0 }); // a later dispatch does not restart the window
    expect(liveness.status(7)).toBe('live');
    clock.advance(1);
    expect(liveness.status(7)).toBe('stale');
    deliver(engine.batch([]));
    expect(liveness.status(7)).toBe('live');
    expect(liveness.statuses()).toEqual([{ workerId: 7, dpRank: 0, status: 'live' }]);
  });

  it('refused events (wrong block size) do not make a slot live; the worst rank decides the worker', () => {
    const clock = new ManualClock();
    const { engine, deliver, liveness } = setup({ clock });
    deliver(engine.batch([{ type: 'stored', blockHashes: [1n], parent: null, tokens: [1, 2], blockSize: 2 }]));
    expect(liveness.status(7, 0)).toBe('never');
    deliver(engine.batch([stored(1, null, A)]));
    expect(liveness.status(7, 0)).toBe('live');
    liveness.register({ workerId: 7, dpRank: 1 });
    expect(liveness.status(7)).toBe('never');
    liveness.unregister({ workerId: 7, dpRank: 1 });
    expect(liveness.status(7)).toBe('live');
  });
});
