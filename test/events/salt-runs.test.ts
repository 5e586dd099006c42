/**
 * Packed runs in a slot that holds vLLM-salted blocks (salt-memory.ts, applier.ts `applyPackedRun`): an
 * ingestion thread hashes each event with the salt it infers (batch-hasher.ts) and says which; the applier runs
 * the events whose salt its own memory confirms through the module in one call, stops before the others (applied
 * one at a time, hashed on the main thread), and its memory then follows the run. Whatever the thread inferred
 * (right, wrong, nothing), the index, every status and the salt memory are those of the events applied as
 * objects one at a time.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, type Rng } from '../../src/common/index.js';
import { blockHashes } from '../../src/wasm/index.js';
import { PackedRun } from '../../src/wasm/index.js';
import { ingestContext, KvEventApplier, KvEventCounters, KvEventStream } from '../../src/events/index.js';
import { storedLocalHashes } from '../../src/events/applier.js';
import { BatchHasher } from '../../src/events/batch-hasher.js';
import { BatchPacker } from '../../src/events/batch-codec.js';
import { eachPackedBatch, type PackedBatch } from '../../src/events/packed-batch.js';
import { TurnScheduler } from '../../src/events/turn-scheduler.js';
import type { KvCacheEvent, KvEventBatch, StorageTier, StoredBlocksEvent } from '../../src/events/types.js';

const BS = 4;
const SLOT = { workerId: 2, dpRank: 0 };
const TENANTS = ['tenant-a', 'tenant-b', 'tenant-c'];

function stored(parent: bigint | null, hashes: bigint[], tokens: number[], extra: Partial<StoredBlocksEvent> = {}) {
  const ev: StoredBlocksEvent = {
    type: 'stored',
    tier: 'device',
    parentHash: parent,
    blockHashes: BigUint64Array.from(hashes),
    tokenIds: Uint32Array.from(tokens),
    blockSize: BS,
    droppedBlocks: 0,
    loraName: undefined,
    loraId: undefined,
    cacheSalt: undefined,
    mmHashes: undefined,
    groupIdx: 0,
    ...extra,
  };
  return ev;
}

const batch = (events: KvCacheEvent[]): KvEventBatch => ({ ts: 0, dpRank: SLOT.dpRank, events, errors: [] });
const tokens = (n: number, from: number): number[] => Array.from({ length: n * BS }, (_, i) => from + i);

/**
 * A seeded vLLM engine's events: requests of several tenants (most salted, the salt in block 0's extra key
 * strings of a root event only, now and then two candidates) and unsalted ones, follow-ups forking from any
 * block held, removals (some of blocks not held), a lower tier, a parent never stored, a rare clear.
 */
function vllmBatches(rng: Rng, count: number): KvEventBatch[] {
  const held: bigint[] = [];
  let next = 1n;
  let tok = 0;
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
  const out: KvEventBatch[] = [];
  for (let b = 0; b < count; b++) {
    const events: KvCacheEvent[] = [];
    for (let e = 0; e < 8; e++) {
      const r = rng();
      const tier: StorageTier = rng() < 0.1 ? 'host_pinned' : 'device';
      if (r < 0.01) {
        events.push({ type: 'cleared' });
        held.length = 0;
      } else if (r < 0.4 && held.length > 0) {
        const hashes = Array.from({ length: 1 + Math.floor(rng() * 2) }, () => (rng() < 0.9 ? pick(held) : next++));
        events.push({ type: 'removed', tier, blockHashes: BigUint64Array.from(hashes), groupIdx: 0 });
      } else {
        const n = 1 + Math.floor(rng() * 3);
        const hashes = Array.from({ length: n }, () => next++);
        const t = tokens(n, (tok += 1000));
        if (r < 0.6 || held.length === 0) {
          const s = rng();
          const strings = s < 0.7 ? [pick(TENANTS)] : s < 0.75 ? ['x', 'y'] : undefined;
          events.push(stored(null, hashes, t, { tier, ...(strings ? { extraKeyStrings: strings } : {}) }));
        } else events.push(stored(rng() < 0.03 ? next++ : pick(held), hashes, t, { tier }));
        held.push(...hashes);
      }
    }
    out.push(batch(events));
  }
  return out;
}

type ThreadHashes = 'objects' | 'inferred' | 'unsalted' | 'forgetful';

/**
 * Applies the batches through a stream: as objects, or handed over with the hashes a thread computed (`inferred`:
 * the thread's BatchHasher; `unsalted`: a thread that infers nothing; `forgetful`: one whose memory holds 2 blocks).
 */
function apply(batches: KvEventBatch[], how: ThreadHashes, saltMemoryCap?: number) {
  const clock = new ManualClock();
  const turns: (() => void)[] = [];
  const scheduler = new TurnScheduler({ clock, maxEventsPerTurn: 48, maxTurnMs: 1000, defer: (f) => turns.push(f) });
  let evictions = 0;
  let ambiguous = 0;
  const a = new KvEventApplier({
    blockSize: BS,
    saltMemoryCap,
    onSaltEvicted: () => evictions++,
    onSaltAmbiguous: () => ambiguous++,
  });
  const counters = new KvEventCounters();
  const stream = new KvEventStream(SLOT, ingestContext({ applier: a, hooks: counters, clock, scheduler }));
  if (how === 'objects') batches.forEach((b, seq) => stream.onDecoded(BigInt(seq), b));
  else {
    const hasher = how === 'inferred' ? new BatchHasher() : how === 'forgetful' ? new BatchHasher(2) : undefined;
    const packer = new BatchPacker(4096);
    const post = (): void => eachPackedBatch(structuredClone(packer.take()), (_id, s, b) => stream.onDecoded(s, b));
    batches.forEach((b, seq) => {
      const h = hasher?.hash(1, b) ?? {
        locals: b.events.map((ev) => (ev.type === 'stored' ? storedLocalHashes(ev, ev.blockSize) : undefined)),
        salts: [],
      };
      if (packer.add(1, BigInt(seq), b, h.locals, h.salts)) return;
      post();
      packer.add(1, BigInt(seq), b, h.locals, h.salts);
    });
    post();
  }
  for (let f = turns.shift(); f !== undefined; f = turns.shift()) f();
  expect(stream.appliedCursor).toBe(BigInt(batches.length - 1));
  return { applier: a, events: counters.snapshot().events, evictions, ambiguous };
}

/** The index (every tier) and the salt memory of the slot, for every block hash the batches name. */
function state(a: KvEventApplier, batches: KvEventBatch[]) {
  const salts: (string | undefined)[] = [];
  for (const b of batches)
    for (const ev of b.events)
      if (ev.type !== 'cleared') for (const h of ev.blockHashes) salts.push(a.salts.saltOf(SLOT, h));
  return {
    device: a.indexes.peek('device')?.exportSlot(SLOT.workerId, SLOT.dpRank),
    host: a.indexes.peek('host_pinned')?.exportSlot(SLOT.workerId, SLOT.dpRank),
    size: a.salts.size,
    salts,
  };
}

describe('packed runs in a slot holding salted blocks', () => {
  for (const how of ['inferred', 'unsalted', 'forgetful'] as const) {
    for (const cap of [undefined, 24]) {
      it(`index, statuses and salt memory as one event at a time (thread hashes ${how}, cap ${cap ?? 'default'})`, () => {
        const batches = vllmBatches(seededRng(how.length * 31 + (cap ?? 0)), 300);
        const ref = apply(batches, 'objects', cap);
        const got = apply(batches, how, cap);
        expect(ref.events.stored.ok).toBeGreaterThan(400);
        expect(ref.events.stored.parent_not_found).toBeGreaterThan(0);
        expect(ref.applier.salts.size).toBeGreaterThan(0);
        if (cap !== undefined) expect(ref.evictions).toBeGreaterThan(0);
        expect(got.events).toEqual(ref.events);
        expect(got.evictions).toBe(ref.evictions);
        expect(ref.ambiguous).toBeGreaterThan(0);
        expect(got.ambiguous).toBe(ref.ambiguous);
        expect(state(got.applier, batches)).toEqual(state(ref.applier, batches));
        ref.applier.indexes.dispose();
        got.applier.indexes.dispose();
      });
    }
  }
});

interface Hashes {
  locals: (BigUint64Array | undefined)[] | readonly (BigUint64Array | undefined)[];
  salts: readonly (string | undefined)[];
}

/** The hashes `hasher` computes for the events (one call), or unsalted ones (a thread that inferred nothing). */
function threadHashes(events: KvCacheEvent[], hasher?: BatchHasher): Hashes {
  return (
    hasher?.hash(1, batch(events)) ?? {
      locals: events.map((ev) => (ev.type === 'stored' ? storedLocalHashes(ev, BS) : undefined)),
      salts: [],
    }
  );
}

/** One packed batch of `events` with the thread's `hashes`, as the main thread receives it. */
function handedOver(events: KvCacheEvent[], hashes: Hashes): PackedBatch {
  const packer = new BatchPacker();
  packer.add(1, 0n, batch(events), hashes.locals, hashes.salts);
  let out: PackedBatch | undefined;
  eachPackedBatch(structuredClone(packer.take()), (_id, _seq, pb) => (out = pb));
  return out!;
}

/** One `applyPackedRun` over the batch's first events: the events the module took, or -1 for no run. */
function runOnce(a: KvEventApplier, b: PackedBatch): number {
  const run = new PackedRun();
  const src = { u32: b.u32, from: b.firstWord, end: b.end(), maxEvents: b.count, group: 0, blockSize: BS };
  return a.applyPackedRun(SLOT, src, run, b) ? run.events : -1;
}

/** Applies a handed-over batch through a stream (the slot writer: runs, and one event at a time between them). */
function viaStream(a: KvEventApplier, b: PackedBatch): void {
  const stream = new KvEventStream(SLOT, ingestContext({ applier: a }));
  stream.onDecoded(0n, b);
  expect(stream.appliedCursor).toBe(0n);
}

function depth(a: KvEventApplier, t: number[], cacheSalt?: string): number {
  const m = a.indexes.device.findMatches(blockHashes(t, BS, { cacheSalt }));
  return m.count === 0 ? 0 : m.depths[0]!;
}

const ROOT = stored(null, [1n, 2n, 3n], tokens(3, 0), { extraKeyStrings: ['tenant-a'] });
const removed = (h: bigint): KvCacheEvent => ({
  type: 'removed',
  tier: 'device',
  blockHashes: BigUint64Array.from([h]),
  groupIdx: 0,
});

describe('a packed run in a slot holding salted blocks', () => {
  /** A salted chain (blocks 1..3, tenant-a) and an unsalted root (block 9), applied as objects. */
  function salted(): KvEventApplier {
    const a = new KvEventApplier({ blockSize: BS });
    a.applyBatch(SLOT, batch([ROOT, stored(null, [9n], tokens(1, 900))]));
    expect(a.salts.holds(SLOT)).toBe(true);
    return a;
  }

  /** A thread that saw the salted chain stored. */
  function sawRoot(): BatchHasher {
    const h = new BatchHasher();
    h.hash(1, batch([ROOT]));
    return h;
  }

  /** The run's size over `b`, and the slot after the stream applied it, against the events one at a time. */
  function expectAsOneAtATime(events: KvCacheEvent[], b: PackedBatch, runSize: number): KvEventApplier {
    expect(runOnce(salted(), b)).toBe(runSize);
    const got = salted();
    viaStream(got, b);
    const ref = salted();
    ref.applyBatch(SLOT, batch(events));
    expect(got.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank)).toEqual(
      ref.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank),
    );
    for (const h of [1n, 2n, 3n, 9n, 10n, 11n, 12n, 13n, 20n, 21n, 30n, 31n])
      expect(got.salts.saltOf(SLOT, h)).toBe(ref.salts.saltOf(SLOT, h));
    expect(got.salts.size).toBe(ref.salts.size);
    return got;
  }

  it('takes an unsalted chain and its removals whole, with the index of one event at a time', () => {
    const events = [
      stored(9n, [10n, 11n], tokens(2, 910)),
      stored(11n, [12n], tokens(1, 930)),
      removed(12n),
      stored(11n, [13n], tokens(1, 940)),
    ];
    const a = expectAsOneAtATime(events, handedOver(events, threadHashes(events)), 4);
    expect(depth(a, [...tokens(1, 900), ...tokens(2, 910), ...tokens(1, 940)])).toBe(4);
    expect(a.salts.size).toBe(3);
  });

  it('takes a follow-up the thread hashed with the inherited salt; the memory learns it, and forgets a removal', () => {
    const events = [stored(2n, [20n, 21n], tokens(2, 500)), removed(3n)];
    const a = expectAsOneAtATime(events, handedOver(events, threadHashes(events, sawRoot())), 2);
    const t = [...tokens(2, 0), ...tokens(2, 500)];
    expect(depth(a, t, 'tenant-a')).toBe(4);
    expect(depth(a, t)).toBe(0);
    expect(a.salts.saltOf(SLOT, 21n)).toBe('tenant-a');
    expect(a.salts.saltOf(SLOT, 3n)).toBeUndefined();
  });

  it('stops before an event whose inherited salt the thread did not hash it with; the main thread hashes it', () => {
    // The thread never saw the salted root: it hashed the follow-up unsalted.
    const events = [stored(9n, [10n], tokens(1, 910)), stored(2n, [20n], tokens(1, 500))];
    const a = expectAsOneAtATime(events, handedOver(events, threadHashes(events)), 1);
    expect(depth(a, [...tokens(2, 0), ...tokens(1, 500)], 'tenant-a')).toBe(3);
  });

  it("hashes a follow-up unsalted where the memory forgot its parent's salt (the cap), whatever the thread inferred", () => {
    const hasher = sawRoot();
    const next = stored(null, [5n, 6n], tokens(2, 60), { extraKeyStrings: ['tenant-b'] });
    hasher.hash(1, batch([next]));
    const events = [stored(1n, [40n], tokens(1, 400))];
    const b = handedOver(events, threadHashes(events, hasher));
    const capped = (): KvEventApplier => {
      const a = new KvEventApplier({ blockSize: BS, saltMemoryCap: 3 });
      a.applyBatch(SLOT, batch([ROOT, next])); // block 1's salt and 2's evicted, the oldest
      expect(a.salts.saltOf(SLOT, 1n)).toBeUndefined();
      return a;
    };
    const runs = capped();
    expect(runOnce(runs, b)).toBe(-1);
    const got = capped();
    viaStream(got, b);
    const ref = capped();
    ref.applyBatch(SLOT, batch(events));
    expect(got.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank)).toEqual(
      ref.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank),
    );
    expect(depth(got, [...tokens(1, 0), ...tokens(1, 400)], 'tenant-a')).toBe(1);
  });

  it('stops before an event whose parent the run itself stores salted, whatever the thread inferred', () => {
    // The thread inferred the first event's salt and lost it by the second (hashed unsalted, said so).
    const events = [stored(3n, [30n], tokens(1, 300)), stored(30n, [31n], tokens(1, 310))];
    const inferred = threadHashes(events, sawRoot());
    const lost = {
      locals: [inferred.locals[0], storedLocalHashes(events[1] as StoredBlocksEvent, BS)],
      salts: [inferred.salts[0]],
    };
    const a = expectAsOneAtATime(events, handedOver(events, lost), 1);
    expect(depth(a, [...tokens(3, 0), ...tokens(1, 300), ...tokens(1, 310)], 'tenant-a')).toBe(5);
  });
});

describe('a salted root event handed over (applied as an object)', () => {
  const root = stored(null, [50n, 51n], tokens(2, 5000), { extraKeyStrings: ['tenant-b'] });
  const withSalt = (cacheSalt: string) => blockHashes(tokens(2, 5000), BS, { cacheSalt });

  /** The root handed over with `locals` said to be hashed with `salt`, applied through a stream. */
  function applied(locals: BigUint64Array, salt: string): KvEventApplier {
    const a = new KvEventApplier({ blockSize: BS });
    viaStream(a, handedOver([root], { locals: [locals], salts: [salt] }));
    expect(a.salts.saltOf(SLOT, 51n)).toBe('tenant-b');
    return a;
  }

  function oneAtATime(): KvEventApplier {
    const a = new KvEventApplier({ blockSize: BS });
    a.applyBatch(SLOT, batch([root]));
    return a;
  }

  it("uses the thread's hashes where the thread hashed it with the salt inferred here, as one at a time", () => {
    const hasher = new BatchHasher();
    const h = hasher.hash(1, batch([root]));
    expect(h.salts).toEqual(['tenant-b']);
    const a = applied(h.locals[0]!, 'tenant-b');
    expect(a.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank)).toEqual(
      oneAtATime().indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank),
    );
    // The thread's hashes are what is indexed, not hashes computed again here: hashes of other tokens show it.
    const other = blockHashes(tokens(2, 7000), BS, { cacheSalt: 'tenant-b' });
    const marked = applied(other, 'tenant-b');
    expect(marked.indexes.device.findMatches(other).depths[0]).toBe(2);
    expect(marked.indexes.device.findMatches(withSalt('tenant-b')).count).toBe(0);
  });

  it('hashes it here where the thread hashed it with another salt', () => {
    const a = applied(withSalt('tenant-c'), 'tenant-c');
    expect(a.indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank)).toEqual(
      oneAtATime().indexes.device.exportSlot(SLOT.workerId, SLOT.dpRank),
    );
    expect(a.indexes.device.findMatches(withSalt('tenant-b')).depths[0]).toBe(2);
    expect(a.indexes.device.findMatches(withSalt('tenant-c')).count).toBe(0);
  });
});

describe("an ingestion thread's salt inference", () => {
  it('hashes a root with its salt and a follow-up with the inherited one; forgets on removal, clear and removal of the stream', () => {
    const h = new BatchHasher();
    const root = stored(null, [1n, 2n], tokens(2, 0), { extraKeyStrings: ['tenant-a'] });
    const r1 = h.hash(1, batch([root, stored(null, [5n], tokens(1, 50), { extraKeyStrings: ['x', 'y'] })]));
    expect(r1.salts).toEqual(['tenant-a', undefined]);
    expect(r1.locals[0]).toEqual(blockHashes(tokens(2, 0), BS, { cacheSalt: 'tenant-a' }));
    expect(r1.locals[1]).toEqual(blockHashes(tokens(1, 50), BS));
    const r2 = h.hash(1, batch([stored(2n, [3n], tokens(1, 20))]));
    expect(r2.salts).toEqual(['tenant-a']);
    expect(h.hash(2, batch([stored(2n, [4n], tokens(1, 20))])).salts).toEqual([]); // another stream's parent
    h.hash(1, batch([{ type: 'removed', tier: 'device', blockHashes: BigUint64Array.from([3n]), groupIdx: 0 }]));
    expect(h.hash(1, batch([stored(3n, [6n], tokens(1, 30))])).salts).toEqual([]);
    expect(h.remembered).toBe(2);
    h.hash(1, batch([{ type: 'cleared' }]));
    expect(h.remembered).toBe(0);
    h.hash(1, batch([root]));
    h.forget(1);
    expect(h.remembered).toBe(0);
  });
});
