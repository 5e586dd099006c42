/**
 * Picking a candidate from its costs, separate from scoring.
 *
 * - Temperature 0: argmin; exact ties are broken uniformly at random
 *   (reservoir sampling: the k-th tie replaces the pick with probability 1/k),
 *   as Dynamo v1.5 does.
 * - Temperature T > 0: softmax over negated, range-normalised costs,
 *   `p_i ∝ exp(−(c_i / (c_max − c_min)) / T)`, computed stably (the largest
 *   logit is subtracted); all costs equal => uniform. One uniform draw `u`
 *   walks the cumulative sum.
 */
import type { Rng } from '../common/index.js';

/**
 * The argmin rule one candidate at a time, so a scoring loop can pick as it scores: `offer` the costs in
 * candidate order, from index 0; `index` is then the lowest, exact ties uniform at random (the k-th tie
 * replaces it when `rng() * k < 1`, so the RNG is drawn once per tie, in candidate order).
 */
export class LowestCost {
  index = 0;
  cost = Number.NaN;
  ties = 0;

  offer(i: number, c: number, rng: Rng): void {
    if (i === 0 || c < this.cost) {
      this.index = i;
      this.cost = c;
      this.ties = 1;
    } else if (c === this.cost) {
      this.ties++;
      if (rng() * this.ties < 1) this.index = i;
    }
  }
}

/** Index in [0, n) of the lowest cost, exact ties uniform at random. `n` must be > 0. */
export function pickLowest(costs: Float64Array, n: number, rng: Rng): number {
  const lowest = new LowestCost();
  for (let i = 0; i < n; i++) lowest.offer(i, costs[i]!, rng);
  return lowest.index;
}

/**
 * Writes the softmax selection probabilities of the first `n` costs into
 * `out[0..n)` (temperature > 0).
 */
export function softmaxProbabilities(costs: Float64Array, n: number, temperature: number, out: Float64Array): void {
  let min = Infinity;
  let max = -Infinity;
  for (let i = 0; i < n; i++) {
    const c = costs[i]!;
    if (c < min) min = c;
    if (c > max) max = c;
  }
  const range = max - min;
  if (!(range > 0) || !Number.isFinite(range)) {
    for (let i = 0; i < n; i++) out[i] = 1 / n;
    return;
  }
  // logit_i = −(c_i / range) / T, shifted by the largest (the smallest cost's): exp(−((c_i − min) / range) / T).
  // Shifting before dividing keeps a tiny T finite: the lowest cost's term is exp(0) = 1, never exp(−∞ + ∞) = NaN.
  let sum = 0;
  for (let i = 0; i < n; i++) {
    const e = Math.exp(-((costs[i]! - min) / range) / temperature);
    out[i] = e;
    sum += e;
  }
  for (let i = 0; i < n; i++) out[i]! /= sum;
}

/** Samples an index from softmax probabilities already in `probs[0..n)`. */
export function sampleIndex(probs: Float64Array, n: number, rng: Rng): number {
  const u = rng();
  let acc = 0;
  for (let i = 0; i < n; i++) {
    acc += probs[i]!;
    if (u < acc) return i;
  }
  // Rounding left the cumulative sum just under 1: the last candidate with any mass.
  for (let i = n - 1; i > 0; i--) if (probs[i]! > 0) return i;
  return 0;
}
