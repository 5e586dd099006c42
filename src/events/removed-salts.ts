/**
 * Which salts a `removed` event forgets (salt-memory.ts): a block's salt is kept while any index of the slot still
 * holds the block.
 *
 * The memory is keyed by slot and engine hash, but a slot's block may be held by several of the applier's indexes:
 * an engine that offloads publishes the same hashes in several storage tiers (tiered-index.ts), a hybrid model in
 * several KV-cache groups (group-indexes.ts), each with removals of its own. A later stored event of any of them
 * may name the block as its parent and inherits its salt; forgetting it at the first removal (the GPU evicting a
 * block the host tier still holds) would hash that event unsalted, and salted requests would never match its blocks.
 *
 * So after a removal from one index, the removed blocks whose salt the slot holds are looked up in the slot's other
 * indexes (one module call each, `PrefixIndex.markHeld`), and only those none of them holds are forgotten. The
 * indexes are the truth of what each holds: no bookkeeping of its own, nothing more in a replica's snapshot.
 * Nothing is asked while the slot holds no salted block (one size check), nor where the index removed from is the
 * slot's only one. A block an index evicted under its memory budget is not held there: its salt goes with the last
 * removal the engine sends, as before.
 */
import type { WorkerRank } from '../common/index.js';
import type { PrefixIndex } from '../wasm/index.js';
import type { KvGroupIndexes } from './group-indexes.js';
import type { SaltMemory } from './salt-memory.js';
import type { TieredPrefixIndex } from './tiered-index.js';
import { STORAGE_TIERS, type StorageTier } from './types.js';

export class RemovedSalts {
  /** The removed blocks whose salt the slot holds, and a byte each: 1 once another index is found holding it. */
  #pending = new BigUint64Array(64);
  #held = new Uint8Array(64);

  constructor(
    private readonly salts: SaltMemory,
    private readonly indexes: TieredPrefixIndex,
    private readonly groups: KvGroupIndexes | undefined,
    /** The KV-cache group of `indexes` (the applier's `kvCacheGroup`); `groups` index the others, device tier only. */
    private readonly primaryGroup: number,
  ) {}

  /**
   * After the slot's index of (`tier`, `groupIdx`) applied a removal of `hashes`: forgets the salts of those no other
   * index of the slot holds. An index that does not exist removed nothing, and nothing is forgotten.
   */
  removed(slot: WorkerRank, tier: StorageTier, groupIdx: number, hashes: BigUint64Array): void {
    if (!this.salts.holds(slot)) return;
    const from = groupIdx === this.primaryGroup ? this.indexes.peek(tier) : this.#groupIndex(groupIdx);
    if (from === undefined) return;
    let n = -1; // the removed blocks whose salt is held, found at the first other index
    for (const t of STORAGE_TIERS) {
      const ix = this.indexes.peek(t);
      if (ix === undefined || ix === from) continue;
      n = this.#mark(slot, ix, hashes, n);
      if (n === 0) return;
    }
    const groups = this.groups?.others();
    if (groups !== undefined)
      for (const g of groups) {
        if (g.index === from) continue;
        n = this.#mark(slot, g.index, hashes, n);
        if (n === 0) return;
      }
    if (n < 0) this.salts.forget(slot, hashes);
    else this.salts.forget(slot, this.#pending.subarray(0, n), this.#held);
  }

  /**
   * Marks in `#held` the pending blocks `ix` holds for the slot; `n` is the pending count, or -1 before the first
   * index (the pending blocks are collected then). Returns the pending count.
   */
  #mark(slot: WorkerRank, ix: PrefixIndex, hashes: BigUint64Array, n: number): number {
    if (n < 0) {
      if (this.#pending.length < hashes.length) {
        const cap = Math.max(hashes.length, this.#pending.length * 2);
        this.#pending = new BigUint64Array(cap);
        this.#held = new Uint8Array(cap);
      }
      n = this.salts.saltedAmong(slot, hashes, this.#pending);
      if (n === 0) return 0;
      this.#held.fill(0, 0, n);
    }
    ix.markHeld(slot.workerId, slot.dpRank, this.#pending.subarray(0, n), this.#held);
    return n;
  }

  /** A KV-cache group's own index (one that is not the primary's). */
  #groupIndex(groupIdx: number): PrefixIndex | undefined {
    const groups = this.groups?.others();
    if (groups !== undefined) for (const g of groups) if (g.groupIdx === groupIdx) return g.index;
    return undefined;
  }
}
