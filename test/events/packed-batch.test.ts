/**
 * Applying handed-over batches in place (packed-batch.ts): a batch read from the transferred buffer,
 * event by event into one reused record, changes the indexes exactly as the same events applied as
 * objects do, with the same status per event: stored chains (short and long hash lists), removals
 * held and not held, clears, refusals (block size, unknown parent, repeated hash, LoRA without a
 * name, another group), lower tiers, events packed without their own hashes, rare fields, and a
 * hybrid model's groups (which read the events as objects). Its `events` equal what unpacking built.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, type Rng } from '../../src/common/index.js';
import {
  decodeKvEventBatch,
  KvEventApplier,
  KvEventCounters,
  KvEventStream,
  KvGroupIndexes,
  TieredPrefixIndex,
  ingestContext,
} from '../../src/events/index.js';
import { TurnScheduler } from '../../src/events/turn-scheduler.js';
import { encodeBatch } from '../helpers/zmq-publisher.js';
import { storedLocalHashes, type ApplyStatus } from '../../src/events/applier.js';
import { BatchPacker, unpackBatches, type LocalHashes } from '../../src/events/batch-codec.js';
import { eachPackedBatch, PackedEvent, type PackedBatch } from '../../src/events/packed-batch.js';
import type { KvCacheEvent, KvEventBatch, StorageTier, StoredBlocksEvent } from '../../src/events/types.js';

const BS = 4;
const SLOT = { workerId: 3, dpRank: 1 };
const TIERS: StorageTier[] = ['device', 'device', 'device', 'host_pinned'];

/** A seeded stream of events of one slot, mostly well formed, with every refusal now and then. */
function randomBatches(rng: Rng, batches: number, hybrid: boolean): KvEventBatch[] {
  const held: bigint[][] = [[], []];
  let next = 1n;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
  const out: KvEventBatch[] = [];
  for (let b = 0; b < batches; b++) {
    const events: KvCacheEvent[] = [];
    for (let e = 0; e < 6; e++) {
      const group = hybrid && rng() < 0.3 ? 1 : 0;
      const r = rng();
      if (r < 0.03) events.push({ type: 'cleared' });
      else if (r < 0.35 && held[group]!.length > 0) {
        const n = 1 + Math.floor(rng() * 3);
        const hashes = Array.from({ length: n }, () => (rng() < 0.9 ? pick(held[group]!) : next++));
        events.push({ type: 'removed', tier: pick(TIERS), blockHashes: BigUint64Array.from(hashes), groupIdx: group });
      } else {
        // A sliding-window group's blocks chain under blocks the full-attention group stored (vLLM hashes a
        // block the same in every group): the book, kept by the primary's stores, resolves those parents.
        const parents = group === 1 && rng() < 0.5 ? held[0]! : held[group]!;
        const ev = storedEvent(rng, parents, () => next++, group, hybrid);
        held[group]!.push(...ev.blockHashes);
        events.push(ev);
      }
    }
    out.push({ ts: b, dpRank: SLOT.dpRank, events, errors: [] });
  }
  return out;
}

/** A stored event under one of `parents` (or the root, or a parent never stored). */
function storedEvent(
  rng: Rng,
  parents: readonly bigint[],
  fresh: () => bigint,
  group: number,
  hybrid: boolean,
): StoredBlocksEvent {
  // Now and then a list longer than the reader's scratch arrays (read as a view of the buffer instead).
  const n = rng() < 0.05 ? 70 + Math.floor(rng() * 10) : rng() < 0.05 ? 0 : 1 + Math.floor(rng() * 4);
  const repeat = n > 1 && rng() < 0.03;
  const hashes = Array.from({ length: n }, (_, i) => (repeat && i === 1 ? 0n : fresh()));
  if (repeat) hashes[1] = hashes[0]!;
  const parent = parents.length > 0 && rng() < 0.6 ? (rng() < 0.95 ? parents.at(-1)! : fresh()) : null;
  const r = rng();
  const sliding = hybrid && group === 1;
  const lead = sliding && n > 0 && rng() < 0.5 ? 1 : 0;
  return {
    type: 'stored',
    tier: pick(rng, TIERS),
    parentHash: parent,
    blockHashes: BigUint64Array.from(hashes),
    tokenIds: Uint32Array.from({ length: (n + lead) * BS }, () => Math.floor(rng() * 50_000)),
    blockSize: r < 0.03 ? BS * 2 : BS,
    droppedBlocks: r > 0.97 ? 1 : 0,
    loraName: r > 0.9 && r <= 0.93 ? 'adapter' : undefined,
    loraId: r > 0.9 && r <= 0.95 ? 2 : undefined,
    cacheSalt: r > 0.85 && r <= 0.88 ? 'salt' : undefined,
    mmHashes: undefined,
    groupIdx: !hybrid && r > 0.8 && r <= 0.82 ? 4 : group,
    ...(sliding ? { specKind: 'sliding_window', slidingWindow: 9 } : {}),
    ...(lead > 0 ? { leadingNullBlocks: lead } : {}),
  };
}

const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;

/** The thread's own hashes (none for an event the applier refuses to hash), some left out as a thread may. */
function localsOf(batch: KvEventBatch, rng: Rng): LocalHashes {
  return batch.events.map((ev) => {
    if (ev.type !== 'stored' || ev.blockHashes.length === 0 || rng() < 0.1) return undefined;
    try {
      return storedLocalHashes(ev, ev.blockSize);
    } catch {
      return undefined;
    }
  });
}

function applier(hybrid: boolean): KvEventApplier {
  const indexes = new TieredPrefixIndex();
  const groups = hybrid ? new KvGroupIndexes({ primary: indexes.device }) : undefined;
  return new KvEventApplier({ blockSize: BS, indexes, groups });
}

/** Packs the batches (several buffers), then applies each one way: objects, or read in place. */
function both(batches: KvEventBatch[], hybrid: boolean, seed: number) {
  const rng = seededRng(seed);
  const packer = new BatchPacker(2048);
  const buffers: ReturnType<BatchPacker['take']>[] = [];
  batches.forEach((batch, seq) => {
    const locals = localsOf(batch, rng);
    if (!packer.add(1, BigInt(seq), batch, locals)) {
      buffers.push(structuredClone(packer.take()));
      packer.add(1, BigInt(seq), batch, locals);
    }
  });
  buffers.push(structuredClone(packer.take()));
  const asObjects = applier(hybrid);
  const inPlace = applier(hybrid);
  const objectStatuses: ApplyStatus[] = [];
  const inPlaceStatuses: ApplyStatus[] = [];
  const read = new PackedEvent();
  let seen = 0;
  for (const packed of buffers) {
    unpackBatches(packed, (_id, _seq, b) => {
      for (const ev of b.events) objectStatuses.push(asObjects.applyEvent(SLOT, ev));
    });
    eachPackedBatch(packed, (_id, seq, b: PackedBatch) => {
      expect(seq).toBe(BigInt(seen++));
      let w = b.firstWord;
      for (let i = 0; i < b.count; i++) {
        w = b.read(w, read);
        inPlaceStatuses.push(inPlace.applyPacked(SLOT, read));
      }
    });
  }
  expect(seen).toBe(batches.length);
  return { asObjects, inPlace, objectStatuses, inPlaceStatuses };
}

function expectSameIndexes(a: KvEventApplier, b: KvEventApplier, groups: number[]): void {
  for (const tier of ['device', 'host_pinned'] as const) {
    expect(b.indexes.peek(tier)?.size).toBe(a.indexes.peek(tier)?.size);
    if (a.indexes.peek(tier) !== undefined)
      expect(b.indexes.get(tier).exportSlot(SLOT.workerId, SLOT.dpRank)).toEqual(
        a.indexes.get(tier).exportSlot(SLOT.workerId, SLOT.dpRank),
      );
  }
  for (const g of groups) expect(b.groups!.blockCount(SLOT, g)).toBe(a.groups!.blockCount(SLOT, g));
}

describe('packed batches applied in place', () => {
  for (const seed of [1, 2, 3]) {
    it(`changes the indexes as the events applied as objects do, status for status (seed ${seed})`, () => {
      const batches = randomBatches(seededRng(seed), 400, false);
      const r = both(batches, false, seed);
      expect(r.inPlaceStatuses).toEqual(r.objectStatuses);
      // The stream exercised what it is meant to: applied, refused and missing events of every kind.
      const kinds = new Set(r.objectStatuses);
      for (const s of ['ok', 'truncated', 'not_found', 'parent_not_found', 'invalid_sequence'] as const)
        expect(kinds).toContain(s);
      for (const s of ['block_size_mismatch', 'unnamed_lora', 'other_group'] as const) expect(kinds).toContain(s);
      expect(r.asObjects.indexes.device.size).toBeGreaterThan(0);
      expectSameIndexes(r.asObjects, r.inPlace, []);
      r.asObjects.indexes.dispose();
      r.inPlace.indexes.dispose();
    });
  }

  it("keeps a hybrid model's groups and book as the events applied as objects do", () => {
    const batches = randomBatches(seededRng(9), 300, true);
    const r = both(batches, true, 9);
    expect(r.inPlaceStatuses).toEqual(r.objectStatuses);
    expect(r.asObjects.groups!.hybrid).toBe(true);
    expect(r.asObjects.groups!.blockCount(SLOT, 1)).toBeGreaterThan(0);
    expectSameIndexes(r.asObjects, r.inPlace, [0, 1]);
    r.asObjects.indexes.dispose();
    r.inPlace.indexes.dispose();
    r.asObjects.groups!.dispose();
    r.inPlace.groups!.dispose();
  });

  it("gives the batch's events as objects equal to what unpacking builds, with its time stamp, rank and errors", () => {
    const batch: KvEventBatch = {
      ts: 7.25,
      dpRank: SLOT.dpRank,
      events: randomBatches(seededRng(4), 1, false)[0]!.events,
      errors: [{ kind: 'bad_event', message: 'missing field', eventIndex: 2 }],
    };
    const packer = new BatchPacker();
    packer.add(5, 0xfffffffffffffff0n, batch, localsOf(batch, seededRng(4)));
    const packed = structuredClone(packer.take());
    const built: KvEventBatch[] = [];
    unpackBatches(packed, (_id, _seq, b) => built.push(b));
    const got: { id: number; seq: bigint; batch: PackedBatch }[] = [];
    eachPackedBatch(packed, (id, seq, b) => got.push({ id, seq, batch: b }));
    expect(got).toHaveLength(1);
    const { id, seq, batch: b } = got[0]!;
    expect([id, seq, b.ts, b.dpRank, b.count]).toEqual([5, 0xfffffffffffffff0n, 7.25, SLOT.dpRank, 6]);
    expect(b.errors).toEqual(batch.errors);
    expect(b.events).toEqual(built[0]!.events);
    expect(b.events).toBe(b.events); // built once
  });

  it('a stream applies handed-over batches a slice per turn, resuming mid-batch, as it applies the same payloads', () => {
    // The same 30 batches of 40 events (stored chains and removals), once as payloads, once handed over.
    const rng = seededRng(12);
    const payloads: Uint8Array[] = [];
    let next = 1n;
    const held: bigint[] = [];
    for (let b = 0; b < 30; b++) {
      const events = Array.from({ length: 40 }, () => {
        if (held.length > 4 && rng() < 0.3) return { type: 'removed' as const, blockHashes: [held.shift()!] };
        const hashes = [next++, next++];
        held.push(...hashes);
        const tokens = Array.from({ length: 2 * BS }, () => Math.floor(rng() * 50_000));
        return { type: 'stored' as const, blockHashes: hashes, parent: null, tokens, blockSize: BS };
      });
      payloads.push(encodeBatch(events, { dpRank: SLOT.dpRank }));
    }
    const run = (handOver: boolean) => {
      const clock = new ManualClock();
      const turns: (() => void)[] = [];
      const scheduler = new TurnScheduler({
        clock,
        maxEventsPerTurn: 25,
        maxTurnMs: 1000,
        defer: (f) => turns.push(f),
      });
      const counters = new KvEventCounters();
      const applier = new KvEventApplier({ blockSize: BS });
      const stream = new KvEventStream(SLOT, ingestContext({ applier, hooks: counters, clock, scheduler }));
      if (handOver) {
        const packer = new BatchPacker(1 << 20);
        payloads.forEach((p, seq) => {
          const r = decodeKvEventBatch(p);
          if (!r.ok) throw new Error(r.error.message);
          packer.add(
            1,
            BigInt(seq),
            r.batch,
            localsOf(r.batch, () => 1),
          );
        });
        eachPackedBatch(structuredClone(packer.take()), (_id, seq, batch) => stream.onDecoded(seq, batch));
      } else payloads.forEach((p, seq) => stream.onMessage(BigInt(seq), p));
      let n = 0;
      for (let f = turns.shift(); f !== undefined; f = turns.shift()) {
        f();
        n++;
      }
      return { applier, counters: counters.snapshot(), turns: n, cursor: stream.appliedCursor };
    };
    const viaPayloads = run(false);
    const handedOver = run(true);
    // 1,200 events at 25 a turn: batches of 40 are split across turns and resumed where they stopped.
    expect(handedOver.turns).toBeGreaterThanOrEqual(48);
    expect(handedOver.cursor).toBe(29n);
    expect(handedOver.counters.events).toEqual(viaPayloads.counters.events);
    expect(handedOver.counters.events.stored.ok + handedOver.counters.events.removed.ok).toBe(1200);
    expect(handedOver.applier.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank)).toEqual(
      viaPayloads.applier.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank),
    );
    handedOver.applier.indexes.dispose();
    viaPayloads.applier.indexes.dispose();
  });
});

/**
 * The same batches through two streams with a small turn budget (runs split mid-batch): as objects, and
 * handed over, where runs of device-tier removals and plain stores go to the module in one call each
 * (src/wasm/packed-run.ts) and every other event is applied one at a time. `budget`: the device index's
 * memory budget in both.
 */
function viaStreams(batches: KvEventBatch[], hybrid: boolean, seed: number, budget = 0) {
  const rng = seededRng(seed);
  const run = (handOver: boolean) => {
    const clock = new ManualClock();
    const turns: (() => void)[] = [];
    const scheduler = new TurnScheduler({ clock, maxEventsPerTurn: 7, maxTurnMs: 1000, defer: (f) => turns.push(f) });
    const counters = new KvEventCounters();
    const a = applier(hybrid);
    const evictions: number[] = [];
    if (budget > 0) a.indexes.device.setMemoryBudget(budget, (r) => evictions.push(r.entries));
    const stream = new KvEventStream(SLOT, ingestContext({ applier: a, hooks: counters, clock, scheduler }));
    if (handOver) {
      const packer = new BatchPacker(4096);
      batches.forEach((batch, seq) => {
        const locals = localsOf(batch, rng);
        if (!packer.add(1, BigInt(seq), batch, locals)) {
          eachPackedBatch(structuredClone(packer.take()), (_id, s, b) => stream.onDecoded(s, b));
          packer.add(1, BigInt(seq), batch, locals);
        }
      });
      eachPackedBatch(structuredClone(packer.take()), (_id, s, b) => stream.onDecoded(s, b));
    } else batches.forEach((batch, seq) => stream.onDecoded(BigInt(seq), batch));
    for (let f = turns.shift(); f !== undefined; f = turns.shift()) f();
    expect(stream.appliedCursor).toBe(BigInt(batches.length - 1));
    return { applier: a, events: counters.snapshot().events, evictions };
  };
  return { asObjects: run(false), handedOver: run(true) };
}

describe('runs of a handed-over batch applied in one module call', () => {
  for (const seed of [5, 6, 7]) {
    it(`change the indexes and count the statuses as the events applied as objects do (seed ${seed})`, () => {
      const r = viaStreams(randomBatches(seededRng(seed), 400, false), false, seed);
      expect(r.handedOver.events).toEqual(r.asObjects.events);
      expect(r.asObjects.events.stored.ok).toBeGreaterThan(500);
      expect(r.asObjects.events.removed.not_found).toBeGreaterThan(0);
      expectSameIndexes(r.asObjects.applier, r.handedOver.applier, []);
      r.asObjects.applier.indexes.dispose();
      r.handedOver.applier.indexes.dispose();
    });
  }

  it("leave a hybrid model's events to the applier one at a time, with the same outcome", () => {
    const r = viaStreams(randomBatches(seededRng(8), 300, true), true, 8);
    expect(r.handedOver.events).toEqual(r.asObjects.events);
    expectSameIndexes(r.asObjects.applier, r.handedOver.applier, [0, 1]);
    for (const x of [r.asObjects, r.handedOver]) {
      x.applier.indexes.dispose();
      x.applier.groups!.dispose();
    }
  });

  it('evict under the memory budget as the events applied one at a time do', () => {
    const batches = randomBatches(seededRng(10), 600, false);
    const free = viaStreams(batches, false, 10);
    const budget = Math.floor(free.asObjects.applier.indexes.device.bytes / 2);
    const r = viaStreams(batches, false, 10, budget);
    expect(r.asObjects.evictions.length).toBeGreaterThan(0);
    expect(r.handedOver.evictions).toEqual(r.asObjects.evictions);
    expect(r.handedOver.applier.indexes.device.bytes).toBe(r.asObjects.applier.indexes.device.bytes);
    expect(r.handedOver.applier.indexes.device.bytes).toBeLessThan(free.handedOver.applier.indexes.device.bytes);
    expect(r.handedOver.events).toEqual(r.asObjects.events);
    expectSameIndexes(r.asObjects.applier, r.handedOver.applier, []);
    for (const x of [free.asObjects, free.handedOver, r.asObjects, r.handedOver]) x.applier.indexes.dispose();
  });

  it('apply a stored event of 4,000 blocks (more words than a run copies at first) among short ones', () => {
    const rng = seededRng(11);
    const long = storedEvent(rng, [], () => 0n, 0, false);
    let next = 1_000_000n;
    const blocks = 4000;
    const big: StoredBlocksEvent = {
      ...long,
      tier: 'device',
      parentHash: null,
      blockHashes: BigUint64Array.from({ length: blocks }, () => next++),
      tokenIds: Uint32Array.from({ length: blocks * BS }, () => Math.floor(rng() * 50_000)),
      blockSize: BS,
      droppedBlocks: 0,
      loraName: undefined,
      loraId: undefined,
      cacheSalt: undefined,
      groupIdx: 0,
    };
    const batches = randomBatches(seededRng(12), 20, false);
    // Last, after the random events' clears; then short events again.
    batches.push(
      { ts: 0, dpRank: SLOT.dpRank, events: [big], errors: [] },
      ...randomBatches(seededRng(13), 3, false).map((b) => ({
        ...b,
        events: b.events.filter((e) => e.type !== 'cleared'),
      })),
    );
    const r = viaStreams(batches, false, 12);
    expect(r.handedOver.events).toEqual(r.asObjects.events);
    expect(r.handedOver.applier.indexes.device.size).toBeGreaterThanOrEqual(blocks);
    expectSameIndexes(r.asObjects.applier, r.handedOver.applier, []);
    r.asObjects.applier.indexes.dispose();
    r.handedOver.applier.indexes.dispose();
  });
});
