/**
 * A batch holding an event that does not decode is refused (slot-writer.ts, `accept`): none of its stores
 * reaches the index, whether the main thread decoded it or an ingestion thread handed it over packed. Counted
 * (`dropped.refused`, and each bad event as a decode error) and logged; its seq is used up, and the next batch
 * is applied as usual. Its decoded removals are applied (counted in `salvagedRemovals`): the engine evicted
 * those blocks whatever the bad event was.
 */
import { decode, encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { decodeKvEventBatch, storedLocalHashes } from '../../src/events/index.js';
import { BatchPacker } from '../../src/events/batch-codec.js';
import { eachPackedBatch } from '../../src/events/packed-batch.js';
import { captureWarnings } from '../helpers/capture-log.js';
import { encodeBatch, type TestEvent } from '../helpers/zmq-publisher.js';
import { A, B, C, D, setup, stored } from './stream-fixture.js';

/** `events` as the engine encodes them, with `extra` (raw wire events) inserted before event `at` (default: last). */
function withRaw(events: TestEvent[], extra: unknown[], at = events.length): Uint8Array {
  const [ts, evs, rank] = decode(encodeBatch(events), { useBigInt64: true }) as [number, unknown[], number];
  return encode([ts, [...evs.slice(0, at), ...extra, ...evs.slice(at)], rank], { useBigInt64: true });
}

/** `events`, then a malformed BlockStored (its block_hashes not an array) as the batch's last. */
const withBadLast = (events: TestEvent[]): Uint8Array => withRaw(events, [['BlockStored', 7, null, A, 4]]);

/** A kind of event kvgate does not know, as a newer engine would send it (a tagged array, and a tagged map). */
const UNKNOWN_ARRAY = ['BlockMoved', [1], null, A, 4];
const UNKNOWN_MAP = { type: 'BlockPinned', block_hashes: [1], medium: 'GPU' };

/** A stream (`setup`) and how a batch reaches it: decoded by the stream, or decoded and packed as a thread does. */
function refusalSetup(handOver: boolean) {
  const lines: Record<string, unknown>[] = [];
  const t = setup({ logger: captureWarnings(lines) });
  const offer = (seq: bigint, payload: Uint8Array): void => {
    if (!handOver) return t.deliver({ seq, payload });
    const r = decodeKvEventBatch(payload);
    if (!r.ok) throw new Error(r.error.message);
    const locals = r.batch.events.map((ev) => (ev.type === 'stored' ? storedLocalHashes(ev, 4) : undefined));
    const packer = new BatchPacker();
    packer.add(1, seq, r.batch, locals);
    eachPackedBatch(structuredClone(packer.take()), (_id, s, b) => t.stream.onDecoded(s, b));
  };
  return { ...t, lines, offer };
}

/** `ev` as its engine would send it in KV-cache group `groupIdx`. */
const inGroup = (ev: TestEvent, groupIdx: number): TestEvent => (ev.type === 'cleared' ? ev : { ...ev, groupIdx });

describe('a KV-event batch holding a bad event', () => {
  for (const handOver of [false, true]) {
    const how = handOver ? 'handed over packed' : 'decoded here';

    it(`is refused: none of its blocks is indexed (${how})`, () => {
      const { offer, depth, counters, lines, stream } = refusalSetup(handOver);
      offer(0n, encodeBatch([stored(1, null, A)]));
      // Two good stores (one chained under the block of batch 0), then the bad event.
      offer(1n, withBadLast([stored(2, 100, B), stored(3, null, C)]));
      expect(depth([...A, ...B])).toBe(1);
      expect(depth(C)).toBe(0);
      const s = counters.snapshot();
      expect(s.dropped.refused).toBe(1);
      expect(s.decodeErrors.bad_event).toBe(1);
      expect(s.salvagedRemovals).toBe(0);
      expect(lines).toContainEqual(
        expect.objectContaining({ workerId: 7, seq: '1', badEvents: 1, goodEvents: 2, removalsApplied: 0 }),
      );
      // Its seq is used up: the next batch is in sequence and applied.
      expect(stream.cursor).toBe(1n);
      offer(2n, encodeBatch([stored(2, 100, B)]));
      expect(depth([...A, ...B])).toBe(2);
      expect(counters.snapshot().gaps).toBe(0);
    });

    it(`still has its removals applied, its stores refused (${how})`, () => {
      const { offer, depth, counters, lines, liveness, clock } = refusalSetup(handOver);
      offer(0n, encodeBatch([stored(1, null, A), stored(2, 100, B), stored(3, null, C)]));
      expect(depth([...A, ...B])).toBe(2);
      liveness.noteDispatch({ workerId: 7, dpRank: 0 });
      clock.advance(5000);
      // B evicted (its engine hash is 200), D stored under the root, then the bad event.
      offer(1n, withBadLast([{ type: 'removed', blockHashes: [200n] }, stored(4, null, D)]));
      expect(depth([...A, ...B])).toBe(1);
      expect(depth(C)).toBe(1);
      expect(depth(D)).toBe(0);
      const s = counters.snapshot();
      expect(s.dropped.refused).toBe(1);
      expect(s.salvagedRemovals).toBe(1);
      expect(s.events.removed.ok).toBe(1);
      expect(lines).toContainEqual(
        expect.objectContaining({ seq: '1', badEvents: 1, goodEvents: 2, removalsApplied: 1 }),
      );
      // The removals alone do not show the slot's events flowing: it went stale meanwhile and stays so.
      expect(liveness.status(7, 0)).toBe('stale');
    });

    it(`is refused when an event names a negative KV-cache group, its removals applied (${how})`, () => {
      const { offer, depth, counters, lines } = refusalSetup(handOver);
      offer(0n, encodeBatch([stored(1, null, A), stored(2, 100, B)]));
      expect(depth([...A, ...B])).toBe(2);
      // B evicted, D stored under the root, and C stored in group -1: no engine's group (vLLM's are indexes from 0).
      offer(
        1n,
        encodeBatch([{ type: 'removed', blockHashes: [200n] }, stored(4, null, D), inGroup(stored(3, null, C), -1)]),
      );
      expect(depth([...A, ...B])).toBe(1);
      expect(depth(C)).toBe(0);
      expect(depth(D)).toBe(0);
      const s = counters.snapshot();
      expect(s.dropped.refused).toBe(1);
      expect(s.decodeErrors.bad_event).toBe(1);
      expect(s.salvagedRemovals).toBe(1);
      expect(lines).toContainEqual(
        expect.objectContaining({ seq: '1', badEvents: 1, goodEvents: 2, removalsApplied: 1 }),
      );
    });

    it(`is not refused for vLLM's offloading placeholder: its GPU stores are applied (${how})`, () => {
      const { offer, depth, counters } = refusalSetup(handOver);
      const [ts, evs, rank] = decode(encodeBatch([stored(1, null, A)]), { useBigInt64: true }) as unknown[];
      // The step's GPU store, then the offloading connector's placeholder for a CPU chunk: no tokens, block size 0.
      const placeholder = ['BlockStored', [900], null, [], 0, null, 'CPU', null, null, 0];
      offer(0n, encode([ts, [...(evs as unknown[]), placeholder], rank], { useBigInt64: true }));
      expect(depth(A)).toBe(1);
      const s = counters.snapshot();
      expect(s.dropped.refused).toBe(0);
      expect(s.decodeErrors.bad_event).toBe(0);
      expect(s.events.stored.truncated).toBe(1);
      // Another medium alike (the device tier's run in the module stops at it: no block size to judge).
      const [ts1, evs1, rank1] = decode(encodeBatch([stored(2, 100, B)]), { useBigInt64: true }) as unknown[];
      const onGpu = placeholder.map((v) => (v === 'CPU' ? 'GPU' : v));
      offer(1n, encode([ts1, [...(evs1 as unknown[]), onGpu], rank1], { useBigInt64: true }));
      expect(depth([...A, ...B])).toBe(2);
      expect(counters.snapshot().events.stored).toMatchObject({ truncated: 2, block_size_mismatch: 0 });
    });

    it(`has its AllBlocksCleared applied, in order with its stores refused (${how})`, () => {
      const { offer, depth, counters } = refusalSetup(handOver);
      offer(0n, encodeBatch([stored(1, null, A), stored(3, null, C)]));
      offer(1n, withBadLast([stored(4, null, D), { type: 'cleared' }, stored(2, 100, B)]));
      expect(depth(A)).toBe(0);
      expect(depth(C)).toBe(0);
      expect(depth(D)).toBe(0);
      expect(counters.snapshot().salvagedRemovals).toBe(1);
      offer(2n, encodeBatch([stored(1, null, A)]));
      expect(depth(A)).toBe(1);
    });
  }
});

describe('a KV-event batch holding an event of a kind kvgate does not know', () => {
  for (const handOver of [false, true]) {
    const how = handOver ? 'handed over packed' : 'decoded here';

    it(`has it skipped and counted, the rest applied in order (${how})`, () => {
      const { offer, depth, counters, lines, liveness } = refusalSetup(handOver);
      // [stored, <unknown>, stored]: the second store chained under the first.
      offer(0n, withRaw([stored(1, null, A), stored(2, 100, B)], [UNKNOWN_ARRAY], 1));
      expect(depth([...A, ...B])).toBe(2);
      const s = counters.snapshot();
      expect(s.unknownSkipped).toBe(1);
      expect(s.events.stored.ok).toBe(2);
      expect(s.dropped.refused).toBe(0);
      expect(s.decodeErrors.unknown_tag).toBe(0);
      expect(liveness.status(7, 0)).toBe('live');
      expect(lines).toEqual([
        expect.objectContaining({
          workerId: 7,
          dpRank: 0,
          seq: '0',
          skippedEvents: 1,
          first: expect.stringContaining('BlockMoved'),
        }),
      ]);
      // A removal after an unknown map event, in the same batch: applied in its place.
      offer(1n, withRaw([stored(3, null, C), { type: 'removed', blockHashes: [300n] }], [UNKNOWN_MAP], 1));
      expect(depth(C)).toBe(0);
      expect(counters.snapshot().unknownSkipped).toBe(2);
      expect(counters.snapshot().events.removed.ok).toBe(1);
    });

    it(`is logged once per episode: again only after the engine restarted (${how})`, () => {
      const { offer, depth, counters, lines, clock } = refusalSetup(handOver);
      offer(0n, withRaw([stored(1, null, A)], [UNKNOWN_ARRAY, UNKNOWN_MAP]));
      clock.advance(60_000);
      offer(1n, withRaw([stored(2, 100, B)], [UNKNOWN_ARRAY]));
      offer(2n, encodeBatch([stored(3, null, C)]));
      clock.advance(60_000);
      offer(3n, withRaw([], [UNKNOWN_MAP]));
      expect(counters.snapshot().unknownSkipped).toBe(4);
      expect(lines.map((l) => l.skippedEvents)).toEqual([2]);
      // The engine restarts (its seq starts over): perhaps another version, so a new episode.
      clock.advance(60_000);
      offer(0n, withRaw([stored(4, null, D)], [UNKNOWN_ARRAY]));
      expect(counters.snapshot().resets.restart).toBe(1);
      expect(depth(D)).toBe(1);
      expect(lines.filter((l) => l.skippedEvents !== undefined).map((l) => l.seq)).toEqual(['0', '0']);
    });

    it(`leaves a malformed known event in the same batch refusing it (${how})`, () => {
      const { offer, depth, counters } = refusalSetup(handOver);
      offer(0n, withRaw([stored(1, null, A), stored(3, null, C)], [UNKNOWN_ARRAY, ['BlockStored', 7, null, A, 4]], 1));
      expect(depth(A)).toBe(0);
      expect(depth(C)).toBe(0);
      const s = counters.snapshot();
      expect(s.dropped.refused).toBe(1);
      expect(s.decodeErrors.bad_event).toBe(1);
      expect(s.decodeErrors.unknown_tag).toBe(0);
      expect(s.unknownSkipped).toBe(1);
    });
  }
});
