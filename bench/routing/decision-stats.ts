/**
 * What the routing decision benches share: quantiles of a round's latencies and a checksum of every
 * decision (two builds that route identically print the same checksum for the same seeded workload).
 */

/** The `q` quantile of ascending `sorted` (nearest rank, below). */
export function quantile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

export function median(values: Float64Array): number {
  return quantile(values.slice().sort(), 0.5);
}

/** FNV-1a's offset basis: a checksum's start. */
export const FNV_OFFSET = 0x811c9dc5;

/** One FNV-1a step over the 32 low bits of `value`. */
function fnv1a(hash: number, value: number): number {
  let h = hash;
  for (let shift = 0; shift < 32; shift += 8) h = Math.imul(h ^ ((value >>> shift) & 0xff), 0x01000193) >>> 0;
  return h;
}

/** Folds one decision's (worker, dp rank, overlap) into a checksum. */
export function foldDecision(hash: number, d: { workerId: number; dpRank: number; overlapBlocks: number }): number {
  return fnv1a(fnv1a(fnv1a(hash, d.workerId), d.dpRank), d.overlapBlocks);
}
