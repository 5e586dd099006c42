/**
 * Cache pressure in the cost: a worker whose KV cache is full must evict other contexts' cached blocks to
 * take a prompt it does not hold, and those blocks come back as prefill work for the sessions that
 * return to them. The router charges them (at the prefill scale) from the worker's advertised capacity
 * and the blocks its index holds; with room, or with no known capacity, the term is 0.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { candidateCost } from '../../../src/core/cost.js';
import type { KvRouterOptions } from '../../../src/core/index.js';
import { KvRouter } from '../../../src/routing/index.js';
import { promptHashes } from '../../../src/wasm/index.js';
import { dynamoCostKnobs } from '../../helpers/cost-knobs.js';

const BS = 4;
const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

function router(config: KvRouterOptions, totalKvBlocks: number | undefined): KvRouter {
  // Dynamo's prefill scale, which the costs below are worked in (kvgate's default is 4).
  const r = new KvRouter({
    blockSize: BS,
    config: { prefillLoadScale: 1, ...config },
    clock: new ManualClock(),
    rng: seededRng(3),
  });
  for (const w of [1, 2]) r.addWorker(w, totalKvBlocks === undefined ? {} : { totalKvBlocks });
  return r;
}

function cache(r: KvRouter, w: number, toks: number[]): void {
  const h = promptHashes(toks, BS);
  r.index.applyStored(w, 0, null, h.seq, h.local);
}

/**
 * Worker 1's 8-block cache is full of another session's context; worker 2's is empty but one request
 * (2 blocks) is decoding there. A new 4-block prompt: Dynamo's cost prefers worker 1 (no active blocks),
 * which would evict 4 blocks of that context.
 */
function scene(config: KvRouterOptions, totalKvBlocks: number | undefined): KvRouter {
  const r = router(config, totalKvBlocks);
  cache(r, 1, tokens(32, 1000));
  r.findBestMatch({ requestId: 'busy', tokens: tokens(8, 5000), routing: { backendInstanceId: 2 } });
  r.markPrefillCompleted('busy');
  return r;
}

describe('cache pressure (routerKvPressureWeight)', () => {
  it('charges the blocks a full worker would evict, at the prefill scale, and picks the worker with room', () => {
    const d = scene({}, 8).findBestMatch({ requestId: 'new', tokens: tokens(16) }, { mode: 'query' });
    const byWorker = Object.fromEntries(d.candidates.map((c) => [c.workerId, c.cost]));
    // Worker 1: prefill 4 + decode 4 + 4 evicted; worker 2: prefill 4 + decode (2 active + 4).
    expect(byWorker[1]).toBe(12);
    expect(byWorker[2]).toBe(10);
    expect(d.workerId).toBe(2);
    const scaled = scene({ prefillLoadScale: 2 }, 8).findBestMatch(
      { requestId: 'n', tokens: tokens(16) },
      { mode: 'query' },
    );
    expect(Object.fromEntries(scaled.candidates.map((c) => [c.workerId, c.cost]))[1]).toBe(2 * (4 + 4) + 4);
  });

  it('follows the capacities as workers come, change and go', () => {
    const r = scene({}, 8);
    const costOf1 = (id: string): number =>
      r
        .findBestMatch({ requestId: id, tokens: tokens(16) }, { mode: 'query' })
        .candidates.find((c) => c.workerId === 1)!.cost;
    expect(costOf1('a')).toBe(12);
    // Another worker with a capacity leaves, then comes back without one: worker 1's stays charged.
    r.addWorker(3, { totalKvBlocks: 8 });
    r.removeWorker(3);
    r.addWorker(3, {});
    r.addWorker(2, {});
    expect(costOf1('b')).toBe(12);
    // Worker 1 no longer advertises one, nor does any other: nothing is charged.
    r.addWorker(1, {});
    expect(costOf1('c')).toBe(8);
    r.addWorker(1, { totalKvBlocks: 8 });
    expect(costOf1('d')).toBe(12);
  });

  it("is Dynamo's cost with weight 0, with room in the cache, or with no advertised capacity", () => {
    for (const [config, capacity] of [
      [{ routerKvPressureWeight: 0 }, 8],
      [{}, 64],
      [{}, undefined],
    ] as const) {
      const d = scene(config, capacity).findBestMatch({ requestId: 'new', tokens: tokens(16) }, { mode: 'query' });
      expect(Object.fromEntries(d.candidates.map((c) => [c.workerId, c.cost]))).toEqual({ 1: 8, 2: 10 });
      expect(d.workerId).toBe(1);
    }
  });

  it('charges only the blocks beyond the free room, and nothing for the prefix the worker already holds', () => {
    const r = router({}, 10);
    const prompt = tokens(24); // 6 blocks
    cache(r, 1, prompt.slice(0, 8)); // 2 of them cached on worker 1
    cache(r, 1, tokens(24, 1000)); // 6 blocks of another context: 8 held, 2 free
    const d = r.findBestMatch({ requestId: 'n', tokens: prompt }, { mode: 'query' });
    const w1 = d.candidates.find((c) => c.workerId === 1)!;
    // 4 new blocks, 2 free: 2 evicted. Prefill 6 - 2 credit + 2 evicted; decode 6.
    expect(w1.cost).toBe(4 + 2 + 6);
  });

  it('the pure cost: evicted blocks weighted and scaled; absent weight or the decode exception ignore them', () => {
    const knobs = dynamoCostKnobs({ prefillLoadScale: 3 });
    const req = { isl: 40, blockSize: 4, minActivePrefillTokens: 0 };
    const c = {
      activePrefillTokens: 0,
      deviceOverlapBlocks: 2,
      potentialDecodeBlocks: 10,
      activeRequests: 0,
      evictedBlocks: 5,
    };
    expect(candidateCost(knobs, req, c)).toBe(3 * 8 + 10);
    expect(candidateCost({ ...knobs, kvPressureWeight: 0.5 }, req, c)).toBe(3 * (8 + 2.5) + 10);
    expect(
      candidateCost({ ...knobs, kvPressureWeight: 1, decodeException: true, trackPrefillTokens: false }, req, c),
    ).toBe(10 - 2);
  });
});
