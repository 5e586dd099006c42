/**
 * The prefill pool's load estimate (Dynamo's `PrefillLoadEstimator`): each prefill worker's queued prefill tokens,
 * booked when a prefill leg is routed there and released when its prefill completes, feed the prefill choice and
 * the `prefill_load` policy. Two prefill workers holding the same cached prefix are told apart by it alone.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { WorkerRegistry, type WorkerInfo } from '../../../src/discovery/index.js';
import { EngineClient } from '../../../src/engines/index.js';
import { ModelRouter, type ModelRouterOptions } from '../../../src/routing/model-router.js';
import { makeRouterContext } from '../../../src/routing/context.js';
import type { LegRequest } from '../../../src/routing/push/types.js';
import { prepare } from '../../helpers/fleet.js';

const MODEL = 'mock-model';
const BS = 16;

function worker(id: number, role: WorkerInfo['role'], extra: Partial<WorkerInfo> = {}): WorkerInfo {
  return { id, model: MODEL, url: `http://127.0.0.1:${id}`, role, dialect: 'vllm', dpStart: 0, dpSize: 1, ...extra };
}

function routerOn(opts: Partial<ModelRouterOptions> = {}): ModelRouter {
  const registry = new WorkerRegistry();
  for (const w of [worker(1, 'decode', { servesAggregated: true }), worker(11, 'prefill'), worker(12, 'prefill')])
    registry.add(w);
  return new ModelRouter(
    {
      model: MODEL,
      mode: 'kv',
      blockSize: BS,
      registry,
      engine: new EngineClient(),
      tickIntervalMs: 0,
      routerConfig: { useKvEvents: false },
      ...opts,
    },
    makeRouterContext({ rng: seededRng(7), clock: new ManualClock(), metrics: undefined }),
  );
}

function legOf(ids: number[]): LegRequest {
  const req = prepare(ids);
  const { requestId, body, stream, hashes, signal, receivedAt } = req;
  return {
    requestId,
    path: '/v1/completions',
    body,
    stream,
    isl: ids.length,
    hashes,
    routing: req.hints,
    phase: 'aggregated',
    signal,
    receivedAt,
  };
}

const tokens = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => from + i);

describe('prefill load estimate per prefill worker', () => {
  it('two prefill workers with equal overlap: the one with fewer queued prefill tokens takes the prefill', async () => {
    const r = routerOn();
    const kv = r.prefill.pool!.kvRouter!;
    const prompt = tokens(BS * 8, 300);
    // Both workers served this prompt (approximate mode records it); their load is gone, their caches stay.
    for (const id of [11, 12]) {
      kv.addRequest({ requestId: `warm-${id}`, workerId: id, tokens: prompt });
      kv.free(`warm-${id}`);
    }
    // A long prompt queued for prefill on worker 11: 64 blocks of uncached tokens.
    kv.addRequest({ requestId: 'queued', workerId: 11, tokens: tokens(BS * 64, 90_000) });
    expect(kv.load({ workerId: 11, dpRank: 0 })!.activePrefillTokens).toBe(BS * 64);
    expect(kv.load({ workerId: 12, dpRank: 0 })!.activePrefillTokens).toBe(0);

    const q = await r.prefill.query(legOf(prompt));
    expect(q.prefill.worker.id).toBe(12);
    const c = new Map(q.prefill.decision!.candidates.map((x) => [x.workerId, x]));
    expect(c.get(11)!.overlapBlocks).toBe(8);
    expect(c.get(12)!.overlapBlocks).toBe(8);
    expect(c.get(11)!.prefillTokens - c.get(12)!.prefillTokens).toBe(BS * 64);
    expect(c.get(11)!.cost).toBeGreaterThan(c.get(12)!.cost);

    // Its prefill done, worker 11's queue is empty again and the two cost the same.
    kv.markPrefillCompleted('queued');
    expect(kv.load({ workerId: 11, dpRank: 0 })!.activePrefillTokens).toBe(0);
    const again = await r.prefill.query(legOf(prompt));
    const [c11, c12] = [11, 12].map((id) => again.prefill.decision!.candidates.find((x) => x.workerId === id)!.cost);
    expect(c11).toBe(c12);
    await r.close();
  });

  it('prefill_load reads the least-loaded prefill worker: aggregated only once every prefill worker is over the bound', () => {
    const r = routerOn({ disaggPolicy: { mode: 'prefill_load', minInputTokens: 0, maxPrefillLoadTokens: BS * 10 } });
    const kv = r.prefill.pool!.kvRouter!;
    kv.addRequest({ requestId: 'a', workerId: 11, tokens: tokens(BS * 20, 1000) });
    expect(r.prefill.decide(BS * 4)).toMatchObject({ disaggregate: true, reason: 'prefill_idle' });
    kv.addRequest({ requestId: 'b', workerId: 12, tokens: tokens(BS * 20, 5000) });
    expect(r.prefill.decide(BS * 4)).toMatchObject({ disaggregate: false, reason: 'prefill_loaded' });
    kv.markPrefillCompleted('b');
    expect(r.prefill.decide(BS * 4)).toMatchObject({ disaggregate: true, reason: 'prefill_idle' });
  });
});
