import { describe, expect, it } from 'vitest';
import { candidateCost, costV11, type CostKnobs } from '../../src/core/cost.js';
import { resolveKvRouterConfig } from '../../src/core/config.js';
import { routerPresetOptions } from '../../src/core/router-presets.js';
import { pickLowest, sampleIndex, softmaxProbabilities } from '../../src/core/selection.js';
import { seededRng } from '../../src/common/index.js';

/** Dynamo v1.5's defaults: kvgate's `dynamo` preset over its own defaults. */
const DYNAMO = resolveKvRouterConfig(routerPresetOptions('dynamo'));
const DEFAULT_KNOBS: CostKnobs = {
  overlapScoreCredit: DYNAMO.overlapScoreCredit,
  overlapScoreCreditDecay: DYNAMO.overlapScoreCreditDecay,
  prefillLoadScale: DYNAMO.prefillLoadScale,
  decodeActiveRequestWeight: DYNAMO.decodeActiveRequestWeight,
  hostCacheHitWeight: DYNAMO.hostCacheHitWeight,
  diskCacheHitWeight: DYNAMO.diskCacheHitWeight,
  sharedCacheMultiplier: DYNAMO.sharedCacheMultiplier,
  trackPrefillTokens: true,
  decodeException: false,
};

describe('cost model (spec 4.2)', () => {
  it('the documented example: costs 18, 10, 11 and W2 is chosen', () => {
    // raw prefill blocks 10 = (0 active + 10 isl) / block size 1; credit 1.
    const req = { isl: 10, blockSize: 1, minActivePrefillTokens: 0 };
    const w = [
      { activePrefillTokens: 0, deviceOverlapBlocks: 2, potentialDecodeBlocks: 10, activeRequests: 0 },
      { activePrefillTokens: 0, deviceOverlapBlocks: 5, potentialDecodeBlocks: 5, activeRequests: 0 },
      { activePrefillTokens: 0, deviceOverlapBlocks: 8, potentialDecodeBlocks: 9, activeRequests: 0 },
    ];
    const costs = Float64Array.from(w.map((c) => candidateCost(DEFAULT_KNOBS, req, c)));
    expect([...costs]).toEqual([18, 10, 11]);
    expect(pickLowest(costs, 3, seededRng(1))).toBe(1);
  });

  it('[v1.1] and [v1.5] agree under defaults on 10,000 random candidate sets', () => {
    const rng = seededRng(42);
    const int = (n: number): number => Math.floor(rng() * n);
    let worst = 0;
    let agreedPicks = 0;
    for (let set = 0; set < 10_000; set++) {
      const blockSize = [1, 4, 16, 64][int(4)]!;
      const isl = 1 + int(20_000);
      const trackPrefill = rng() < 0.8;
      const n = 1 + int(16);
      const v11 = new Float64Array(n);
      const v15 = new Float64Array(n);
      const actives: number[] = [];
      // With prefill tracking off (globally) no request ever books prefill load.
      for (let i = 0; i < n; i++) actives.push(trackPrefill ? int(50_000) : 0);
      const minActive = Math.min(...actives);
      for (let i = 0; i < n; i++) {
        const overlap = int(Math.floor(isl / blockSize) + 1);
        const decode = int(5_000);
        const active = actives[i]!;
        v11[i] = costV11(1.0, isl, blockSize, trackPrefill, active, overlap, decode);
        v15[i] = candidateCost(
          { ...DEFAULT_KNOBS, trackPrefillTokens: trackPrefill },
          { isl, blockSize, minActivePrefillTokens: minActive },
          {
            activePrefillTokens: active,
            deviceOverlapBlocks: overlap,
            potentialDecodeBlocks: decode,
            activeRequests: int(50),
          },
        );
        worst = Math.max(worst, Math.abs(v15[i]! - v11[i]!) / Math.max(1, v11[i]!));
      }
      // Same argmin (ties aside: compare the minimum cost of each formula's pick).
      const a = pickLowest(v11, n, seededRng(set));
      const b = pickLowest(v15, n, seededRng(set));
      if (Math.abs(v11[b]! - v11[a]!) <= 1e-9 * Math.max(1, v11[a]!)) agreedPicks++;
    }
    expect(worst).toBeLessThan(1e-12);
    expect(agreedPicks).toBe(10_000);
  });

  it('knobs: prefill scale, request weight, credit decay, tier credits and the decode exception', () => {
    const req = { isl: 100, blockSize: 10, minActivePrefillTokens: 0 };
    const c = { activePrefillTokens: 100, deviceOverlapBlocks: 4, potentialDecodeBlocks: 7, activeRequests: 3 };
    // raw = (100 + 100) / 10 = 20; credit 4 => 16 + 7.
    expect(candidateCost(DEFAULT_KNOBS, req, c)).toBe(23);
    expect(candidateCost({ ...DEFAULT_KNOBS, prefillLoadScale: 2 }, req, c)).toBe(39);
    expect(candidateCost({ ...DEFAULT_KNOBS, decodeActiveRequestWeight: 10 }, req, c)).toBe(53);
    // excess = ((100 - 0) / 10) / 10 = 1; decay = 1 / (1 + 1 × 1) = 0.5 => credit 2 => 18 + 7.
    expect(candidateCost({ ...DEFAULT_KNOBS, overlapScoreCreditDecay: 1 }, req, c)).toBe(25);
    // host 4 blocks × 0.75 + disk 2 × 0.25 = 3.5 extra credit.
    expect(candidateCost(DEFAULT_KNOBS, req, { ...c, hostOverlapBlocks: 4, diskOverlapBlocks: 2 })).toBe(19.5);
    expect(
      candidateCost({ ...DEFAULT_KNOBS, sharedCacheMultiplier: 0.5 }, req, { ...c, sharedBeyondDeviceBlocks: 4 }),
    ).toBe(21);
    // Decode exception: max(0, 7 - 4) + 0.
    expect(candidateCost({ ...DEFAULT_KNOBS, trackPrefillTokens: false, decodeException: true }, req, c)).toBe(3);
    // Not tracking prefill: the prefill term vanishes.
    expect(candidateCost({ ...DEFAULT_KNOBS, trackPrefillTokens: false }, req, c)).toBe(7);
    // The prefill term never goes negative.
    expect(candidateCost(DEFAULT_KNOBS, req, { ...c, deviceOverlapBlocks: 50 })).toBe(7);
  });
});

describe('selection (spec 4.3)', () => {
  it('with temperature > 0, 100,000 seeded draws match the softmax probabilities within 1 %', () => {
    const costs = Float64Array.from([10, 12, 15, 11, 30]);
    const n = costs.length;
    for (const t of [0.1, 0.5, 2]) {
      const probs = new Float64Array(n);
      softmaxProbabilities(costs, n, t, probs);
      // Reference: p_i ∝ exp(-(c_i / (max - min)) / T).
      const range = 30 - 10;
      const ref = [...costs].map((c) => Math.exp(-(c / range) / t));
      const sum = ref.reduce((a, b) => a + b, 0);
      ref.forEach((r, i) => expect(probs[i]).toBeCloseTo(r / sum, 12));
      const rng = seededRng(7);
      const counts = new Array<number>(n).fill(0);
      const draws = 100_000;
      for (let k = 0; k < draws; k++) counts[sampleIndex(probs, n, rng)]!++;
      for (let i = 0; i < n; i++) expect(Math.abs(counts[i]! / draws - probs[i]!)).toBeLessThan(0.01);
    }
  });

  it('all-equal costs under softmax are uniform', () => {
    const probs = new Float64Array(4);
    softmaxProbabilities(Float64Array.from([3, 3, 3, 3]), 4, 1, probs);
    expect([...probs]).toEqual([0.25, 0.25, 0.25, 0.25]);
  });

  it('a temperature near 0 (a client override of 5e-324) gives the lowest cost all the mass, never NaN', () => {
    const probs = new Float64Array(3);
    // Before: logits of -Infinity minus a top of -Infinity were NaN, and the sampler then took candidate 0.
    softmaxProbabilities(Float64Array.from([30, 10, 20]), 3, 5e-324, probs);
    expect([...probs]).toEqual([0, 1, 0]);
    expect(sampleIndex(probs, 3, seededRng(3))).toBe(1);
  });

  it('ties at temperature 0 are uniform', () => {
    const costs = Float64Array.from([5, 2, 9, 2, 2, 3]);
    const rng = seededRng(11);
    const counts = new Array<number>(costs.length).fill(0);
    const draws = 60_000;
    for (let k = 0; k < draws; k++) counts[pickLowest(costs, costs.length, rng)]!++;
    expect(counts[0]).toBe(0);
    expect(counts[2]).toBe(0);
    expect(counts[5]).toBe(0);
    for (const i of [1, 3, 4]) expect(Math.abs(counts[i]! / draws - 1 / 3)).toBeLessThan(0.01);
  });
});
