/**
 * The llm-d-style weighted scorer (`router_prefix_scorer_weight`, `router_queue_scorer_weight`,
 * `router_kv_utilization_scorer_weight`): any weight above 0 replaces the cost model with the weighted
 * sum of three scores in [0, 1], the highest winning; the decision's cost is the negated score.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvRouter } from '../../../src/routing/index.js';
import type { KvRouterOptions } from '../../../src/core/index.js';
import { promptHashes } from '../../../src/wasm/index.js';

const BS = 4;
const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);
const LLM_D = { routerPrefixScorerWeight: 2, routerQueueScorerWeight: 2, routerKvUtilizationScorerWeight: 1 };

function router(config: KvRouterOptions = LLM_D): KvRouter {
  const r = new KvRouter({ blockSize: BS, config, clock: new ManualClock(), rng: seededRng(9) });
  for (const w of [1, 2, 3]) r.addWorker(w, { totalKvBlocks: 100 });
  return r;
}

function cache(r: KvRouter, w: number, toks: number[]): void {
  const h = promptHashes(toks, BS);
  r.index.applyStored(w, 0, null, h.seq, h.local);
}

const costs = (r: KvRouter, id: string, toks: number[]): Record<number, number> =>
  Object.fromEntries(
    r.findBestMatch({ requestId: id, tokens: toks }, { mode: 'query' }).candidates.map((c) => [c.workerId, c.cost]),
  );

describe('weighted scorer (llm-d style)', () => {
  const prompt = tokens(40); // 10 blocks

  it('scores prefix share, normalised free queue and free KV, weighted, and picks the highest', () => {
    const r = router();
    cache(r, 1, prompt);
    cache(r, 2, prompt.slice(0, 20));
    // Idle workers: every queue and KV score is 1; prefix 1, 0.5, 0.
    expect(costs(r, 'q1', prompt)).toEqual({ 1: -(2 + 2 + 1), 2: -(1 + 2 + 1), 3: -(0 + 2 + 1) });
    expect(r.findBestMatch({ requestId: 'q2', tokens: prompt }, { mode: 'query' }).workerId).toBe(1);
    // 40 uncached tokens booked on worker 1: its queue is the longest (score 0) and 10 of its 100 blocks are active.
    r.findBestMatch({ requestId: 'other', tokens: tokens(40, 900), routing: { backendInstanceId: 1 } });
    expect(costs(r, 'q3', prompt)).toEqual({ 1: -(2 + 0 + 0.9), 2: -(1 + 2 + 1), 3: -(0 + 2 + 1) });
    expect(r.findBestMatch({ requestId: 'q4', tokens: prompt }, { mode: 'query' }).workerId).toBe(2);
  });

  it('all weights 0 (the default) keep the cost model', () => {
    const none = { routerPrefixScorerWeight: 0, routerQueueScorerWeight: 0, routerKvUtilizationScorerWeight: 0 };
    const r = router({ ...none, prefillLoadScale: 1 });
    cache(r, 1, prompt);
    // Prefill 10 - 10 credit + decode 10 on worker 1; 10 + 10 elsewhere (Dynamo's prefill scale, 1).
    expect(costs(r, 'q', prompt)).toEqual({ 1: 10, 2: 20, 3: 20 });
  });
});
