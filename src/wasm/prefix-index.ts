/**
 * The global prefix index (Dynamo's radix-tree semantics, flat layout in WASM).
 *
 * Each (worker, dp_rank) pair is a slot with a dense id. KV events for a slot
 * are applied in order; `findMatches` returns, for every slot, how many leading
 * blocks of a request it holds. Engine block hashes are opaque ids scoped per
 * slot; blocks are identified internally by our own chained sequence hash.
 *
 * Ownership: the index is advisory (what the engines told us they cache); the
 * bookkeeping of in-flight requests lives in src/core and is authoritative.
 */
import { slotKey, type WorkerRank } from '../common/index.js';
import { IndexMemoryError, KvgateError } from '../errors/index.js';
import type { ActivePromptTrie } from './active-prompt-trie.js';
import { IndexHandle } from './index-handle.js';
import { matchHashes, matchStage, type OverlapScores } from './index-match.js';
import { wasm, type WasmModule } from './instance.js';
import { IndexMemoryPool, type EvictionReport, type PoolMember } from './memory-pool.js';
import { exportSlotPages, importSlotPages, markHeldBlocks } from './slot-pages.js';
import { applyPackedRun, PackedStop, type PackedRun, type PackedSource } from './packed-run.js';

export interface RemoveResult {
  removed: number;
  /** Hashes the slot did not hold (skipped, as Dynamo's BlockNotFound). */
  missing: number;
}

const STORE_PARENT_NOT_FOUND = 1;
const STORE_INVALID_SEQUENCE = 2;

function toU64Array(values: BigUint64Array | readonly bigint[]): BigUint64Array {
  if (values instanceof BigUint64Array) return values;
  const out = new BigUint64Array(values.length);
  // Signed i64 hashes (SGLang) are reinterpreted bitwise as u64.
  for (let i = 0; i < values.length; i++) out[i] = BigInt.asUintN(64, values[i]!);
  return out;
}

/**
 * The index of every slot's cached blocks.
 * @rank-numbers each call crosses into WASM with the worker id and rank as two integers, per KV event and per
 *   slot lookup; a pair object per call would be allocated only to be taken apart (and this is the
 *   documented library API: `applyStored(workerId, dpRank, ...)`).
 */
export class PrefixIndex {
  readonly #m: WasmModule;
  readonly #slotByKey = new Map<string, number>();
  readonly #slotInfo: (WorkerRank | undefined)[] = [];
  readonly #slotsByWorker = new Map<number, Set<number>>();
  readonly #freeSlots: number[] = [];
  #evictedEntries = 0;
  readonly #h: IndexHandle;
  /** The budget this index holds its bytes against: its own, or the one it shares (`shareMemoryBudget`). */
  #pool = new IndexMemoryPool();
  readonly #member: PoolMember = {
    bytes: () => this.#bytesIfLive(),
    evictTo: (target) => {
      const ix = this.#live();
      const entries = this.#guard('eviction', () => this.#m.exports.idxEvict(ix, target));
      this.#evictedEntries += entries;
      return entries;
    },
  };

  constructor() {
    this.#m = wasm();
    this.#h = new IndexHandle(this.#m, this, () => this.#slotInfo.length);
    this.#pool.join(this.#member);
  }

  /**
   * `listener` hears of every discard: the module failed an allocation (or trapped) in a call on this
   * index, so its WASM state was freed and it starts empty, its slots still registered. Mutators then
   * throw the `IndexMemoryError` (the event was not applied); matches and clears answer as the empty
   * index does. The owner rebuilds it (src/events: from the engines' replay buffers). Returns the unsubscribe.
   */
  onDiscard(listener: (err: IndexMemoryError) => void): () => void {
    return this.#h.onDiscard(listener);
  }

  /** Releases the WASM memory now instead of at garbage collection (and leaves a shared budget). Idempotent. */
  dispose(): void {
    this.#pool.leave(this.#member);
    this.#h.dispose();
  }

  /** Test hook: the next allocation in a call on this index fails as an exhausted memory does (then discards it). */
  failNextAllocation(): void {
    this.#h.failNextAllocation();
  }

  #live(): number {
    return this.#h.ptr();
  }

  #guard<T>(op: string, call: () => T): T {
    return this.#h.guard(op, call);
  }

  /**
   * Bounds the bytes the index holds (with every index sharing its budget, `shareMemoryBudget`): whenever an
   * applied event takes them past `bytes`, the least recently matched blocks are evicted (from every slot
   * holding them; memory-pool.ts says from which of the indexes) until they hold at most 90 % of it, and
   * `onEvict` hears of it. 0 removes the bound. Evicted blocks are no longer matched; the engines' later
   * `removed` events for them count as not found, and a `stored` event under one as `parent_not_found`, as for
   * any block the index does not hold.
   */
  setMemoryBudget(bytes: number, onEvict?: (report: EvictionReport) => void): void {
    if (!Number.isSafeInteger(bytes) || bytes < 0) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `index memory budget must be a byte count >= 0, got ${bytes}`);
    }
    this.#pool.setBudget(bytes, onEvict);
    this.#enforceBudget();
  }

  /**
   * Holds this index's bytes against `other`'s memory budget from now on, beside `other`'s and those of every
   * index already sharing it (a hybrid model's other KV-cache groups and the lower storage tiers beside the
   * router's index): the budget, set on any of them before or after, bounds them together, one report per
   * eviction. `dispose()` leaves it.
   */
  shareMemoryBudget(other: PrefixIndex): void {
    if (other.#pool === this.#pool) return;
    this.#pool.leave(this.#member);
    this.#pool = other.#pool;
    this.#pool.join(this.#member);
    this.#enforceBudget();
  }

  /** The memory budget in bytes this index holds its bytes against, its own or the one it shares (0: none). */
  get memoryBudget(): number {
    return this.#pool.budget;
  }

  /** Bytes this index and every index sharing its memory budget hold together (this one's alone if none does). */
  get pooledBytes(): number {
    return this.#pool.held();
  }

  /** (block, slot) entries evicted from this index under the memory budget since the index was made. */
  get evictedEntries(): number {
    return this.#evictedEntries;
  }

  #enforceBudget(): void {
    this.#pool.enforce(this.#member);
  }

  /** The index's bytes for its pool: 0 while a discarded index has no memory (the next use makes one). */
  #bytesIfLive(): number {
    try {
      return this.bytes;
    } catch (err) {
      if (err instanceof IndexMemoryError) return 0;
      throw err;
    }
  }

  /** The slot id of (workerId, dpRank), registering it on first use. */
  slotOf(workerId: number, dpRank = 0): number {
    const key = slotKey(workerId, dpRank);
    let slot = this.#slotByKey.get(key);
    if (slot === undefined) {
      if (
        !Number.isSafeInteger(workerId) ||
        workerId < 0 ||
        !Number.isInteger(dpRank) ||
        dpRank < 0 ||
        dpRank > 0xffff
      ) {
        throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `invalid worker slot (${workerId}, ${dpRank})`);
      }
      slot = this.#freeSlots.pop() ?? this.#slotInfo.length;
      const ix = this.#live();
      this.#guard('slot registration', () => this.#m.exports.idxEnsureSlot(ix, slot!));
      this.#slotByKey.set(key, slot);
      this.#slotInfo[slot] = { workerId, dpRank };
      let set = this.#slotsByWorker.get(workerId);
      if (set === undefined) this.#slotsByWorker.set(workerId, (set = new Set()));
      set.add(slot);
    }
    return slot;
  }

  /** The slot id of (workerId, dpRank) if registered. */
  findSlot(workerId: number, dpRank = 0): number | undefined {
    return this.#slotByKey.get(slotKey(workerId, dpRank));
  }

  /** The (worker, rank) behind a slot id. */
  slotWorker(slot: number): WorkerRank | undefined {
    return this.#slotInfo[slot];
  }

  /** Every registered slot. */
  slots(): WorkerRank[] {
    return this.#slotInfo.filter((s): s is WorkerRank => s !== undefined);
  }

  /**
   * Applies a `stored` event: `localHashes[i]` is the tokens hash of the block
   * the engine calls `engineHashes[i]`, consecutive under `parentHash` (null =
   * root). Atomic: throws KVG_ERR_PARENT_BLOCK_NOT_FOUND or
   * KVG_ERR_INVALID_BLOCK_SEQUENCE and changes nothing.
   */
  applyStored(
    workerId: number,
    dpRank: number,
    parentHash: bigint | null,
    engineHashes: BigUint64Array | readonly bigint[],
    localHashes: BigUint64Array | readonly bigint[],
  ): void {
    if (engineHashes.length !== localHashes.length) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `stored event has ${engineHashes.length} block hashes but ${localHashes.length} tokens hashes`,
      );
    }
    const slot = this.slotOf(workerId, dpRank);
    const ix = this.#live();
    const status = this.#guard('stored event', () =>
      this.#stored(ix, slot, parentHash, toU64Array(engineHashes), toU64Array(localHashes)),
    );
    if (status === STORE_PARENT_NOT_FOUND) {
      throw new KvgateError(
        'KVG_ERR_PARENT_BLOCK_NOT_FOUND',
        `worker ${workerId} rank ${dpRank}: parent block ${String(parentHash)} is not in the index`,
        { workerId, dpRank },
      );
    }
    if (status === STORE_INVALID_SEQUENCE) {
      throw new KvgateError(
        'KVG_ERR_INVALID_BLOCK_SEQUENCE',
        `worker ${workerId} rank ${dpRank}: stored event repeats a block hash`,
        { workerId, dpRank },
      );
    }
    this.#enforceBudget();
  }

  #stored(ix: number, slot: number, parentHash: bigint | null, eng: BigUint64Array, local: BigUint64Array): number {
    const n = eng.length;
    const io = this.#m.reserve(n * 16 + 8);
    const v = this.#m.views();
    const base = io >>> 3;
    v.u64.set(eng, base);
    v.u64.set(local, base + n);
    let parentPtr = 0;
    if (parentHash !== null) {
      parentPtr = io + n * 16;
      v.u64[base + 2 * n] = BigInt.asUintN(64, parentHash);
    }
    return this.#m.exports.idxStored(ix, slot, parentPtr, n, io, io + n * 8);
  }

  /**
   * Applies a run of slot `slot`'s events straight from a hand-over buffer (packed-run.ts): what the module
   * takes of them, stopping before one it leaves to the caller; `run` says how many, their outcomes and
   * where the next event starts. The same changes, statuses and budget as `applyStored` / `applyRemoved`
   * one event at a time; a trap discards the index (`IndexMemoryError`, the run's outcomes unread).
   */
  applyPacked(slot: number, src: PackedSource, run: PackedRun): void {
    const ix = this.#live();
    // The module sees this index alone: its bounds are the budget's less what the indexes sharing it hold.
    const pool = this.#pool;
    const others = pool.budget === 0 ? 0 : pool.othersHeld(this.#member);
    const budget = pool.budget === 0 ? 0 : Math.min(Math.max(1, pool.budget - others), 0xffffffff);
    const low = pool.inEpisode ? Math.max(0, Math.ceil(pool.budget * 0.75) - others) : 0;
    this.#guard('packed events', () => applyPackedRun(this.#m, ix, slot, src, budget, low, run));
    if (run.stop === PackedStop.budget) this.#enforceBudget();
  }

  /** Applies a `removed` event. Unknown hashes are skipped and counted in `missing`. Does not cascade. */
  applyRemoved(workerId: number, dpRank: number, engineHashes: BigUint64Array | readonly bigint[]): RemoveResult {
    const slot = this.findSlot(workerId, dpRank);
    const n = engineHashes.length;
    if (slot === undefined) return { removed: 0, missing: n };
    const ix = this.#live();
    const missing = this.#guard('removed event', () => {
      const io = this.#m.reserve(n * 8 + 8);
      this.#m.views().u64.set(toU64Array(engineHashes), io >>> 3);
      return this.#m.exports.idxRemoved(ix, slot, n, io);
    });
    return { removed: n - missing, missing };
  }

  /** Removes all blocks of one slot, keeping it registered. Returns blocks removed. */
  clearSlot(workerId: number, dpRank: number): number {
    const slot = this.findSlot(workerId, dpRank);
    return slot === undefined ? 0 : this.#clear(slot);
  }

  /** A `cleared` event: all blocks of every rank of `workerId`; ranks stay registered. */
  clearWorker(workerId: number): number {
    let removed = 0;
    for (const slot of this.#slotsByWorker.get(workerId) ?? []) removed += this.#clear(slot);
    return removed;
  }

  /** Clears a slot; a trap on the way discards the index, which clears it too (listeners hear of it, nothing throws). */
  #clear(slot: number): number {
    const ix = this.#live();
    const blocks = this.#m.exports.idxSlotBlocks(ix, slot);
    try {
      return this.#guard('slot clearing', () => this.#m.exports.idxClearSlot(ix, slot));
    } catch (err) {
      if (err instanceof IndexMemoryError) return blocks;
      throw err;
    }
  }

  /** Forgets one rank of a worker (its blocks and its slot). */
  removeWorkerDpRank(workerId: number, dpRank: number): void {
    const slot = this.findSlot(workerId, dpRank);
    if (slot === undefined) return;
    this.#clear(slot);
    this.#slotByKey.delete(slotKey(workerId, dpRank));
    this.#slotInfo[slot] = undefined;
    const set = this.#slotsByWorker.get(workerId)!;
    set.delete(slot);
    if (set.size === 0) this.#slotsByWorker.delete(workerId);
    this.#freeSlots.push(slot);
  }

  /** Forgets a worker and all its ranks. */
  removeWorker(workerId: number): void {
    for (const slot of [...(this.#slotsByWorker.get(workerId) ?? [])]) {
      this.removeWorkerDpRank(workerId, this.#slotInfo[slot]!.dpRank);
    }
  }

  /**
   * For every slot, the number of leading blocks of the request it holds.
   * `hashes` are local block hashes (or sequence hashes with `bySequence`,
   * which skips the chaining step when the caller already has them).
   * The returned arrays are fresh copies owned by the caller.
   */
  findMatches(hashes: BigUint64Array, bySequence = false): OverlapScores {
    const ix = this.#live();
    try {
      return this.#guard('matching', () => matchHashes(this.#m, ix, this.#slotInfo.length, hashes, bySequence));
    } catch (err) {
      // No trap reaches a request: the index was discarded, and an empty one matches nothing.
      if (err instanceof IndexMemoryError) return { count: 0, slots: new Uint32Array(0), depths: new Uint32Array(0) };
      throw err;
    }
  }

  /**
   * A routing decision's match stage in one module call (index-match.ts): the prompt's sequence hashes `seq`
   * matched here, into `dev[slot]`, and against the in-flight requests of `trie`, into `depth[slot]`, as
   * `findMatches(seq, true)` and `trie.depthsInto(seq, depth)` would write them. Only slots holding a prefix
   * are written: zero the candidates' entries first. A trap discards the index as any match does, and the
   * trie's depths are still written.
   * @throws KvgateError KVG_ERR_WASM when the trie's query region cannot grow (nothing written).
   */
  matchStage(trie: ActivePromptTrie, seq: BigUint64Array, dev: Float64Array, depth: Float64Array): void {
    const n = trie.hold(seq);
    const ix = this.#live();
    try {
      this.#guard('matching', () => matchStage(this.#m, ix, this.#slotInfo.length, trie, n, dev, depth));
    } catch (err) {
      if (!(err instanceof IndexMemoryError)) throw err;
      // The index was discarded and matches nothing now; the trie's answer is still owed.
      trie.depthsInto(seq, depth);
    }
  }

  /**
   * Every block a slot holds, as (engine hash, sequence hash) pairs interleaved in one array
   * (entry i at [2i, 2i+1]): what `importSlot` restores in another index. Batched in pages of
   * EXPORT_PAGE pairs (slot-pages.ts), so the I/O region stays small however large the slot.
   */
  exportSlot(workerId: number, dpRank: number): BigUint64Array {
    const slot = this.findSlot(workerId, dpRank);
    if (slot === undefined) return new BigUint64Array(0);
    const ix = this.#live();
    return this.#guard('slot export', () => exportSlotPages(this.#m, ix, slot, this.slotBlockCount(slot)));
  }

  /**
   * Adds a slot's blocks as another index's `exportSlot` gave them (a replica's snapshot):
   * afterwards `removed` and `stored` events of the slot's engine resolve against them.
   * Returns the blocks new to the slot.
   */
  importSlot(workerId: number, dpRank: number, pairs: BigUint64Array): number {
    if (pairs.length % 2 !== 0)
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'slot pairs must hold an even number of hashes');
    const slot = this.slotOf(workerId, dpRank);
    const ix = this.#live();
    const added = this.#guard('slot import', () => importSlotPages(this.#m, ix, slot, pairs));
    this.#enforceBudget();
    return added;
  }

  /**
   * Marks the blocks a slot holds: `held[i]` set to 1 for each of `engineHashes` it holds, the other bytes left as
   * they are (so the indexes of a slot's several storage tiers mark one array). Returns how many it holds; a slot
   * never registered, or an index a trap discarded, holds none.
   */
  markHeld(workerId: number, dpRank: number, engineHashes: BigUint64Array, held: Uint8Array): number {
    const slot = this.findSlot(workerId, dpRank);
    if (slot === undefined || engineHashes.length === 0) return 0;
    const ix = this.#live();
    try {
      return this.#guard('membership query', () => markHeldBlocks(this.#m, ix, slot, engineHashes, held));
    } catch (err) {
      if (err instanceof IndexMemoryError) return 0; // discarded: empty now, and rebuilt by its owner
      throw err;
    }
  }

  /** Blocks held by a slot (Dynamo's tree size). */
  blockCount(workerId: number, dpRank = 0): number {
    const slot = this.findSlot(workerId, dpRank);
    return slot === undefined ? 0 : this.slotBlockCount(slot);
  }

  /** Blocks held by a slot id. */
  slotBlockCount(slot: number): number {
    return this.#m.exports.idxSlotBlocks(this.#live(), slot);
  }

  /** Total (block, slot) entries. */
  get size(): number {
    return this.#m.exports.idxEntries(this.#live());
  }

  /** Distinct blocks (prefixes) held by at least one slot. */
  get distinctBlocks(): number {
    return this.#m.exports.idxDistinctBlocks(this.#live());
  }

  /** Bytes of WASM memory held by the index's tables. */
  get bytes(): number {
    return this.#m.exports.idxBytes(this.#live()) >>> 0; // u32 across the boundary
  }
}
