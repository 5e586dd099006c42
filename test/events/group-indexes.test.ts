/**
 * Hybrid models end to end through ingestion: KV events encoded exactly as vLLM encodes them (msgpack
 * positional arrays: BlockStored with its 11 fields through `group_idx`, `kv_cache_spec_kind` and
 * `kv_cache_spec_sliding_window`; BlockRemoved with `group_idx`; sliding-window and Mamba groups leaving their
 * null blocks out of `block_hashes`) from simulated engines of two layouts, sliding window + full and Mamba +
 * full. After seeded random traffic and evictions, each group's index holds what the engine holds, and the
 * router's overlap of every prompt on every worker equals a reference computed by brute force from the
 * engines' caches: the largest prefix every group can serve.
 */
import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, type Rng } from '../../src/common/index.js';
import { decodeKvEventBatch, KvEventApplier, KvGroupIndexes, TieredPrefixIndex } from '../../src/events/index.js';
import { KvRouter } from '../../src/routing/index.js';
import { PrefixIndex, type EvictionReport } from '../../src/wasm/index.js';
import { captureWarnings } from '../helpers/capture-log.js';

const BS = 4;
const WORKERS = [1, 2, 3];

type Layout = 'sliding' | 'mamba';
/** Window of the sliding group: 9 tokens, so ceil(8 / 4) = 2 blocks before the hit point. */
const WINDOW = 9;
const NEED = 2;

/** An engine's per-process block hash (vLLM's are seeded per process): FNV-1a over the prefix, salted. */
function engineHash(worker: number, key: string): bigint {
  let h = 0xcbf29ce484222325n ^ BigInt(worker * 7919);
  for (let i = 0; i < key.length; i++) h = BigInt.asUintN(64, (h ^ BigInt(key.charCodeAt(i))) * 0x100000001b3n);
  return h;
}

const keyOf = (prompt: number[], i: number): string => prompt.slice(0, (i + 1) * BS).join(',');

/** Whether every group can serve a hit of `e` blocks (the rule, written out independently of the router). */
function validAt(layout: Layout, has: (g: number, i: number) => boolean, e: number): boolean {
  for (let i = 0; i < e; i++) if (!has(0, i)) return false;
  if (e === 0) return true;
  if (layout === 'mamba') return has(1, e - 1);
  for (let i = Math.max(0, e - NEED); i < e; i++) if (!has(1, i)) return false;
  return true;
}

function referenceHit(layout: Layout, has: (g: number, i: number) => boolean, n: number): number {
  for (let e = n; e > 0; e--) if (validAt(layout, has, e)) return e;
  return 0;
}

/** A simulated vLLM engine of one layout: group 0 full attention, group 1 sliding window or Mamba. */
class Engine {
  /** Per group, prefix key -> engine hash. */
  readonly cache = [new Map<string, bigint>(), new Map<string, bigint>()];
  #batch: unknown[] = [];

  constructor(
    readonly worker: number,
    readonly layout: Layout,
  ) {}

  has(prompt: number[]): (g: number, i: number) => boolean {
    return (g, i) => this.cache[g]!.has(keyOf(prompt, i));
  }

  #hash(prompt: number[], i: number): bigint {
    return engineHash(this.worker, keyOf(prompt, i));
  }

  /** BlockStored of blocks [from, to) of `prompt` in group g, hashes for [from + nulls, to), as vLLM's array. */
  #stored(g: number, prompt: number[], from: number, to: number, nulls: number): void {
    const hashes: bigint[] = [];
    for (let i = from + nulls; i < to; i++) {
      hashes.push(this.#hash(prompt, i));
      this.cache[g]!.set(keyOf(prompt, i), this.#hash(prompt, i));
    }
    const parent = from === 0 ? null : this.#hash(prompt, from - 1);
    const kind = g === 0 ? 'full_attention' : this.layout === 'mamba' ? 'mamba' : 'sliding_window';
    const window = g === 1 && this.layout === 'sliding' ? WINDOW : null;
    const tokens = prompt.slice(from * BS, to * BS);
    this.#batch.push(['BlockStored', hashes, parent, tokens, BS, null, 'GPU', null, null, g, kind, window]);
  }

  /** Stores a request's blocks the way vLLM's hybrid manager caches them after a hit of `hit` blocks. */
  serve(prompt: number[]): void {
    const n = Math.floor(prompt.length / BS);
    const hit = referenceHit(this.layout, this.has(prompt), n);
    this.#runs(0, prompt, hit, n, 0);
    if (this.layout === 'mamba') {
      // Align mode: only the state at the end of the prompt is real; the blocks before it are null.
      if (n > hit && !this.cache[1]!.has(keyOf(prompt, n - 1))) this.#stored(1, prompt, hit, n, n - 1 - hit);
    } else {
      // Chunked prefill: blocks that slid out of the window were nulled before they were cached.
      const first = Math.max(hit, n - NEED - 1);
      this.#runs(1, prompt, hit, n, first - hit);
    }
  }

  /** The uncached blocks of [from, to) in group g, one BlockStored per run (the first with `nulls` null blocks). */
  #runs(g: number, prompt: number[], from: number, to: number, nulls: number): void {
    let start = -1;
    for (let i = from + nulls; i <= to; i++) {
      const cached = i < to && this.cache[g]!.has(keyOf(prompt, i));
      if (i < to && !cached && start < 0) start = i;
      if ((i === to || cached) && start >= 0) {
        if (start === from + nulls) this.#stored(g, prompt, from, i, nulls);
        else this.#stored(g, prompt, start, i, 0);
        start = -1;
      }
    }
  }

  /** Evicts `count` random cached blocks of group g (one BlockRemoved each, as vLLM sends them). */
  evict(rng: Rng, g: number, count: number): void {
    for (let k = 0; k < count && this.cache[g]!.size > 0; k++) {
      const keys = [...this.cache[g]!.keys()];
      const key = keys[Math.floor(rng() * keys.length)]!;
      this.#batch.push(['BlockRemoved', [this.cache[g]!.get(key)!], 'GPU', g]);
      this.cache[g]!.delete(key);
    }
  }

  /** The batch so far as vLLM's publisher sends it: `[ts, events, data_parallel_rank]`. */
  flush(): Uint8Array {
    const payload = encode([1_700_000_000.25, this.#batch, 0], { useBigInt64: true });
    this.#batch = [];
    return payload;
  }
}

function prompts(rng: Rng): number[][] {
  const out: number[][] = [];
  for (let p = 0; p < 4; p++) {
    const prefix = Array.from({ length: 6 * BS }, (_, i) => 1000 * (p + 1) + i);
    for (let s = 0; s < 4; s++) {
      const tail = Array.from({ length: Math.floor(rng() * 7) * BS + (s % 2) }, (_, i) => 100 * s + i + 1);
      out.push([...prefix, ...tail]);
    }
  }
  return out;
}

/** A router over a hybrid model's group indexes, fed by its applier. */
function router() {
  const index = new PrefixIndex();
  const groups = new KvGroupIndexes({ primary: index });
  const kv = new KvRouter({ blockSize: BS, clock: new ManualClock(), rng: seededRng(1), index, kvGroups: groups });
  const applier = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(kv.index), groups });
  for (const w of WORKERS) kv.addWorker(w);
  return { kv, groups, applier };
}

/** `steps` random requests (and evictions) on the engines, each batch applied by every applier; counts statuses. */
function traffic(rng: Rng, engines: Engine[], all: number[][], steps: number, appliers: KvEventApplier[]) {
  const statuses = new Map<string, number>();
  for (let step = 0; step < steps; step++) {
    const e = engines[Math.floor(rng() * engines.length)]!;
    e.serve(all[Math.floor(rng() * all.length)]!);
    if (rng() < 0.5) e.evict(rng, Math.floor(rng() * 2), 1 + Math.floor(rng() * 3));
    const decoded = decodeKvEventBatch(e.flush());
    if (!decoded.ok) throw new Error(decoded.error.message);
    expect(decoded.batch.errors).toEqual([]);
    for (const applier of appliers)
      applier.applyBatch({ workerId: e.worker, dpRank: 0 }, decoded.batch, (_t, s) =>
        statuses.set(s, (statuses.get(s) ?? 0) + 1),
      );
  }
  return statuses;
}

function run(layout: Layout, seed: number) {
  const rng = seededRng(seed);
  const { kv, groups, applier } = router();
  const engines = WORKERS.map((w) => new Engine(w, layout));
  const all = prompts(rng);
  const statuses = traffic(rng, engines, all, 120, [applier]);
  return { kv, groups, applier, engines, all, statuses, rng };
}

/** Each worker's overlap of each prompt. */
function overlaps(kv: KvRouter, all: number[][]): number[][] {
  return all.map((prompt, p) => {
    const d = kv.findBestMatch({ requestId: `q${p}`, tokens: prompt }, { mode: 'query' });
    return WORKERS.map((w) => d.candidates.find((c) => c.workerId === w)?.overlapBlocks ?? 0);
  });
}

describe.each(['sliding', 'mamba'] as const)('hybrid layout full + %s, events as vLLM encodes them', (layout) => {
  it('keeps one index per group equal to the engine and predicts the hit every group can serve', () => {
    const { kv, groups, engines, all, statuses } = run(layout, layout === 'sliding' ? 7 : 11);
    // Every event applied as meant (removals of blocks never stored would be not_found).
    expect([...statuses.keys()].sort()).toEqual(['ok']);
    expect(groups.layout().get(1)?.kind).toBe(layout === 'mamba' ? 'mamba' : 'sliding_window');
    for (const e of engines) {
      expect(kv.index.blockCount(e.worker, 0)).toBe(e.cache[0]!.size);
      expect(groups.blockCount({ workerId: e.worker, dpRank: 0 }, 1)).toBe(e.cache[1]!.size);
    }
    let hits = 0;
    let partial = 0;
    for (const [p, prompt] of all.entries()) {
      const d = kv.findBestMatch({ requestId: `q${p}`, tokens: prompt }, { mode: 'query' });
      const n = Math.floor(prompt.length / BS);
      for (const e of engines) {
        const expected = referenceHit(layout, e.has(prompt), n);
        const got = d.candidates.find((c) => c.workerId === e.worker)?.overlapBlocks ?? 0;
        expect({ worker: e.worker, prompt: p, overlap: got }).toEqual({
          worker: e.worker,
          prompt: p,
          overlap: expected,
        });
        if (expected > 0) hits++;
        // Cases where the one-group answer (the full group's leading run) would over-predict.
        let lead = 0;
        while (lead < n && e.has(prompt)(0, lead)) lead++;
        if (lead > expected) partial++;
      }
    }
    // The traffic exercised both reuse and the cases a one-group index gets wrong.
    expect(hits).toBeGreaterThan(10);
    expect(partial).toBeGreaterThan(3);
  });

  it("a replica seeded from another's snapshot predicts as it does, and applies the engines' next events alike", () => {
    const source = run(layout, layout === 'sliding' ? 7 : 11);
    // The seeding of a replica's warm start (the KV-event manager's): the primary's blocks, then every group.
    const seeded = router();
    for (const w of WORKERS) {
      const slot = { workerId: w, dpRank: 0 };
      seeded.kv.index.importSlot(w, 0, source.kv.index.exportSlot(w, 0));
      const snapshot = source.groups.exportSlot(slot);
      expect(snapshot.map((g) => [g.groupIdx, g.kind, g.slidingWindow])).toEqual([
        [0, 'full_attention', undefined],
        [1, layout === 'mamba' ? 'mamba' : 'sliding_window', layout === 'mamba' ? undefined : WINDOW],
      ]);
      expect(seeded.groups.importSlot(slot, snapshot)).toBe(source.groups.blockCount(slot, 1));
    }
    expect(seeded.groups.layout()).toEqual(source.groups.layout());
    expect(overlaps(seeded.kv, source.all)).toEqual(overlaps(source.kv, source.all));
    // The next events store under the snapshot's blocks and remove them, in every group: the book knows them.
    const statuses = traffic(source.rng, source.engines, source.all, 60, [source.applier, seeded.applier]);
    expect([...statuses.keys()]).toEqual(['ok']);
    for (const e of source.engines) {
      expect(seeded.kv.index.blockCount(e.worker, 0)).toBe(e.cache[0]!.size);
      expect(seeded.groups.blockCount({ workerId: e.worker, dpRank: 0 }, 1)).toBe(e.cache[1]!.size);
    }
    expect(overlaps(seeded.kv, source.all)).toEqual(overlaps(source.kv, source.all));
  });
});

describe('one-group models', () => {
  it('keep the full group only: no group index, overlap unchanged', () => {
    const kv = new KvRouter({ blockSize: BS, clock: new ManualClock(), rng: seededRng(1) });
    const groups = new KvGroupIndexes({ primary: kv.index });
    const applier = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(kv.index), groups });
    const e = new Engine(1, 'sliding');
    const prompt = Array.from({ length: 5 * BS }, (_, i) => i + 1);
    // Full-attention events only, as a single-group vLLM model sends them.
    const payload = encode(
      [
        1.5,
        [
          [
            'BlockStored',
            [11n, 12n],
            null,
            prompt.slice(0, 2 * BS),
            BS,
            null,
            'GPU',
            null,
            null,
            0,
            'full_attention',
            null,
          ],
        ],
        0,
      ],
      { useBigInt64: true },
    );
    const decoded = decodeKvEventBatch(payload);
    if (!decoded.ok) throw new Error(decoded.error.message);
    applier.applyBatch({ workerId: e.worker, dpRank: 0 }, decoded.batch);
    expect(groups.hybrid).toBe(false);
    expect(groups.others()).toEqual([]);
    expect(kv.index.blockCount(1, 0)).toBe(2);
  });
});

describe('the number of groups of a model', () => {
  /** A sliding-window group's BlockStored of one block, as vLLM encodes it. */
  function groupEvent(group: number): unknown[] {
    const tokens = [group + 1, group + 2, group + 3, group + 4];
    return [
      'BlockStored',
      [1000n + BigInt(group)],
      null,
      tokens,
      BS,
      null,
      'GPU',
      null,
      null,
      group,
      'sliding_window',
      8,
    ];
  }

  it('is bounded: a group past maxGroups gets no index, its events refused, counted and logged (throttled)', () => {
    const clock = new ManualClock();
    const lines: Record<string, unknown>[] = [];
    let refused = 0;
    const primary = new PrefixIndex();
    const groups = new KvGroupIndexes({
      primary,
      maxGroups: 3,
      clock,
      logger: captureWarnings(lines),
      onRefused: () => refused++,
    });
    const applier = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(primary), groups });
    const slot = { workerId: 1, dpRank: 0 };
    const statuses: string[] = [];
    // An engine (or a publisher) announcing ever new group indexes.
    const apply = (from: number, to: number): void => {
      const evs = Array.from({ length: to - from }, (_, i) => groupEvent(from + i));
      const decoded = decodeKvEventBatch(encode([1.5, evs, 0], { useBigInt64: true }));
      if (!decoded.ok) throw new Error(decoded.error.message);
      applier.applyBatch(slot, decoded.batch, (_type, status) => statuses.push(status));
    };
    apply(1, 200);
    // The primary and two more: groups 1 and 2 indexed, none after them.
    expect(groups.others().map((g) => g.groupIdx)).toEqual([1, 2]);
    expect([...groups.layout().keys()]).toEqual([0, 1, 2]);
    expect(statuses.slice(0, 2)).toEqual(['ok', 'ok']);
    expect(new Set(statuses.slice(2))).toEqual(new Set(['other_group']));
    expect(refused).toBe(197);
    expect(lines).toEqual([expect.objectContaining({ groupIdx: 3, maxGroups: 3 })]);
    // A known group goes on being indexed; a refusal later is logged again, with what was suppressed.
    apply(2, 3);
    expect(groups.blockCount(slot, 2)).toBe(1);
    clock.advance(10_000);
    apply(500, 501);
    expect(lines[1]).toMatchObject({ groupIdx: 500, suppressed: 196 });
    expect(refused).toBe(198);
  });
});

describe('group indexes as the engine gives them', () => {
  const FULL_STORE = [BS, null, 'GPU', null, null];
  /** BlockStored of blocks `from..to` (block i's tokens are 10 * i + 1..4, its hash 100 + i) in group `g`. */
  function stored(g: number, from: number, to: number): unknown[] {
    const hashes = Array.from({ length: to - from }, (_, i) => BigInt(100 + from + i));
    const tokens = Array.from({ length: (to - from) * BS }, (_, i) => 10 * (from + Math.floor(i / BS)) + (i % BS) + 1);
    const kind = g === 0 ? ['full_attention', null] : ['sliding_window', 2 * BS + 1];
    return ['BlockStored', hashes, from === 0 ? null : BigInt(99 + from), tokens, ...FULL_STORE, g, ...kind];
  }

  // vLLM numbers a model's groups 0..n-1, but the index is the engine's: a model of 32 groups (max_kv_groups 32)
  // has a group 31, and a publisher may number its groups sparsely. Each group's blocks are kept apart.
  it.each([
    { case: 'group 1 beside group 0', second: 1, maxGroups: undefined, between: 0 },
    { case: 'group 31 beside group 0', second: 31, maxGroups: undefined, between: 0 },
    { case: 'group 1000 beside group 0', second: 1000, maxGroups: undefined, between: 0 },
    // Dense, the model's 32nd group: groups 1..30 hold and evict block 1 as well.
    { case: 'groups 0..31, max_kv_groups 32', second: 31, maxGroups: 32, between: 30 },
  ])('$case', ({ second, maxGroups, between }) => {
    const index = new PrefixIndex();
    const groups = new KvGroupIndexes({ primary: index, maxGroups });
    const kv = new KvRouter({ blockSize: BS, clock: new ManualClock(), rng: seededRng(1), index, kvGroups: groups });
    const applier = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(kv.index), groups });
    kv.addWorker(1);
    const statuses: string[] = [];
    const apply = (...evs: unknown[][]): void => {
      const decoded = decodeKvEventBatch(encode([1.5, evs, 0], { useBigInt64: true }));
      if (!decoded.ok) throw new Error(decoded.error.message);
      applier.applyBatch({ workerId: 1, dpRank: 0 }, decoded.batch, (_t, s) => statuses.push(s));
    };
    // Every group holds blocks 0 and 1; all but `second` evict block 1, which `second` still holds.
    const more = Array.from({ length: between }, (_, i) => i + 1);
    apply(stored(0, 0, 2), ...more.map((g) => stored(g, 0, 2)), stored(second, 0, 2));
    apply(['BlockRemoved', [101n], 'GPU', 0], ...more.map((g) => ['BlockRemoved', [101n], 'GPU', g]));
    statuses.length = 0;
    // The sliding group stores block 2 under block 1: the book must still know block 1 (the group holds it).
    apply(stored(second, 2, 3));
    apply(stored(0, 1, 3), ...more.map((g) => stored(g, 1, 3)));
    expect(statuses).toEqual(Array(2 + between).fill('ok'));
    expect(groups.others()).toHaveLength(between + 1);
    expect(groups.blockCount({ workerId: 1, dpRank: 0 }, second)).toBe(3);
    const tokens = Array.from({ length: 3 * BS }, (_, i) => 10 * Math.floor(i / BS) + (i % BS) + 1);
    const d = kv.findBestMatch({ requestId: 'r', tokens }, { mode: 'query' });
    expect(d.candidates.find((c) => c.workerId === 1)?.overlapBlocks).toBe(3);
  });

  it('a replica seeded from a snapshot knows which group holds each of its blocks, as the replica that saw the events', () => {
    const replica = () => {
      const r = router();
      const statuses: string[] = [];
      const apply = (...evs: unknown[][]): void => {
        const decoded = decodeKvEventBatch(encode([1.5, evs, 0], { useBigInt64: true }));
        if (!decoded.ok) throw new Error(decoded.error.message);
        r.applier.applyBatch({ workerId: 1, dpRank: 0 }, decoded.batch, (_t, st) => statuses.push(st));
      };
      return { ...r, statuses, apply };
    };
    const slot = { workerId: 1, dpRank: 0 };
    const source = replica();
    source.apply(stored(0, 0, 2), stored(1, 0, 2));
    const seeded = replica();
    seeded.kv.index.importSlot(1, 0, source.kv.index.exportSlot(1, 0));
    expect(seeded.groups.importSlot(slot, source.groups.exportSlot(slot))).toBe(2);
    // The full group evicts block 1, which the window group still holds; the window group then stores block 2
    // under it, and evicts it.
    for (const r of [source, seeded]) {
      r.statuses.length = 0;
      r.apply(['BlockRemoved', [101n], 'GPU', 0]);
      r.apply(stored(1, 2, 3));
      r.apply(['BlockRemoved', [101n], 'GPU', 1]);
    }
    expect(seeded.statuses).toEqual(['ok', 'ok', 'ok']);
    expect(seeded.statuses).toEqual(source.statuses);
    expect(seeded.groups.blockCount(slot, 1)).toBe(2);
  });

  it('a model keeps at most 32 groups, the bits of the book', () => {
    const primary = new PrefixIndex();
    expect(() => new KvGroupIndexes({ primary, maxGroups: 33 })).toThrow(
      expect.objectContaining({ code: 'KVG_ERR_INVALID_ARGUMENT' }),
    );
    expect(() => new KvGroupIndexes({ primary, maxGroups: 0 })).toThrow(
      expect.objectContaining({ code: 'KVG_ERR_INVALID_ARGUMENT' }),
    );
    expect(new KvGroupIndexes({ primary, maxGroups: 32 }).others()).toEqual([]);
  });
});

/**
 * One worker's hybrid model (worker 1, rank 0) whose index is under `budget` bytes (`onEvict` hears of each
 * eviction), its groups built with `groupOpts`; `apply` decodes and applies a batch of wire events, each
 * event's status to `onStatus`.
 */
function hybridUnderBudget(
  budget: number,
  onEvict: ((r: EvictionReport) => void) | undefined,
  groupOpts: Omit<ConstructorParameters<typeof KvGroupIndexes>[0], 'primary'>,
  onStatus: (status: string) => void,
) {
  const primary = new PrefixIndex();
  primary.setMemoryBudget(budget, onEvict);
  const groups = new KvGroupIndexes({ primary, ...groupOpts });
  const kv = new KvRouter({
    blockSize: BS,
    clock: new ManualClock(),
    rng: seededRng(1),
    index: primary,
    kvGroups: groups,
  });
  const applier = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(primary), groups });
  kv.addWorker(1);
  const apply = (evs: unknown[][]): void => {
    const decoded = decodeKvEventBatch(encode([1.5, evs, 0], { useBigInt64: true }));
    if (!decoded.ok) throw new Error(decoded.error.message);
    applier.applyBatch({ workerId: 1, dpRank: 0 }, decoded.batch, (_t, st) => onStatus(st));
  };
  return { primary, groups, kv, apply };
}

describe("a hybrid model's index under its memory budget", () => {
  const BUDGET = 512 * 1024;

  /** A sliding-window group's BlockStored of a fresh chain of `n` blocks (root), hashes from `next`, as vLLM's. */
  function windowChain(rng: Rng, first: bigint, n: number): unknown[] {
    const hashes = Array.from({ length: n }, (_, i) => first + BigInt(i));
    const tokens = Array.from({ length: n * BS }, () => 1 + Math.floor(rng() * 50_000));
    return ['BlockStored', hashes, null, tokens, BS, null, 'GPU', null, null, 1, 'sliding_window', WINDOW];
  }

  it('holds every group within the budget: a flood of one group evicts there, counted and reported', () => {
    const rng = seededRng(31);
    const reports: EvictionReport[] = [];
    const statuses = new Set<string>();
    const { primary, groups, kv, apply } = hybridUnderBudget(
      BUDGET,
      (r) => reports.push(r),
      {},
      (st) => statuses.add(st),
    );
    // A document in the full-attention group, then the sliding-window group publishing block after block.
    const doc = Array.from({ length: 8 * BS }, (_, i) => 7000 + i);
    const docHashes = Array.from({ length: 8 }, (_, i) => BigInt(50 + i));
    apply([['BlockStored', docHashes, null, doc, BS, null, 'GPU', null, null, 0, 'full_attention', null]]);
    const held = (): number => primary.bytes + groups.others().reduce((a, g) => a + g.index.bytes, 0);
    let peak = 0;
    let next = 1000n;
    for (let batch = 0; batch < 80; batch++) {
      apply(Array.from({ length: 16 }, (_, k) => windowChain(rng, next + BigInt(k * 16), 16)));
      next += 256n;
      peak = Math.max(peak, held());
    }
    expect([...statuses]).toEqual(['ok']);
    // The model's whole index stayed within the budget, its group's blocks evicted, one episode.
    expect(peak).toBeLessThanOrEqual(BUDGET);
    const window = groups.others()[0]!.index;
    expect(window.evictedEntries).toBeGreaterThan(0);
    expect(reports.length).toBeGreaterThan(0);
    expect(reports.filter((r) => r.episodeStart)).toHaveLength(1);
    expect(reports.every((r) => r.bytesAfter <= BUDGET * 0.9)).toBe(true);
    expect(reports.reduce((a, r) => a + r.entries, 0)).toBe(window.evictedEntries + primary.evictedEntries);
    // The gauge's figure is the whole index's; the small full-attention group kept its document.
    expect(primary.pooledBytes).toBe(held());
    expect(primary.evictedEntries).toBe(0);
    expect(kv.index.blockCount(1, 0)).toBe(8);
    expect(groups.blockCount({ workerId: 1, dpRank: 0 }, 1)).toBeGreaterThan(0);
    // A group's index disposed with the groups leaves the budget.
    groups.dispose();
    expect(primary.pooledBytes).toBe(primary.bytes);
  });
});

describe("a hybrid model's hash book under its memory budget", () => {
  const BUDGET = 512 * 1024;

  /** A chain of blocks stored in group `g` (0 full attention, 1 the window) under `parent`, hashes from `first`. */
  function chain(g: number, first: bigint, tokens: number[], parent: bigint | null): unknown[] {
    const n = tokens.length / BS;
    const hashes = Array.from({ length: n }, (_, i) => first + BigInt(i));
    const kind = g === 0 ? ['full_attention', null] : ['sliding_window', WINDOW];
    return ['BlockStored', hashes, parent, tokens, BS, null, 'GPU', null, null, g, ...kind];
  }

  /** One worker's hybrid model under the budget; its statuses, the book's trims and warn lines. */
  function model() {
    const warnings: Record<string, unknown>[] = [];
    const trims = { forgotten: 0 };
    const statuses = new Map<string, number>();
    const { groups, kv, apply } = hybridUnderBudget(
      BUDGET,
      undefined,
      { logger: captureWarnings(warnings), onBookForgotten: (n) => (trims.forgotten += n) },
      (st) => statuses.set(st, (statuses.get(st) ?? 0) + 1),
    );
    return { groups, kv, apply, statuses, warnings, trims };
  }

  const tokens = (rng: Rng, blocks: number): number[] =>
    Array.from({ length: blocks * BS }, () => 1 + Math.floor(rng() * 50_000));

  /**
   * Requests of 16 blocks each, cached in both groups (vLLM hashes a block alike in every group), never removed:
   * 160 batches of 16 are 40,960 blocks, ten times what the budget's book holds. `between` runs after each batch.
   */
  function flood(rng: Rng, apply: (evs: unknown[][]) => void, between: () => void) {
    const prompts: { first: bigint; tokens: number[] }[] = [];
    for (let batch = 0; batch < 160; batch++) {
      const evs: unknown[][] = [];
      for (let k = 0; k < 16; k++) {
        const p = { first: BigInt(1 + prompts.length * 16), tokens: tokens(rng, 16) };
        prompts.push(p);
        evs.push(chain(0, p.first, p.tokens, null), chain(1, p.first, p.tokens, null));
      }
      apply(evs);
      between();
    }
    return prompts;
  }

  it('stays bounded when the engine never removes a block, and the newest prompts still route and chain', () => {
    const rng = seededRng(47);
    const { groups, kv, apply, statuses, warnings, trims } = model();
    let peak = 0;
    const prompts = flood(rng, apply, () => (peak = Math.max(peak, groups.bookEntries)));
    expect([...statuses.keys()]).toEqual(['ok']);
    // The book held about the budget's bytes at most (an entry 128 bytes), the rest forgotten, counted, one warn
    // line for the episode.
    expect(peak).toBeLessThanOrEqual(BUDGET / 128);
    expect(trims.forgotten).toBe(160 * 16 * 16 - groups.bookEntries);
    expect(warnings).toEqual([expect.objectContaining({ capacity: BUDGET / 128 })]);
    // The newest requests' follow-ups: each group stores 4 more blocks under the last one, and the router credits
    // the whole conversation.
    statuses.clear();
    for (const p of prompts.slice(-4)) {
      const more = tokens(rng, 4);
      const last = p.first + 15n;
      apply([chain(0, 1_000_000n + p.first, more, last), chain(1, 1_000_000n + p.first, more, last)]);
      const d = kv.findBestMatch({ requestId: `q${p.first}`, tokens: [...p.tokens, ...more] }, { mode: 'query' });
      expect(d.candidates.find((c) => c.workerId === 1)?.overlapBlocks).toBe(20);
    }
    expect([...statuses]).toEqual([['ok', 8]]);
  });

  it('forgets least recently used first: a block chained under all along is kept through the flood', () => {
    const rng = seededRng(53);
    const { groups, apply, statuses } = model();
    // A system prompt every request of a kind starts with; the window group stores a turn under it now and then.
    const system = tokens(rng, 4);
    apply([chain(0, 1n << 40n, system, null), chain(1, 1n << 40n, system, null)]);
    const last = (1n << 40n) + 3n;
    let turn = 0n;
    flood(rng, apply, () => apply([chain(1, (2n << 40n) + 16n * turn++, tokens(rng, 1), last)]));
    expect(groups.bookEntries).toBeLessThanOrEqual(BUDGET / 128);
    expect([...statuses.keys()]).toEqual(['ok']);
  });
});
