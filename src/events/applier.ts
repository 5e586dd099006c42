/**
 * Applies decoded KV events of one (worker, dp_rank) to the tiered prefix
 * index, keeping it equal to what the engine reports it caches.
 *
 * Stored blocks are identified by our own hashes, never the engine's: the
 * event's `token_ids` are split by its `block_size` and hashed with
 * `blockHashes` (Dynamo's XXH3 chain, LoRA name and cache salt mixed into the
 * seed, multimodal hashes appended), and the index chains them under the
 * parent. The engine's block hashes are only opaque per-slot ids that the
 * index maps to our hashes, so `removed` events and later parents resolve.
 *
 * Cache salt: SGLang reports it on every event (`cacheSalt`, hashed as is); vLLM only in block 0's `extra_keys`
 * of a root event (`extraKeyStrings`), so a later event of a salted chain inherits its parent block's salt
 * (`salts`, salt-memory.ts), kept while any index of the slot (a storage tier, a KV-cache group) holds the block
 * (removed-salts.ts). An ingestion thread infers the same from what it saw (batch-hasher.ts) and says
 * which salt its hashes of an event were computed with (`PackedEvent.localSalt`): they are used only where
 * `salts` infers the same, the event hashed here otherwise.
 *
 * Block size: an event whose `block_size` differs from the router's is
 * rejected (`block_size_mismatch`), never re-chunked. Splitting a larger
 * engine block into router blocks would index its leading sub-blocks on
 * their own, so a request sharing only part of an engine block would be
 * predicted to hit although the engine reuses whole blocks only. Merging
 * smaller engine blocks would be exact but needs partial-block state across
 * events; the engines can instead be run with the router's block size
 * (vLLM `--block-size`, SGLang `--page-size`), and Dynamo's publisher drops
 * non-matching blocks the same way.
 *
 * Other refusals, all counted, none mis-hashing: a LoRA id without a name
 * (the blocks are adapter-specific but we cannot reproduce the seed), and,
 * without `groups`, events of a KV-cache group other than the configured one.
 *
 * Hybrid models: given `groups` (`KvGroupIndexes`), events of every group are
 * kept, each group in its own index (the primary group in the router's), and
 * each stored event teaches the group's spec; the overlap rule reads them all.
 * A group's blocks in a lower tier are not indexed (`other_group`).
 */
import { blockSize, type BlockSize, type WorkerRank } from '../common/index.js';
import {
  allocationHookPending,
  blockHashes,
  PackedOutcome,
  takeAllocationHook,
  type PackedRun,
  type PackedSource,
} from '../wasm/index.js';
import { isKvgateError, type IndexMemoryError } from '../errors/index.js';
import type { KvGroupIndexes } from './group-indexes.js';
import { PackedEvent, type PackedBatch } from './packed-batch.js';
import { RemovedSalts } from './removed-salts.js';
import { HashSet } from './salt-entries.js';
import { SaltMemory, type SaltEvictionReport } from './salt-memory.js';
import { TieredPrefixIndex } from './tiered-index.js';
import type { KvCacheEvent, KvCacheEventType, KvEventBatch, StorageTier, StoredBlocksEvent } from './types.js';

/**
 * Outcome of one event:
 * - `ok`: applied in full.
 * - `truncated`: stored, but the engine sent more block hashes than its token_ids cover; the extra blocks were dropped.
 * - `not_found`: removed, but some hashes were not held for this slot (skipped, as Dynamo's BlockNotFound).
 * - `parent_not_found`: stored under a parent the slot does not hold; skipped whole.
 * - `invalid_sequence`: stored with a repeated block hash; skipped whole.
 * - `block_size_mismatch`: stored with a block size other than the router's; skipped.
 * - `unnamed_lora`: stored for a LoRA id without a lora_name; skipped.
 * - `other_group`: for a KV-cache group the router does not index (without `groups`, any but its own; with them,
 *   a group past the model's bound, `KvGroupIndexes.admits`); skipped.
 */
export type ApplyStatus =
  | 'ok'
  | 'truncated'
  | 'not_found'
  | 'parent_not_found'
  | 'invalid_sequence'
  | 'block_size_mismatch'
  | 'unnamed_lora'
  | 'other_group';

export const APPLY_STATUSES: readonly ApplyStatus[] = [
  'ok',
  'truncated',
  'not_found',
  'parent_not_found',
  'invalid_sequence',
  'block_size_mismatch',
  'unnamed_lora',
  'other_group',
];

/** The status and type of each `PackedOutcome` code (src/wasm/packed-run.ts). */
const PACKED_STATUS: ApplyStatus[] = [];
const PACKED_TYPE: KvCacheEventType[] = [];
for (const [code, type, status] of [
  [PackedOutcome.stored, 'stored', 'ok'],
  [PackedOutcome.parentNotFound, 'stored', 'parent_not_found'],
  [PackedOutcome.invalidSequence, 'stored', 'invalid_sequence'],
  [PackedOutcome.truncated, 'stored', 'truncated'],
  [PackedOutcome.blockSizeMismatch, 'stored', 'block_size_mismatch'],
  [PackedOutcome.removed, 'removed', 'ok'],
  [PackedOutcome.notFound, 'removed', 'not_found'],
] as const) {
  PACKED_STATUS[code] = status;
  PACKED_TYPE[code] = type;
}

/** The status of a packed run's outcome code. */
export function packedStatus(code: number): ApplyStatus {
  return PACKED_STATUS[code]!;
}

/** The event type of a packed run's outcome code. */
export function packedType(code: number): KvCacheEventType {
  return PACKED_TYPE[code]!;
}

/** A stored event's outcome under which its blocks were stored (and, salted, remembered). */
function isStoredOk(code: number): boolean {
  return code === PackedOutcome.stored || code === PackedOutcome.truncated;
}

/** Statuses under which the event changed the index as the engine meant. */
export function isAppliedStatus(status: ApplyStatus): boolean {
  return status === 'ok' || status === 'truncated' || status === 'not_found';
}

export interface KvEventApplierOptions {
  /** The router's KV block size in tokens (all workers of a model share it). */
  blockSize: number;
  /** Indexes to keep true; a fresh TieredPrefixIndex by default. */
  indexes?: TieredPrefixIndex;
  /** The KV-cache group of `indexes` (without `groups`, events of other groups are skipped). Default 0. */
  kvCacheGroup?: number;
  /** Every other KV-cache group of the model (hybrid attention); its `primaryGroup` must be `kvCacheGroup`. */
  groups?: KvGroupIndexes;
  /** The model hashes Eagle windows (its `eagle`): its engines' bigram events are read (see `decodeKvEventBatch`). */
  eagle?: boolean | undefined;
  /** Salted blocks remembered in all for the events that inherit their salt (salt-memory.ts). */
  saltMemoryCap?: number | undefined;
  /** Hears of each salted block evicted under `saltMemoryCap` (counted and logged by the caller). */
  onSaltEvicted?: ((report: SaltEvictionReport) => void) | undefined;
  /** Hears of each root event whose `extraKeyStrings` leave more than one salt candidate (hashed unsalted). */
  onSaltAmbiguous?: (() => void) | undefined;
}

export class KvEventApplier {
  readonly indexes: TieredPrefixIndex;
  readonly blockSize: BlockSize;
  readonly kvCacheGroup: number;
  readonly groups: KvGroupIndexes | undefined;
  readonly eagle: boolean;
  /** The salt of the salted blocks of each slot, for vLLM's events that do not carry it (salt-memory.ts). */
  readonly salts: SaltMemory;
  /** What a removal forgets of `salts`: only blocks no other index of the slot holds (removed-salts.ts). */
  readonly #removedSalts: RemovedSalts;
  readonly #onSaltAmbiguous: (() => void) | undefined;
  /**
   * What a salted run's events are read into (`#confirmedRun`, `#followRun`): one record, the blocks the run
   * stores salted (no `bigint` made per block), and per event the word where `salts` has to follow it (-1:
   * nothing to follow).
   */
  readonly #runEvent = new PackedEvent();
  readonly #runSalted = new HashSet();
  #runFollow = new Int32Array(64);

  /** @throws KvgateError KVG_ERR_INVALID_BLOCK_SIZE unless `blockSize` is an integer in [1, 2^20]. */
  constructor(opts: KvEventApplierOptions) {
    this.blockSize = blockSize(opts.blockSize);
    this.indexes = opts.indexes ?? new TieredPrefixIndex();
    this.kvCacheGroup = opts.kvCacheGroup ?? 0;
    this.groups = opts.groups;
    this.eagle = opts.eagle === true;
    this.salts = new SaltMemory(opts.saltMemoryCap, opts.onSaltEvicted);
    this.#removedSalts = new RemovedSalts(this.salts, this.indexes, this.groups, this.kvCacheGroup);
    this.#onSaltAmbiguous = opts.onSaltAmbiguous;
  }

  /**
   * Applies every decoded event of a batch in order; returns how many changed
   * the index as meant. `onStatus` sees each event's outcome (counters).
   */
  applyBatch(
    slot: WorkerRank,
    batch: KvEventBatch,
    onStatus?: (type: KvCacheEventType, status: ApplyStatus) => void,
  ): number {
    let applied = 0;
    for (const ev of batch.events) {
      const status = this.applyEvent(slot, ev);
      onStatus?.(ev.type, status);
      if (isAppliedStatus(status)) applied++;
    }
    return applied;
  }

  /**
   * Applies one event read in place from a handed-over buffer (packed-batch.ts), with the outcome
   * `applyEvent` gives for the same event as an object. A plain stored event of the router's group,
   * its own hashes computed by the thread, outside a hybrid model, is applied from the record; any
   * other stored event is built as an object first (the rare fields, groups and Eagle read it).
   */
  applyPacked(slot: WorkerRank, ev: PackedEvent): ApplyStatus {
    if (ev.type === 'removed') return this.#removed(slot, ev.tier, ev.groupIdx, ev.blockHashes);
    if (ev.type === 'cleared') {
      this.clearSlot(slot);
      return 'ok';
    }
    const n = ev.blockHashes.length;
    // A plain event inherits its parent's salt, if any (`SaltMemory.inferredSalt`): the thread's hashes serve when it
    // inferred the same (`localSalt`); otherwise the event is hashed here (#stored).
    const salt = !ev.plain || ev.parentHash === null ? undefined : this.salts.saltOf(slot, ev.parentHash);
    const plain =
      ev.plain &&
      ev.groupIdx === this.kvCacheGroup &&
      this.groups?.hybrid !== true &&
      (n === 0 || (ev.localHashes !== undefined && ev.localSalt === salt));
    if (!plain) {
      // As an object, with the thread's hashes beside it (#stored uses them where the salts agree).
      const obj = ev.event();
      return obj.type === 'stored' ? this.#stored(slot, obj, ev) : this.applyEvent(slot, obj);
    }
    if (ev.blockSize !== this.blockSize) return 'block_size_mismatch';
    const truncated = ev.droppedBlocks > 0;
    if (n === 0) return truncated ? 'truncated' : 'ok';
    const status = this.#storeInTier(slot, ev.tier, ev.parentHash, ev.blockHashes, ev.localHashes!);
    if (status === 'ok' && salt !== undefined) this.salts.remember(slot, ev.blockHashes, salt);
    return status === 'ok' && truncated ? 'truncated' : status;
  }

  /**
   * Applies what the module takes of a handed-over batch's next events (`batch`'s, from `src.from`) in one call
   * (src/wasm/packed-run.ts: device-tier removals and plain stores of the router's group) into `run`, the same
   * changes and outcomes as `applyPacked` one event at a time (`packedStatus`, `packedType` read them). False
   * when no run can be made here (a hybrid model, a slot the index has not seen, the allocation test hook
   * waiting, a next event whose salt is not confirmed): the caller applies the next event with `applyPacked`.
   *
   * Salts: the module knows none. Where the slot holds salted blocks or the thread hashed with a salt, the run
   * is cut before the first event whose salt `salts` does not confirm (`#confirmedRun`), and `salts` then
   * follows the events the module took (`#followRun`): the same salts, in the same order, as one at a time.
   */
  applyPackedRun(slot: WorkerRank, src: PackedSource, run: PackedRun, batch: PackedBatch): boolean {
    if (this.groups !== undefined && !this.groups.plain) return false;
    if (allocationHookPending()) return false;
    const device = this.indexes.device;
    const id = device.findSlot(slot.workerId, slot.dpRank);
    if (id === undefined) return false;
    if (!batch.salted && !this.salts.holds(slot)) {
      device.applyPacked(id, src, run);
      return true;
    }
    const n = this.#confirmedRun(slot, batch, src.from, src.maxEvents);
    if (n === 0) return false;
    device.applyPacked(id, n === src.maxEvents ? src : { ...src, maxEvents: n }, run);
    this.#followRun(slot, batch, run);
    return true;
  }

  /**
   * How many of the `max` events from word `w` a run may take as the module applies them: it stops before a
   * stored event whose inherited salt (its parent's, here) is not the one the thread hashed it with, before one
   * whose parent the run itself stores salted (`salts` learns it only after the run), and before one that could
   * take `salts` past its cap (an eviction would change what later events inherit). Removals never stop it: a
   * block removed in the run is no parent to a later event of it, which finds no parent whatever its salt.
   */
  #confirmedRun(slot: WorkerRank, batch: PackedBatch, w: number, max: number): number {
    const ev = this.#runEvent;
    const salted = this.#runSalted;
    salted.clear();
    if (this.#runFollow.length < max) this.#runFollow = new Int32Array(max);
    const follow = this.#runFollow;
    // Removals are followed once salted blocks may be held: before the run, or stored by it.
    let holds = this.salts.holds(slot);
    let grows = 0;
    for (let i = 0; i < max; i++) {
      if (w >= batch.end()) return i;
      const at = w;
      w = batch.skim(w, ev);
      follow[i] = -1;
      if (ev.type === 'cleared' || (ev.type === 'stored' && !ev.plain)) return i; // the module leaves it anyway
      if (ev.type === 'removed') {
        if (holds) follow[i] = at;
        continue;
      }
      if (ev.hashCount === 0) continue;
      const parent = ev.parentHash;
      if (parent !== null && salted.has(parent)) return i;
      const salt = parent === null ? undefined : this.salts.saltOf(slot, parent);
      if (salt !== ev.localSalt) return i;
      if (salt === undefined) continue;
      grows += ev.hashCount;
      if (this.salts.size + grows > this.salts.cap) return i;
      batch.read(at, ev);
      salted.addAll(ev.blockHashes);
      follow[i] = at;
      holds = true;
    }
    return max;
  }

  /** `salts` after a run: its removals forgotten, its salted stores remembered, in order (`#confirmedRun`'s words). */
  #followRun(slot: WorkerRank, batch: PackedBatch, run: PackedRun): void {
    const ev = this.#runEvent;
    const follow = this.#runFollow;
    for (let i = 0; i < run.events; i++) {
      if (follow[i]! < 0) continue;
      batch.read(follow[i]!, ev);
      if (ev.type === 'removed') this.#removedSalts.removed(slot, 'device', this.kvCacheGroup, ev.blockHashes);
      else if (isStoredOk(run.outcomes[i]!)) this.salts.remember(slot, ev.blockHashes, ev.localSalt!);
    }
  }

  /** Applies one event. Never throws for event content; throws KvgateError only for an invalid slot. */
  applyEvent(slot: WorkerRank, ev: KvCacheEvent): ApplyStatus {
    let status: ApplyStatus;
    switch (ev.type) {
      case 'stored':
        status = this.#stored(slot, ev);
        break;
      case 'removed':
        status = this.#removed(slot, ev.tier, ev.groupIdx, ev.blockHashes);
        break;
      case 'cleared':
        // Worker-wide for this publisher: every tier of this (worker, rank).
        this.clearSlot(slot);
        status = 'ok';
        break;
    }
    return status;
  }

  /**
   * `listener` hears of a discard of any index the applier writes (every tier, every KV-cache group): the
   * module failed an allocation, the index starts empty and must be rebuilt (the manager replays every slot).
   */
  onIndexDiscarded(listener: (err: IndexMemoryError) => void): void {
    this.indexes.onDiscard(listener);
    this.groups?.onDiscard(listener);
  }

  /** Drops every block of the slot in every tier (publisher restart, unrecoverable gap). */
  clearSlot(slot: WorkerRank): number {
    this.salts.clearSlot(slot);
    return this.indexes.clearSlot(slot.workerId, slot.dpRank) + (this.groups?.clearSlot(slot) ?? 0);
  }

  /** Forgets the slot in every tier (worker gone). */
  removeSlot(slot: WorkerRank): void {
    this.salts.clearSlot(slot);
    this.indexes.removeWorkerDpRank(slot.workerId, slot.dpRank);
    this.groups?.removeSlot(slot);
  }

  /**
   * `thread`: the record `ev` was built from (`applyPacked`), whose hashes (computed by the thread with
   * `localSalt`, left out of `ev` when salted) serve where the salt inferred here is the same.
   */
  #stored(slot: WorkerRank, ev: StoredBlocksEvent, thread?: PackedEvent): ApplyStatus {
    // vLLM's offloading placeholder (decode.ts): nothing to index, and no block size or group spec to judge.
    if (ev.blockSize === 0) return 'truncated';
    const groups = this.groups;
    const primary = ev.groupIdx === this.kvCacheGroup;
    if (!primary && groups === undefined) return 'other_group';
    if (ev.blockSize !== this.blockSize) return 'block_size_mismatch';
    if (ev.loraId !== undefined && ev.loraId > 0 && ev.loraName === undefined) return 'unnamed_lora';
    // A group past the model's bound gets no index (group-indexes.ts): counted and logged there.
    if (groups !== undefined && !groups.admits(ev.groupIdx)) return 'other_group';
    groups?.learnFrom(ev);
    const truncated = ev.droppedBlocks > 0;
    if (ev.blockHashes.length === 0) return truncated ? 'truncated' : 'ok';
    const salt = this.salts.inferredSalt(slot, ev, this.#onSaltAmbiguous);
    // An inferred salt is hashed here unless the thread hashed the event with the same one (`ev`'s own
    // hashes, if any, are unsalted: packed-batch.ts leaves salted ones out of the object).
    const local =
      salt === undefined
        ? (ev.localHashes ?? storedLocalHashes(ev, this.blockSize))
        : thread?.localHashes !== undefined && thread.localSalt === salt
          ? thread.localHashes
          : storedLocalHashes(ev, this.blockSize, salt);
    let status: ApplyStatus;
    if (groups !== undefined && (!primary || (ev.leadingNullBlocks ?? 0) > 0)) {
      if (ev.tier !== 'device') return 'other_group';
      status = groups.storePairs(slot, ev, local);
    } else {
      if ((ev.leadingNullBlocks ?? 0) > 0) return 'other_group';
      status = this.#storeInTier(slot, ev.tier, ev.parentHash, ev.blockHashes, local);
      if (status === 'ok' && ev.tier === 'device') groups?.notePrimaryStored(slot, ev, local);
    }
    if (status === 'ok' && salt !== undefined) this.salts.remember(slot, ev.blockHashes, salt);
    return status === 'ok' && truncated ? 'truncated' : status;
  }

  /** Stores blocks in the tier's index: `ok`, or the refusal the index answered. */
  #storeInTier(
    slot: WorkerRank,
    tier: StorageTier,
    parentHash: bigint | null,
    blockHashes: BigUint64Array,
    local: BigUint64Array,
  ): ApplyStatus {
    try {
      const ix = this.indexes.get(tier);
      ix.applyStored(slot.workerId, slot.dpRank, parentHash, blockHashes, local);
      // The test hook (src/wasm/README.md): off unless its environment variable is set.
      if (allocationHookPending() && takeAllocationHook(ix.size)) ix.failNextAllocation();
    } catch (err) {
      if (isKvgateError(err, 'KVG_ERR_PARENT_BLOCK_NOT_FOUND')) return 'parent_not_found';
      if (isKvgateError(err, 'KVG_ERR_INVALID_BLOCK_SEQUENCE')) return 'invalid_sequence';
      throw err;
    }
    return 'ok';
  }

  #removed(slot: WorkerRank, tier: StorageTier, groupIdx: number, blockHashes: BigUint64Array): ApplyStatus {
    const groups = this.groups;
    if (groups !== undefined && tier === 'device') {
      const missing = groups.removed(slot, groupIdx, blockHashes);
      if (groupIdx !== this.kvCacheGroup) {
        this.#removedSalts.removed(slot, tier, groupIdx, blockHashes);
        return missing === 0 ? 'ok' : 'not_found';
      }
    } else if (groupIdx !== this.kvCacheGroup) return 'other_group'; // no index changed: no salt forgotten
    this.#removedSalts.removed(slot, tier, groupIdx, blockHashes); // nothing to do unless salted blocks are held
    const ix = this.indexes.peek(tier);
    if (ix === undefined) return blockHashes.length === 0 ? 'ok' : 'not_found';
    return ix.applyRemoved(slot.workerId, slot.dpRank, blockHashes).missing === 0 ? 'ok' : 'not_found';
  }
}

/**
 * The tokens hashes of a stored event's blocks; an Eagle event's windows end with each block's next token.
 * `salt`: the salt the applier inferred for an event without `cacheSalt` (vLLM's; salt-memory.ts).
 */
export function storedLocalHashes(ev: StoredBlocksEvent, blockSize: number, salt?: string): BigUint64Array {
  const opts = { loraName: ev.loraName, cacheSalt: salt ?? ev.cacheSalt, mmHashes: ev.mmHashes };
  if (ev.eagleNextToken === undefined) return blockHashes(ev.tokenIds, blockSize, opts);
  const tokens = new Uint32Array(ev.tokenIds.length + 1);
  tokens.set(ev.tokenIds, 0);
  tokens[ev.tokenIds.length] = ev.eagleNextToken;
  return blockHashes(tokens, blockSize, { ...opts, eagle: true });
}
