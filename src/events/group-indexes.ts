/**
 * The KV-cache groups of one model (hybrid attention: vLLM's hybrid KV-cache
 * manager keeps one group per attention kind and tags every event with its
 * `group_idx`). The router's own index stays the primary group's; every other
 * group gets a `PrefixIndex` of its own here, and the router reads them all
 * through core's `KvCacheGroups` (the overlap rule is `core/kv-groups.ts`).
 *
 * Why a per-slot hash book: a sliding-window or Mamba group stores blocks
 * under a parent it may not hold itself (vLLM leaves the group's null blocks
 * out of `block_hashes` but names the block before the range as parent), so
 * its blocks cannot be chained by that group's index alone. vLLM hashes a
 * block the same in every group, so the book maps each engine hash a slot
 * holds in any group to our sequence hash, and a group's blocks enter its
 * index as (engine hash, sequence hash) pairs (`PrefixIndex.importSlot`).
 * The book exists only for hybrid models; on the first need for a slot it is
 * seeded from the primary index (`exportSlot`).
 *
 * Layout: a group's spec is what its events announce (`kv_cache_spec_kind`,
 * `kv_cache_spec_sliding_window`), what was declared on join, or what a peer
 * replica's snapshot says (warm start: `exportSlot` / `importSlot` carry each
 * group's spec and a slot's blocks in it, as the events at or before the
 * snapshot's cursor left them); a group that changes its spec is logged (the
 * latest spec wins). Single-group models never create an index or a book here.
 *
 * Bounded: each group index an engine names gets an index of its own, so a publisher naming ever new ones (a bug,
 * or a hostile one) would grow memory without bound. A model has at most `maxGroups` groups, its primary
 * included (`kv_events.max_kv_groups`, default 16: vLLM's hybrid manager splits layers of each kind into groups
 * of equal size, so a model with a few full-attention layers among many sliding-window or Mamba ones has one
 * group per share, such as 7 for Gemma 3's 5:1, 8 for Jamba's 1:7; 16 leaves room for 1:15). A group past the
 * bound gets no index: its events are refused (`admits`), counted (`onRefused`) and logged (throttled). Each
 * group's index shares the primary's memory budget (`PrefixIndex.shareMemoryBudget`), so an engine publishing
 * many blocks in one group cannot grow memory past `router_index_memory_budget_mib` either.
 *
 * The book keeps, per block, a bit per group that holds it, so that a group's removal drops the entry only once no
 * group holds the block. The bit is the group's ordinal in this model (the primary 0, the others 1, 2, ... in the
 * order they were first seen), not its index: the index is the engine's (vLLM's are 0..n-1, but nothing bounds
 * them), and a group without a bit would lose its blocks' entries to another group's removal, so that its next
 * blocks, stored under them, would be refused (`parent_not_found`). Ordinals stay below `maxGroups`, at most core's
 * `MAX_KV_GROUPS` (32, the mask's bits; ordinal 31's is the sign bit, which `&`, `|` and `=== 0` treat as any other).
 *
 * The book is not under the indexes' memory budget, and it loses a block only to the engine's removals, never to
 * kvgate's evictions; so it has a bound of its own (hash-book.ts: about the budget's bytes again, least recently
 * used forgotten first, counted in `onBookForgotten`). A group's later event under a forgotten block counts as
 * `parent_not_found`, as under any block the model does not know.
 *
 * @rank-numbers it forwards to `PrefixIndex`, which takes the worker id and rank as numbers (the WASM boundary).
 */
import {
  silentLogger,
  slotKey,
  systemClock,
  type Clock,
  type KvGroupSnapshot,
  type Logger,
  type WorkerRank,
} from '../common/index.js';
import {
  FULL_ATTENTION_GROUP,
  MAX_KV_GROUPS,
  kvGroupLabel,
  kvGroupSpecOf,
  type KvCacheGroups,
  type KvGroupSpec,
  type KvGroupView,
} from '../core/index.js';
import { KvgateError, type IndexMemoryError } from '../errors/index.js';
import { PrefixIndex, sequenceHashes } from '../wasm/index.js';
import { HashBook, type SlotBook } from './hash-book.js';
import { ThrottledLog } from './log.js';
import type { StoredBlocksEvent } from './types.js';

/** What storing into a group came to (the applier's statuses; `other_group`: a group past the bound). */
export type GroupStoreStatus = 'ok' | 'parent_not_found' | 'other_group';

/** KV-cache groups of one model at most by default, its primary included (see the header). */
export const DEFAULT_MAX_KV_GROUPS = 16;

/** At most one log line about refused groups per interval, ms (each refusal is counted). */
const REFUSAL_LOG_INTERVAL_MS = 10_000;

export interface KvGroupIndexesOptions {
  /** The router's own (device) index: the primary group's. */
  readonly primary: PrefixIndex;
  /** The group the primary index holds (default 0). */
  readonly primaryGroup?: number;
  readonly logger?: Logger;
  /** Told of every group whose spec is learned or changes (metrics, /admin). */
  readonly onSpec?: ((groupIdx: number, spec: KvGroupSpec) => void) | undefined;
  /**
   * Groups the model may have, its primary included (default `DEFAULT_MAX_KV_GROUPS`, at most `MAX_KV_GROUPS`);
   * past them a group gets no index.
   */
  readonly maxGroups?: number | undefined;
  /** Told of every event refused for a group past `maxGroups` (metrics). */
  readonly onRefused?: ((groupIdx: number) => void) | undefined;
  /** The clock of the refusals' log throttle (default the system's). */
  readonly clock?: Clock | undefined;
  /** Told of the entries each trim of the hash book forgot (hash-book.ts; metrics). */
  readonly onBookForgotten?: ((entries: number) => void) | undefined;
}

/** The book's bit of the primary group (ordinal 0). */
const PRIMARY_BIT = 1;

/**
 * (engine hash, sequence hash) pairs of an event's hashed blocks: the tokens hashes of the whole range chained
 * under the parent's sequence hash (vLLM's parent is the block before the range); undefined when the slot's
 * book does not know the parent.
 */
function pairsOf(
  books: HashBook,
  book: SlotBook,
  ev: StoredBlocksEvent,
  local: BigUint64Array,
): BigUint64Array | undefined {
  let chain = local;
  if (ev.parentHash !== null) {
    const parent = books.parentSeq(book, ev.parentHash);
    if (parent === undefined) return undefined;
    chain = new BigUint64Array(local.length + 1);
    chain[0] = parent;
    chain.set(local, 1);
  }
  const seqs = sequenceHashes(chain).subarray(ev.parentHash !== null ? 1 : 0);
  const n = ev.blockHashes.length;
  const pairs = new BigUint64Array(2 * n);
  for (let j = 0; j < n; j++) {
    pairs[2 * j] = ev.blockHashes[j]!;
    pairs[2 * j + 1] = seqs[(ev.leadingNullBlocks ?? 0) + j]!;
  }
  return pairs;
}

export class KvGroupIndexes implements KvCacheGroups {
  readonly primaryGroup: number;
  readonly #primary: PrefixIndex;
  readonly #logger: Logger;
  readonly #onSpec: KvGroupIndexesOptions['onSpec'];
  readonly #onRefused: KvGroupIndexesOptions['onRefused'];
  readonly #maxGroups: number;
  readonly #refusals: ThrottledLog;
  #primarySpec: KvGroupSpec = FULL_ATTENTION_GROUP;
  /** The groups but the primary; `bit` is the group's in the book (its ordinal's). */
  readonly #groups = new Map<number, { groupIdx: number; spec: KvGroupSpec; index: PrefixIndex; bit: number }>();
  #others: readonly KvGroupView[] = [];
  readonly #book: HashBook;
  readonly #learned = new Set<number>();
  readonly #onDiscard: ((err: IndexMemoryError) => void)[] = [];

  /** @throws KvgateError KVG_ERR_INVALID_ARGUMENT unless `maxGroups` is an integer in [1, MAX_KV_GROUPS]. */
  constructor(opts: KvGroupIndexesOptions) {
    const maxGroups = opts.maxGroups ?? DEFAULT_MAX_KV_GROUPS;
    if (!Number.isInteger(maxGroups) || maxGroups < 1 || maxGroups > MAX_KV_GROUPS)
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `maxGroups must be an integer in [1, ${MAX_KV_GROUPS}]`, {
        maxGroups,
      });
    this.#primary = opts.primary;
    this.primaryGroup = opts.primaryGroup ?? 0;
    this.#logger = opts.logger ?? silentLogger;
    this.#onSpec = opts.onSpec;
    this.#onRefused = opts.onRefused;
    this.#maxGroups = maxGroups;
    this.#refusals = new ThrottledLog(this.#logger, opts.clock ?? systemClock, REFUSAL_LOG_INTERVAL_MS);
    this.#book = new HashBook({
      budget: () => this.#primary.memoryBudget,
      logger: this.#logger,
      onForgotten: opts.onBookForgotten,
    });
  }

  primarySpec(): KvGroupSpec {
    return this.#primarySpec;
  }

  others(): readonly KvGroupView[] {
    return this.#others;
  }

  /** True once the model shows more than one group or a primary group that is not full attention. */
  get hybrid(): boolean {
    return this.#others.length > 0 || this.#primarySpec.kind !== 'full';
  }

  /** Entries of every slot's hash book together (bounded: hash-book.ts). */
  get bookEntries(): number {
    return this.#book.entries;
  }

  /** Not hybrid and no book kept: the primary group's events touch nothing here (a plain model). */
  get plain(): boolean {
    return !this.hybrid && this.#book.slots === 0;
  }

  /** Every group's spec by group index (the primary's included), for /admin and logs. */
  layout(): Map<number, KvGroupSpec> {
    const out = new Map<number, KvGroupSpec>([[this.primaryGroup, this.#primarySpec]]);
    for (const g of this.#groups.values()) out.set(g.groupIdx, g.spec);
    return new Map([...out].sort((a, b) => a[0] - b[0]));
  }

  /**
   * Whether a group's events are indexed: the primary, a group already known, or a new one while the model has
   * fewer than `maxGroups`. A new one past them is refused, counted and logged (each event of it: the groups
   * refused are not remembered, which would grow as they do).
   */
  admits(groupIdx: number): boolean {
    if (this.#hasRoom(groupIdx)) return true;
    this.#onRefused?.(groupIdx);
    this.#refusals.warn(
      'group_limit',
      { groupIdx, maxGroups: this.#maxGroups },
      `KV-cache group refused: the model already has ${this.#maxGroups} groups (kv_events.max_kv_groups); ` +
        'its events are not indexed',
    );
    return false;
  }

  #hasRoom(groupIdx: number): boolean {
    return groupIdx === this.primaryGroup || this.#groups.has(groupIdx) || this.#groups.size + 1 < this.#maxGroups;
  }

  /**
   * Records a group's spec (from an event, or declared); creates the group's index on first sight, unless the
   * model has `maxGroups` already (then nothing is recorded: `admits` says so, and counts it).
   */
  learn(groupIdx: number, spec: KvGroupSpec): void {
    if (!this.#hasRoom(groupIdx)) return;
    const primary = groupIdx === this.primaryGroup;
    const before = primary ? this.#primarySpec : this.#groups.get(groupIdx)?.spec;
    const known = this.#learned.has(groupIdx);
    const label = kvGroupLabel(spec);
    if (known && before !== undefined && kvGroupLabel(before) === label) return;
    this.#learned.add(groupIdx);
    // A plain model's one group says what was assumed: nothing to report.
    if (!known && primary && label === 'full') return;
    if (primary) this.#primarySpec = spec;
    else {
      const g = this.#groups.get(groupIdx);
      // The next ordinal: below maxGroups (hasRoom), so within the mask's 32 bits.
      if (g === undefined)
        this.#groups.set(groupIdx, { groupIdx, spec, index: this.#newIndex(), bit: 1 << (this.#groups.size + 1) });
      else g.spec = spec;
      this.#others = [...this.#groups.values()].sort((a, b) => a.groupIdx - b.groupIdx);
    }
    if (!known) this.#logger.info({ groupIdx, kind: label }, 'KV-cache group learned');
    else this.#logger.warn({ groupIdx, kind: label, was: kvGroupLabel(before!) }, 'KV-cache group changed its spec');
    this.#onSpec?.(groupIdx, spec);
  }

  /** Learns the spec an event announces (events without a kind leave the spec as it is). */
  learnFrom(ev: StoredBlocksEvent): void {
    if (ev.specKind === undefined && ev.groupIdx === this.primaryGroup) return;
    this.learn(ev.groupIdx, kvGroupSpecOf(ev.specKind, ev.slidingWindow));
  }

  /**
   * Stores a group's blocks by pairs: `local` are the tokens hashes of every block of the event's range (its
   * null blocks included), chained under the parent's sequence hash from the book.
   */
  storePairs(slot: WorkerRank, ev: StoredBlocksEvent, local: BigUint64Array): GroupStoreStatus {
    const group = this.#groupOf(ev.groupIdx);
    if (group === undefined) return 'other_group';
    const book = this.#slotBook(slot);
    const pairs = pairsOf(this.#book, book, ev, local);
    if (pairs === undefined) return 'parent_not_found';
    group.index.importSlot(slot.workerId, slot.dpRank, pairs);
    this.#book.note(book, pairs, group.bit);
    return 'ok';
  }

  /** After the primary index stored an event in a hybrid model: its blocks enter the book. */
  notePrimaryStored(slot: WorkerRank, ev: StoredBlocksEvent, local: BigUint64Array): void {
    if (!this.hybrid) return;
    const book = this.#slotBook(slot);
    const pairs = pairsOf(this.#book, book, ev, local);
    if (pairs !== undefined) this.#book.note(book, pairs, PRIMARY_BIT);
  }

  /** A group's removal (the primary's removal only updates the book). Returns the hashes the group did not hold. */
  removed(slot: WorkerRank, groupIdx: number, hashes: BigUint64Array): number {
    const g = this.#groups.get(groupIdx);
    // A group with no bit (never seen, or refused) holds nothing in the book.
    const b = groupIdx === this.primaryGroup ? PRIMARY_BIT : g?.bit;
    if (b !== undefined) this.#book.drop(slotKey(slot.workerId, slot.dpRank), hashes, b);
    if (groupIdx === this.primaryGroup) return 0;
    if (g === undefined) return hashes.length;
    return g.index.applyRemoved(slot.workerId, slot.dpRank, hashes).missing;
  }

  /** Drops the slot's blocks in every group but the primary (whose owner clears it), and its book. */
  clearSlot(slot: WorkerRank): number {
    this.#book.delete(slotKey(slot.workerId, slot.dpRank));
    let removed = 0;
    for (const g of this.#groups.values()) removed += g.index.clearSlot(slot.workerId, slot.dpRank);
    return removed;
  }

  /** Forgets the slot in every group but the primary. */
  removeSlot(slot: WorkerRank): void {
    this.#book.delete(slotKey(slot.workerId, slot.dpRank));
    for (const g of this.#groups.values()) g.index.removeWorkerDpRank(slot.workerId, slot.dpRank);
  }

  /**
   * The slot's part of a replica snapshot: for a hybrid model, every group's spec (the primary's first, without
   * blocks: they are the slot's tiers') with the slot's blocks in each other group; nothing for a one-group model.
   */
  exportSlot(slot: WorkerRank): KvGroupSnapshot[] {
    if (!this.hybrid) return [];
    const entry = (groupIdx: number, spec: KvGroupSpec, pairs: BigUint64Array): KvGroupSnapshot => ({
      groupIdx,
      kind: spec.wireKind,
      ...(spec.slidingWindow === undefined ? {} : { slidingWindow: spec.slidingWindow }),
      pairs,
    });
    return [
      entry(this.primaryGroup, this.#primarySpec, new BigUint64Array(0)),
      ...this.#others.map((g) => entry(g.groupIdx, g.spec, g.index.exportSlot(slot.workerId, slot.dpRank))),
    ];
  }

  /**
   * Seeds a slot from a peer replica's snapshot (`exportSlot`'s), once the primary index holds the slot's blocks:
   * each group's spec is learned, and each other group's blocks enter its index and the slot's book under the
   * group's bit, so that the group's later events chain under them and its removals resolve. A group past
   * `maxGroups` is refused as its events would be. Returns the blocks new to the other groups.
   */
  importSlot(slot: WorkerRank, groups: readonly KvGroupSnapshot[]): number {
    let added = 0;
    for (const g of groups) {
      if (!this.admits(g.groupIdx)) continue;
      this.learn(g.groupIdx, kvGroupSpecOf(g.kind, g.slidingWindow));
      const group = this.#groups.get(g.groupIdx);
      if (group === undefined || g.pairs.length === 0) continue;
      added += group.index.importSlot(slot.workerId, slot.dpRank, g.pairs);
      this.#book.note(this.#slotBook(slot), g.pairs, group.bit);
    }
    return added;
  }

  /** Blocks the slot holds in a group. */
  blockCount(slot: WorkerRank, groupIdx: number): number {
    if (groupIdx === this.primaryGroup) return this.#primary.blockCount(slot.workerId, slot.dpRank);
    return this.#groups.get(groupIdx)?.index.blockCount(slot.workerId, slot.dpRank) ?? 0;
  }

  /** `listener` hears of a discard of any group's index (not the primary's), those created later included. */
  onDiscard(listener: (err: IndexMemoryError) => void): void {
    this.#onDiscard.push(listener);
    for (const g of this.#groups.values()) g.index.onDiscard(listener);
  }

  /** A group's index, under the primary's memory budget (`router_index_memory_budget_mib` bounds the model's whole index). */
  #newIndex(): PrefixIndex {
    const index = new PrefixIndex();
    index.shareMemoryBudget(this.#primary);
    for (const l of this.#onDiscard) index.onDiscard(l);
    return index;
  }

  /** Releases the WASM memory of every group's index (not the primary's). */
  dispose(): void {
    for (const g of this.#groups.values()) g.index.dispose();
    this.#groups.clear();
    this.#others = [];
    this.#book.clear();
  }

  /** The group's index and bit (created as full attention on first sight), or undefined past `maxGroups`. */
  #groupOf(groupIdx: number): { index: PrefixIndex; bit: number } | undefined {
    if (groupIdx === this.primaryGroup) return { index: this.#primary, bit: PRIMARY_BIT };
    if (!this.#groups.has(groupIdx)) this.learn(groupIdx, FULL_ATTENTION_GROUP);
    return this.#groups.get(groupIdx);
  }

  /** The slot's book, seeded from the primary index the first time (blocks stored before the model showed groups). */
  #slotBook(slot: WorkerRank): SlotBook {
    return this.#book.open(
      slotKey(slot.workerId, slot.dpRank),
      () => this.#primary.exportSlot(slot.workerId, slot.dpRank),
      PRIMARY_BIT,
    );
  }
}
