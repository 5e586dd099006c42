/**
 * The scheduler's scoring loop against the cost model it inlines: under random knobs (credit, its decay,
 * prefill scale, the per-request weight, the decode exception) and random loads, every candidate's cost
 * is bit for bit `candidateCost` of its inputs, and the pick is `pickLowest`'s over those costs, drawing
 * the seeded RNG for ties in the same order (the loop picks as it scores).
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { candidateCost } from '../../../src/core/cost.js';
import { pickLowest } from '../../../src/core/selection.js';
import type { KvRouterOptions, RoutingDecision } from '../../../src/core/index.js';
import { KvRouter } from '../../../src/routing/index.js';
import { promptHashes } from '../../../src/wasm/index.js';

const BS = 4;

interface Setup {
  readonly kv: KvRouter;
  readonly knobs: Parameters<typeof candidateCost>[0];
  readonly docs: number[][];
}

/** A router over 12 slots with random knobs, a random index and random bookings. */
function setup(seed: number, workerType: 'aggregated' | 'decode' = 'aggregated'): Setup {
  const rng = seededRng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
  const config: KvRouterOptions = {
    overlapScoreCredit: pick([0, 0.5, 1, 2]),
    overlapScoreCreditDecay: pick([0, 0.25, 3]),
    prefillLoadScale: pick([0.5, 1, 4]),
    decodeActiveRequestWeight: pick([0, 1, 64]),
    routerTrackPrefillTokens: workerType === 'decode' ? false : rng() < 0.8,
    routerKvPressureWeight: 0,
  };
  const kv = new KvRouter({ blockSize: BS, config, workerType, clock: new ManualClock(), rng: seededRng(seed + 1) });
  for (let w = 1; w <= 6; w++) kv.addWorker(w, { dataParallelSize: 2 });
  const docs = Array.from({ length: 3 }, (_, d) => Array.from({ length: 64 }, (_, i) => d * 1000 + i + 1));
  for (const { workerId, dpRank } of kv.loads()) {
    const doc = pick(docs);
    const h = promptHashes(doc.slice(0, BS * (1 + Math.floor(rng() * 16))), BS);
    kv.index.applyStored(workerId, dpRank, null, h.seq, h.local);
  }
  for (let i = 0; i < 20; i++) {
    const doc = pick(docs);
    kv.findBestMatch({ requestId: `b${i}`, tokens: [...doc.slice(0, 4 + Math.floor(rng() * 60)), 9000 + i] });
    if (rng() < 0.4) kv.markPrefillCompleted(`b${i}`);
  }
  const c = kv.config;
  const knobs = {
    overlapScoreCredit: c.overlapScoreCredit,
    overlapScoreCreditDecay: c.overlapScoreCreditDecay,
    prefillLoadScale: c.prefillLoadScale,
    decodeActiveRequestWeight: c.decodeActiveRequestWeight,
    hostCacheHitWeight: 0,
    diskCacheHitWeight: 0,
    sharedCacheMultiplier: 0,
    kvPressureWeight: 0,
    trackPrefillTokens: c.routerTrackPrefillTokens,
    decodeException: workerType === 'decode' && !c.routerTrackPrefillTokens && c.overlapScoreCredit > 0,
  };
  return { kv, knobs, docs };
}

/** Each candidate's cost recomputed by the cost model from the loads before the decision. */
function expectedCosts(s: Setup, d: RoutingDecision, prefill: Map<string, number>): number[] {
  const cands = d.candidates;
  const min = Math.min(...cands.map((c) => prefill.get(`${c.workerId}/${c.dpRank}`)!));
  return cands.map((c) =>
    candidateCost(
      s.knobs,
      { isl: d.isl, blockSize: BS, minActivePrefillTokens: min },
      {
        activePrefillTokens: prefill.get(`${c.workerId}/${c.dpRank}`)!,
        deviceOverlapBlocks: c.overlapBlocks,
        potentialDecodeBlocks: c.decodeBlocks,
        activeRequests: c.activeRequests,
      },
    ),
  );
}

describe('the scoring loop', () => {
  for (const workerType of ['aggregated', 'decode'] as const) {
    it(`scores each candidate as the cost model does and picks its argmin (${workerType})`, () => {
      for (let seed = 1; seed <= 12; seed++) {
        const s = setup(seed * 7, workerType);
        for (let q = 0; q < 6; q++) {
          const prefill = new Map(s.kv.loads().map((l) => [`${l.workerId}/${l.dpRank}`, l.activePrefillTokens]));
          const doc = s.docs[q % s.docs.length]!;
          const d = s.kv.findBestMatch(
            { requestId: `q${q}`, tokens: [...doc.slice(0, 8 + q * 8), 7000 + q] },
            { mode: 'query' },
          );
          const expected = expectedCosts(s, d, prefill);
          const costs = d.candidates.map((c) => c.cost);
          for (const [i, cost] of costs.entries()) expect(Object.is(cost, expected[i])).toBe(true);
          const lowest = Math.min(...costs);
          expect(d.cost).toBe(lowest);
          expect(d.candidates.every((c) => c.probability === undefined)).toBe(true);
        }
      }
    });
  }

  it('draws the RNG for ties as pickLowest does: the same picks from the same seed', () => {
    // Twelve identical idle slots: every decision is a twelve-way tie.
    const kv = new KvRouter({ blockSize: BS, clock: new ManualClock(), rng: seededRng(99) });
    for (let w = 1; w <= 6; w++) kv.addWorker(w, { dataParallelSize: 2 });
    const reference = seededRng(99);
    const picks: string[] = [];
    const expected: string[] = [];
    for (let q = 0; q < 40; q++) {
      const d = kv.findBestMatch({ requestId: `t${q}`, tokens: [1, 2, 3, 4, 5, 6, 7, 8] }, { mode: 'query' });
      const costs = Float64Array.from(d.candidates.map((c) => c.cost));
      const i = pickLowest(costs, costs.length, reference);
      expected.push(`${d.candidates[i]!.workerId}/${d.candidates[i]!.dpRank}`);
      picks.push(`${d.workerId}/${d.dpRank}`);
    }
    expect(picks).toEqual(expected);
    expect(new Set(picks).size).toBeGreaterThan(6);
  });

  it('writes every probability under softmax', () => {
    const kv = new KvRouter({ blockSize: BS, config: { routerTemperature: 0.5 }, rng: seededRng(3) });
    for (let w = 1; w <= 4; w++) kv.addWorker(w);
    const d = kv.findBestMatch({ requestId: 's', tokens: [1, 2, 3, 4] }, { mode: 'query' });
    const p = d.candidates.map((c) => c.probability!);
    expect(p.every((x) => x > 0)).toBe(true);
    expect(p.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    const pinned = kv.findBestMatch({ requestId: 'p', tokens: [1, 2, 3, 4], routing: { backendInstanceId: 2 } });
    expect(pinned.candidates.map((c) => c.probability)).toEqual([1]);
  });
});
