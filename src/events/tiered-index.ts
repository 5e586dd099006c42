/**
 * One `PrefixIndex` per storage tier. The device tier is what prefix-cache
 * hits are made of; host-pinned, disk and external tiers (vLLM's offloading
 * connector, SGLang's hierarchical cache) are kept apart so the scheduler can
 * weight a block by how far it is from the GPU. Non-device tiers are created
 * on first use, sharing the device index's memory budget
 * (`router_index_memory_budget_mib` bounds the tiers together).
 */
import type { IndexMemoryError } from '../errors/index.js';
import { PrefixIndex } from '../wasm/index.js';
import { STORAGE_TIERS, type StorageTier } from './types.js';

/**
 * The tiers of one prefix index.
 * @rank-numbers it forwards to `PrefixIndex`, which takes the worker id and rank as numbers (the WASM boundary).
 */
export class TieredPrefixIndex {
  readonly #tiers = new Map<StorageTier, PrefixIndex>();
  readonly #onDiscard: ((err: IndexMemoryError) => void)[] = [];

  /** `device` lets the router share an index it already owns. */
  constructor(device?: PrefixIndex) {
    this.#tiers.set('device', device ?? new PrefixIndex());
  }

  /** `listener` hears of a discard of any tier's index, those created later included (see `PrefixIndex.onDiscard`). */
  onDiscard(listener: (err: IndexMemoryError) => void): void {
    this.#onDiscard.push(listener);
    for (const ix of this.#tiers.values()) ix.onDiscard(listener);
  }

  get device(): PrefixIndex {
    return this.#tiers.get('device')!;
  }

  /** The tier's index, created on first use, under the device index's memory budget (it bounds every tier's). */
  get(tier: StorageTier): PrefixIndex {
    let ix = this.#tiers.get(tier);
    if (ix === undefined) {
      this.#tiers.set(tier, (ix = new PrefixIndex()));
      ix.shareMemoryBudget(this.device);
      for (const l of this.#onDiscard) ix.onDiscard(l);
    }
    return ix;
  }

  /** The tier's index if anything was ever stored in it. */
  peek(tier: StorageTier): PrefixIndex | undefined {
    return this.#tiers.get(tier);
  }

  /** Tiers that have an index, in STORAGE_TIERS order. */
  tiers(): StorageTier[] {
    return STORAGE_TIERS.filter((t) => this.#tiers.has(t));
  }

  /** Drops every block of one (worker, rank) in every tier; returns blocks removed. */
  clearSlot(workerId: number, dpRank: number): number {
    let removed = 0;
    for (const ix of this.#tiers.values()) removed += ix.clearSlot(workerId, dpRank);
    return removed;
  }

  /** Forgets one (worker, rank) in every tier (blocks and slot). */
  removeWorkerDpRank(workerId: number, dpRank: number): void {
    for (const ix of this.#tiers.values()) ix.removeWorkerDpRank(workerId, dpRank);
  }

  /** Blocks one (worker, rank) holds in a tier. */
  blockCount(workerId: number, dpRank: number, tier: StorageTier = 'device'): number {
    return this.#tiers.get(tier)?.blockCount(workerId, dpRank) ?? 0;
  }

  /** Releases WASM memory of every tier (including a device index passed in). */
  dispose(): void {
    for (const ix of this.#tiers.values()) ix.dispose();
  }
}
