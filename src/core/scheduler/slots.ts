/**
 * The slot table: registered workers mapped to dense slots, and every
 * per-slot fact the hot path reads, in typed arrays indexed by slot.
 *
 * Slots are the dense ids of the primary `PrefixIndex` (`index.slotOf`),
 * reused as array indexes everywhere (this table, `ActiveSequences`, the
 * scratch buffers), so scoring has no string keys and no per-candidate
 * objects. The table owns their lifetime: a worker leaves through
 * `KvScheduler.removeWorker`, never through `index.removeWorker` directly, or
 * a freed id could be reused under the bookkeeping.
 *
 * The scratch buffers live here too because their size is the table's:
 * per-slot buffers grow with the slot capacity, per-candidate buffers with the
 * registered slots.
 */
import type { WorkerRank } from '../../common/index.js';
import { KvgateError } from '../../errors/index.js';
import type { PrefixIndex } from '../../wasm/index.js';
import type { ActiveSequences } from '../active-sequences.js';
import type { ApproximateIndex } from '../approximate.js';
import { DEFAULT_MAX_NUM_BATCHED_TOKENS, invalidArg, type WorkerCapacity, type WorkerSummary } from './types.js';

/** One registered worker: what it advertised, its slots by rank offset, its taints as a set. */
export interface WorkerEntry {
  readonly summary: WorkerSummary;
  readonly slots: Int32Array;
  readonly taints: ReadonlySet<string>;
}

/**
 * Buffers one decision overwrites. Per slot (only the entries of the
 * current candidates are meaningful): `dev` effective device overlap, `host`
 * and `disk` tier overlap beyond faster tiers, `depth` prompt depth already
 * active there. Per candidate: `eligible` slots, their `costs` and softmax
 * `probs`.
 */
class Scratch {
  dev = new Float64Array(0);
  host = new Float64Array(0);
  disk = new Float64Array(0);
  depth = new Float64Array(0);
  eligible = new Int32Array(0);
  costs = new Float64Array(0);
  probs = new Float64Array(0);
  /** Deepest match in the shared-cache index for the request being scored. */
  sharedDepth = 0;
}

export class SlotTable {
  readonly scratch = new Scratch();
  readonly workers = new Map<number, WorkerEntry>();
  /**
   * Workers held (`hold`): out of `workers` and `all` (never eligible), their slots unregistered here, but their
   * slots stay registered in the bookkeeping, so their in-flight requests keep their load and free as usual.
   */
  readonly #held = new Map<number, WorkerEntry>();
  /** Length of every per-slot array. */
  cap = 0;
  /** 1 while the slot belongs to a registered worker. */
  registered = new Uint8Array(0);
  slotWorker = new Float64Array(0);
  slotRank = new Int32Array(0);
  maxBatched = new Float64Array(0);
  totalKv = new Float64Array(0);
  /** Slots with an advertised KV capacity (`totalKv` > 0); 0: no slot has a cache-pressure term to read. */
  knownCapacityCount = 0;
  /** 1 while the slot's worker is registered with `kvOverlap: false`: its overlap is scored 0. */
  overlapOff = new Uint8Array(0);
  /** Slots whose `overlapOff` is 1 (0: no decision needs to look). */
  overlapOffCount = 0;
  /** Engine-reported KV usage (`reportKvUsage`). */
  kvUsed = new Float64Array(0);
  /** Every registered slot, compact: exactly as many as are registered. */
  all = new Int32Array(0);
  /** Predict-on-route index slot -> primary slot (-1 = none). */
  predToSlot = new Int32Array(0);

  readonly #index: PrefixIndex;
  readonly #active: ActiveSequences;
  readonly #predicted: ApproximateIndex | null;

  constructor(index: PrefixIndex, active: ActiveSequences, predicted: ApproximateIndex | null) {
    this.#index = index;
    this.#active = active;
    this.#predicted = predicted;
  }

  /**
   * Registers a worker's ranks (replacing an earlier registration's capacity;
   * ranks that disappear are dropped).
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for invalid ids, ranks or capacities.
   */
  register(workerId: number, info: WorkerCapacity): void {
    const start = info.dataParallelStartRank ?? 0;
    const size = info.dataParallelSize ?? 1;
    validateCapacity(workerId, start, size, info);
    const previous = this.workers.get(workerId) ?? this.#held.get(workerId);
    this.#held.delete(workerId);
    if (previous !== undefined) {
      for (const slot of previous.slots) {
        const rank = this.slotRank[slot]!;
        if (rank < start || rank >= start + size) this.#dropSlot(slot);
      }
    }
    const slots = new Int32Array(size);
    for (let i = 0; i < size; i++) {
      const rank = start + i;
      const slot = this.#index.slotOf(workerId, rank);
      slots[i] = slot;
      this.#ensureCap(slot + 1);
      this.registered[slot] = 1;
      this.slotWorker[slot] = workerId;
      this.slotRank[slot] = rank;
      this.maxBatched[slot] = info.maxNumBatchedTokens ?? DEFAULT_MAX_NUM_BATCHED_TOKENS;
      this.#setTotalKv(slot, info.totalKvBlocks ?? 0);
      this.#setOverlapOff(slot, info.kvOverlap === false ? 1 : 0);
      this.#active.ensureSlot(slot, workerId, rank);
      if (this.#predicted !== null) this.#mapPredicted(this.#predicted.index.slotOf(workerId, rank), slot);
    }
    const taints = Object.freeze([...(info.taints ?? [])]);
    this.workers.set(workerId, {
      summary: Object.freeze({
        workerId,
        dataParallelStartRank: start,
        dataParallelSize: size,
        maxNumBatchedTokens: info.maxNumBatchedTokens,
        totalKvBlocks: info.totalKvBlocks,
        taints,
      }),
      slots,
      taints: new Set(taints),
    });
    this.#rebuildAll();
  }

  /**
   * Drops a worker's slots and their bookkeeping, also a held worker's. Returns false if it was neither registered
   * nor held. Index entries are the caller's.
   */
  unregister(workerId: number): boolean {
    const w = this.workers.get(workerId) ?? this.#held.get(workerId);
    if (w === undefined) return false;
    for (const slot of w.slots) this.#dropSlot(slot);
    this.workers.delete(workerId);
    this.#held.delete(workerId);
    this.#rebuildAll();
    return true;
  }

  /**
   * Takes a registered worker out of routing but keeps its bookkeeping: its slots leave `workers` and `all` (not
   * eligible, not pinnable, `slotOf` undefined) while its requests stay booked on them and `bookedSlotOf` still
   * finds them; a later `register` brings it back with that load, `unregister` drops it. The caller keeps its
   * index slots (their ids are the bookkeeping's: one freed could be reused under these requests).
   * Returns false if it was not registered.
   */
  hold(workerId: number): boolean {
    const w = this.workers.get(workerId);
    if (w === undefined) return false;
    for (const slot of w.slots) this.#dropSlot(slot, true);
    this.workers.delete(workerId);
    this.#held.set(workerId, w);
    this.#rebuildAll();
    return true;
  }

  /** The registered slot of (worker, rank), or undefined. */
  slotOf(rank: WorkerRank): number | undefined {
    const s = this.#index.findSlot(rank.workerId, rank.dpRank);
    return s !== undefined && s < this.cap && this.registered[s] === 1 ? s : undefined;
  }

  /** The slot of (worker, rank) of a registered or held worker (where its requests are booked), or undefined. */
  bookedSlotOf(rank: WorkerRank): number | undefined {
    const s = this.#index.findSlot(rank.workerId, rank.dpRank);
    if (s === undefined || s >= this.cap) return undefined;
    return this.registered[s] === 1 || this.#held.get(rank.workerId)?.slots.includes(s) === true ? s : undefined;
  }

  /**
   * The slot of one of `w`'s ranks.
   * @throws KvgateError KVG_ERR_INVALID_DP_RANK when the worker does not advertise `dpRank`.
   */
  checkedSlot(w: WorkerEntry, dpRank: number): number {
    const { workerId, dataParallelStartRank: start, dataParallelSize: size } = w.summary;
    if (!Number.isInteger(dpRank) || dpRank < start || dpRank >= start + size) {
      throw new KvgateError(
        'KVG_ERR_INVALID_DP_RANK',
        `worker ${workerId} has dp ranks [${start}, ${start + size}), not ${dpRank}`,
        { workerId, dpRank, dataParallelStartRank: start, dataParallelSize: size },
      );
    }
    return w.slots[dpRank - start]!;
  }

  /**
   * Cached blocks slot `s` would evict to take `newBlocks` more: what its held blocks (the primary
   * index's count) and the new ones exceed of its advertised KV capacity; 0 when the capacity is unknown.
   */
  evictedBlocks(s: number, newBlocks: number): number {
    const capacity = this.totalKv[s]!;
    if (capacity <= 0 || newBlocks <= 0) return 0;
    const over = this.#index.slotBlockCount(s) + newBlocks - capacity;
    return over > 0 ? (over < newBlocks ? over : newBlocks) : 0;
  }

  /**
   * The blocks beyond slot `s`'s advertised KV capacity if `activeBlocks` (its running requests' and a
   * prompt's new ones) were active there (the KV-overflow term); 0 within it, or with no capacity known.
   */
  overflowBlocks(s: number, activeBlocks: number): number {
    const capacity = this.totalKv[s]!;
    return capacity > 0 && activeBlocks > capacity ? activeBlocks - capacity : 0;
  }

  /** Product of the preferred-taint factors of the taints slot `s`'s worker carries. */
  taintFactor(s: number, preferred: Readonly<Record<string, number>>): number {
    let f = 1;
    for (const t of this.workers.get(this.slotWorker[s]!)!.taints) {
      const v = preferred[t];
      if (v !== undefined) f *= v;
    }
    return f;
  }

  #mapPredicted(p: number, slot: number): void {
    if (p >= this.predToSlot.length) {
      const next = new Int32Array(Math.max(p + 1, this.predToSlot.length * 2, 16)).fill(-1);
      next.set(this.predToSlot);
      this.predToSlot = next;
    }
    this.predToSlot[p] = slot;
  }

  /** Unregisters a slot here; its bookings go too unless `keepBookings` (a held worker's). */
  #dropSlot(slot: number, keepBookings = false): void {
    if (!keepBookings) this.#active.removeSlot(slot);
    this.registered[slot] = 0;
    this.kvUsed[slot] = 0;
    this.#setOverlapOff(slot, 0);
    this.#setTotalKv(slot, 0);
  }

  #setTotalKv(slot: number, blocks: number): void {
    this.knownCapacityCount += (blocks > 0 ? 1 : 0) - (this.totalKv[slot]! > 0 ? 1 : 0);
    this.totalKv[slot] = blocks;
  }

  #setOverlapOff(slot: number, off: 0 | 1): void {
    this.overlapOffCount += off - this.overlapOff[slot]!;
    this.overlapOff[slot] = off;
  }

  #rebuildAll(): void {
    let n = 0;
    for (const w of this.workers.values()) n += w.slots.length;
    const all = new Int32Array(n);
    let k = 0;
    for (const w of this.workers.values()) for (const s of w.slots) if (this.registered[s] === 1) all[k++] = s;
    // Exactly the registered slots, so a decision copies `all` whole (no view of its first ones made).
    this.all = k === n ? all : all.slice(0, k);
    const scratch = this.scratch;
    if (scratch.eligible.length < this.cap) {
      scratch.eligible = new Int32Array(this.cap);
      scratch.costs = new Float64Array(this.cap);
      scratch.probs = new Float64Array(this.cap);
    }
  }

  #ensureCap(need: number): void {
    if (need <= this.cap) return;
    const cap = Math.max(need, this.cap * 2, 16);
    const grow = <T extends Float64Array | Int32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
      const b = make(cap);
      b.set(a);
      return b;
    };
    this.registered = grow(this.registered, (k) => new Uint8Array(k));
    this.slotWorker = grow(this.slotWorker, (k) => new Float64Array(k));
    this.slotRank = grow(this.slotRank, (k) => new Int32Array(k));
    this.maxBatched = grow(this.maxBatched, (k) => new Float64Array(k));
    this.totalKv = grow(this.totalKv, (k) => new Float64Array(k));
    this.kvUsed = grow(this.kvUsed, (k) => new Float64Array(k));
    this.overlapOff = grow(this.overlapOff, (k) => new Uint8Array(k));
    const scratch = this.scratch;
    scratch.dev = new Float64Array(cap);
    scratch.host = new Float64Array(cap);
    scratch.disk = new Float64Array(cap);
    scratch.depth = new Float64Array(cap);
    this.cap = cap;
  }
}

function validateCapacity(workerId: number, start: number, size: number, info: WorkerCapacity): void {
  if (!Number.isSafeInteger(workerId) || workerId < 0)
    throw invalidArg(`worker id must be a non-negative safe integer, got ${workerId}`);
  if (!Number.isInteger(start) || start < 0 || !Number.isInteger(size) || size < 1 || start + size > 0x10000) {
    throw invalidArg(`worker ${workerId}: invalid dp ranks start ${start} size ${size}`);
  }
  for (const [name, v] of [
    ['maxNumBatchedTokens', info.maxNumBatchedTokens],
    ['totalKvBlocks', info.totalKvBlocks],
  ] as const) {
    if (v !== undefined && !(Number.isFinite(v) && v > 0))
      throw invalidArg(`worker ${workerId}: ${name} must be > 0, got ${v}`);
  }
}
