/**
 * Overlap: fills the scratch per-slot buffers for the current candidates from
 * the indexes. Device overlap (`dev`) comes from the primary index (the events
 * index, or approximate mode's), raised to the predict-on-route index and, for
 * a worker whose events are not live, to its fallback index; `depth` is the
 * prompt depth already active on each slot (for new blocks); with tier indexes,
 * `host` / `disk` hold the blocks found only in that tier and `sharedDepth` the
 * shared cache's deepest match. A worker registered with `kvOverlap: false` gets
 * no overlap at all (its engine caches blocks the router cannot name).
 */
import type { PrefixIndex } from '../../wasm/index.js';
import type { ActiveSequences } from '../active-sequences.js';
import type { ApproximateIndex } from '../approximate.js';
import { isHybrid, type KvCacheGroups } from '../kv-groups.js';
import { clampToGroups } from './group-overlap.js';
import type { SlotTable } from './slots.js';
import type { SchedulingRequest, TierIndexes } from './types.js';

/** The indexes overlap is read from. */
export interface OverlapSources {
  readonly index: PrefixIndex;
  readonly predicted: ApproximateIndex | null;
  readonly fallback: ApproximateIndex | null;
  /** True while a worker's KV events are not live (only consulted when `fallback` is set). */
  readonly eventFallback: ((workerId: number) => boolean) | undefined;
  readonly tiers: TierIndexes;
  /** A hybrid model's KV-cache groups: the device overlap is what every group can serve (`kv-groups.ts`). */
  readonly groups?: KvCacheGroups | undefined;
}

export class OverlapMatcher {
  readonly #table: SlotTable;
  readonly #active: ActiveSequences;
  readonly #src: OverlapSources;
  readonly #blockSize: number;
  readonly #tiered: boolean;

  constructor(table: SlotTable, active: ActiveSequences, sources: OverlapSources, blockSize: number) {
    this.#table = table;
    this.#active = active;
    this.#src = sources;
    this.#blockSize = blockSize;
    const t = sources.tiers;
    this.#tiered = t.hostPinned !== undefined || t.disk !== undefined || t.shared !== undefined;
  }

  /**
   * Writes, for the slots `scratch.eligible[0..n)`, the effective device overlap
   * (`dev`), tier overlaps beyond it (`host`, `disk`) and the depth of the prompt
   * already active there (`depth`). Other slots' entries are stale. Returns true
   * when tier overlaps were written (tier indexes are configured and the request has hashes).
   */
  match(req: SchedulingRequest, n: number): boolean {
    const scratch = this.#table.scratch;
    const elig = scratch.eligible;
    const dev = scratch.dev;
    const depth = scratch.depth;
    if (n * 4 >= this.#table.cap) {
      // Most slots are candidates (no pin, no allowed-worker list): two memsets beat a scatter.
      dev.fill(0);
      depth.fill(0);
    } else {
      for (let i = 0; i < n; i++) {
        const s = elig[i]!;
        dev[s] = 0;
        depth[s] = 0;
      }
    }
    const seq = req.hashes?.seq;
    if (seq === undefined || seq.length === 0) return false;
    // The events index and the in-flight prompts in one module call; the other indexes raise `dev` after.
    this.#active.matchInto(this.#src.index, seq, dev, depth);
    if (isHybrid(this.#src.groups))
      clampToGroups(this.#src.groups, this.#src.index, this.#table, seq, n, this.#blockSize);
    this.#raiseToPredicted(seq, dev);
    this.#raiseToFallback(seq, dev);
    if (this.#tiered) this.#matchTiers(seq, n);
    this.#distrust(n);
    return this.#tiered;
  }

  /** Slots whose cache view is not trusted (`kvOverlap: false`) are scored as holding nothing, in every tier. */
  #distrust(n: number): void {
    const t = this.#table;
    if (t.overlapOffCount === 0) return;
    const { eligible, dev, host, disk } = t.scratch;
    for (let i = 0; i < n; i++) {
      const s = eligible[i]!;
      if (t.overlapOff[s] !== 1) continue;
      dev[s] = 0;
      if (this.#tiered) {
        host[s] = 0;
        disk[s] = 0;
      }
    }
  }

  /** Cached tokens the request would find on its best eligible slot (pinned rank: that rank). */
  bestCachedTokens(req: SchedulingRequest, n: number): number {
    this.match(req, n);
    const scratch = this.#table.scratch;
    let best = 0;
    for (let i = 0; i < n; i++) best = Math.max(best, scratch.dev[scratch.eligible[i]!]!);
    return Math.min(req.isl, best * this.#blockSize);
  }

  #raiseToPredicted(seq: BigUint64Array, dev: Float64Array): void {
    const predicted = this.#src.predicted;
    if (predicted === null || predicted.size === 0) return;
    const p = predicted.index.findMatches(seq, true);
    const map = this.#table.predToSlot;
    for (let i = 0; i < p.count; i++) {
      const s = map[p.slots[i]!] ?? -1;
      if (s >= 0 && p.depths[i]! > dev[s]!) dev[s] = p.depths[i]!;
    }
  }

  /** Only while the worker's events are still not live: once they are, the events index is the truth. */
  #raiseToFallback(seq: BigUint64Array, dev: Float64Array): void {
    const fallback = this.#src.fallback;
    if (fallback === null || fallback.size === 0) return;
    const f = fallback.index.findMatches(seq, true);
    for (let i = 0; i < f.count; i++) {
      const w = fallback.index.slotWorker(f.slots[i]!);
      if (w === undefined || !this.#src.eventFallback!(w.workerId)) continue;
      const s = this.#table.slotOf(w);
      if (s !== undefined && f.depths[i]! > dev[s]!) dev[s] = f.depths[i]!;
    }
  }

  /** Host and disk overlap beyond faster tiers, and shared-cache depth (slow path: only with tier indexes). */
  #matchTiers(seq: BigUint64Array, n: number): void {
    const scratch = this.#table.scratch;
    const elig = scratch.eligible;
    const host = scratch.host;
    const disk = scratch.disk;
    for (let i = 0; i < n; i++) {
      host[elig[i]!] = 0;
      disk[elig[i]!] = 0;
    }
    const scatter = (index: PrefixIndex, out: Float64Array): void => {
      const m = index.findMatches(seq, true);
      for (let i = 0; i < m.count; i++) {
        const w = index.slotWorker(m.slots[i]!);
        const s = w === undefined ? undefined : this.#table.slotOf(w);
        if (s !== undefined) out[s] = m.depths[i]!;
      }
    };
    const tiers = this.#src.tiers;
    if (tiers.hostPinned !== undefined) scatter(tiers.hostPinned, host);
    if (tiers.disk !== undefined) scatter(tiers.disk, disk);
    let sharedDepth = 0;
    if (tiers.shared !== undefined) {
      const m = tiers.shared.findMatches(seq, true);
      for (let i = 0; i < m.count; i++) sharedDepth = Math.max(sharedDepth, m.depths[i]!);
    }
    // Depths become blocks found only in that tier: host beyond device, disk beyond both.
    scratch.sharedDepth = sharedDepth;
    const dev = scratch.dev;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      const d = dev[s]!;
      const h = host[s]!;
      host[s] = h > d ? h - d : 0;
      const top = h > d ? h : d;
      disk[s] = disk[s]! > top ? disk[s]! - top : 0;
    }
  }
}
