import { describe, expect, it } from 'vitest';
import {
  seededRng,
  type RoutingHints,
  type SimpleRouterMode,
  type WorkerRank as Candidate,
} from '../../../src/common/index.js';
import type { WorkerInfo } from '../../../src/discovery/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import { DirectSelector } from '../../../src/routing/push/direct-selector.js';
import { createSimpleRouter } from '../../../src/routing/push/simple-routers.js';

const cands: Candidate[] = [0, 1, 2, 3].map((w) => ({ workerId: w, dpRank: 0 }));
const key = (c: Candidate): string => `${c.workerId}:${c.dpRank}`;

function loadOf(map: Record<number, number>) {
  return { activeRequests: (c: Candidate) => map[c.workerId] ?? 0 };
}

describe('simple routers', () => {
  it('every mode constructs and carries its name', () => {
    for (const mode of ['round-robin', 'random', 'power-of-two', 'least-loaded'] as SimpleRouterMode[]) {
      const r = createSimpleRouter(mode, { rng: seededRng(1), load: loadOf({}) });
      expect(r.name).toBe(mode);
      // peek never changes what select returns next
      const p = r.peek(cands);
      expect(r.peek(cands)).toEqual(p);
      expect(r.select(cands)).toEqual(p);
      expect(() => r.select([])).toThrow(/no worker/);
    }
  });

  it('round-robin cycles through every candidate in order', () => {
    const r = createSimpleRouter('round-robin', { rng: seededRng(1), load: loadOf({}) });
    const picks = Array.from({ length: 8 }, () => r.select(cands).workerId);
    expect(picks).toEqual([0, 1, 2, 3, 0, 1, 2, 3]);
  });

  // Worker 0 fails every attempt and each request retries once without it. A retry used to advance the same rotation,
  // so every first attempt landed on worker 0; least-loaded's tie rotation (all idle) skewed the same way.
  it('a retry turn never moves the rotation of first attempts (round-robin, least-loaded on ties)', () => {
    const two = cands.slice(0, 2);
    for (const mode of ['round-robin', 'least-loaded'] as const) {
      const r = createSimpleRouter(mode, { rng: seededRng(1), load: loadOf({}) });
      const firsts: number[] = [];
      for (let i = 0; i < 6; i++) {
        const first = r.select(two).workerId;
        firsts.push(first);
        if (first === 0) expect(r.select(two.slice(1), 'retry').workerId).toBe(1);
      }
      expect(firsts, mode).toEqual([0, 1, 0, 1, 0, 1]);
      // Retries rotate among themselves, and a peek of either turn agrees with its select.
      expect(r.peek(cands.slice(1), 'retry')).toEqual(r.select(cands.slice(1), 'retry'));
      expect([1, 2].map(() => r.select(cands.slice(1), 'retry').workerId)).toEqual([2, 3]);
      expect(r.peek(two)).toEqual(r.select(two));
    }
  });

  it('random is uniform over candidates (seeded, 40,000 draws within 3 %)', () => {
    const r = createSimpleRouter('random', { rng: seededRng(7), load: loadOf({}) });
    const counts = new Map<string, number>();
    for (let i = 0; i < 40_000; i++) {
      const c = key(r.select(cands));
      counts.set(c, (counts.get(c) ?? 0) + 1);
    }
    for (const c of cands) expect(Math.abs(counts.get(key(c))! / 40_000 - 0.25)).toBeLessThan(0.03 * 0.25 * 4);
  });

  it('power-of-two never picks the most loaded of two, and never the global max when n = 2', () => {
    const load = loadOf({ 0: 5, 1: 0, 2: 9, 3: 1 });
    const r = createSimpleRouter('power-of-two', { rng: seededRng(3), load });
    const counts = new Map<number, number>();
    for (let i = 0; i < 10_000; i++) {
      const w = r.select(cands).workerId;
      counts.set(w, (counts.get(w) ?? 0) + 1);
    }
    // worker 2 is the most loaded: it can only win against... nobody
    expect(counts.get(2) ?? 0).toBe(0);
    // worker 1 (idle) wins every pair it is in: 3 of 6 pairs -> 50 %
    expect(Math.abs(counts.get(1)! / 10_000 - 0.5)).toBeLessThan(0.03);
    const two = createSimpleRouter('power-of-two', { rng: seededRng(3), load });
    for (let i = 0; i < 100; i++) expect(two.select(cands.slice(0, 2)).workerId).toBe(1);
  });

  it('least-loaded picks the minimum and spreads ties', () => {
    const loads: Record<number, number> = { 0: 2, 1: 1, 2: 1, 3: 3 };
    const r = createSimpleRouter('least-loaded', { rng: seededRng(1), load: loadOf(loads) });
    const picks = new Set<number>();
    for (let i = 0; i < 8; i++) picks.add(r.select(cands).workerId);
    expect([...picks].sort()).toEqual([1, 2]);
  });
});

describe('direct selection (DirectSelector)', () => {
  const workers = new Map([
    [10, { id: 10, dpStart: 0, dpSize: 1 } as WorkerInfo],
    [11, { id: 11, dpStart: 0, dpSize: 4 } as WorkerInfo],
  ]);
  const selector = new DirectSelector({ model: 'm', role: 'aggregated', members: workers });
  const direct = { resolve: (hints: RoutingHints, _workers: unknown) => selector.slotFor('aggregated', hints) };

  it('takes decode_worker_id first, then backend_instance_id', () => {
    expect(direct.resolve({ backendInstanceId: 10 }, workers)).toEqual({ workerId: 10, dpRank: 0 });
    expect(direct.resolve({ backendInstanceId: 10, decodeWorkerId: 11, dpRank: 3 }, workers)).toEqual({
      workerId: 11,
      dpRank: 3,
    });
  });

  it('says clearly what is missing or unknown', () => {
    const cases: [object, string][] = [
      [{}, 'KVG_ERR_MISSING_WORKER_ID'],
      [{ backendInstanceId: 99 }, 'KVG_ERR_UNKNOWN_WORKER'],
      [{ backendInstanceId: 11, dpRank: 4 }, 'KVG_ERR_INVALID_DP_RANK'],
      [{ backendInstanceId: 10, dpRank: 1 }, 'KVG_ERR_INVALID_DP_RANK'],
    ];
    for (const [hints, code] of cases) {
      try {
        direct.resolve(hints, workers);
        expect.unreachable();
      } catch (e) {
        expect(isKvgateError(e)).toBe(true);
        expect((e as { code: string }).code).toBe(code);
      }
    }
  });
});
