/**
 * The PrefillRouter without engines: lifecycle and canServe, the prefill
 * pool's configuration, direct mode, the decode override, sticky-session
 * bookkeeping on a manual clock, and the pure handoff helpers (bootstrap
 * rooms, attribution order, usage details).
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { RequestTracker, computeBootstrapRoom, randomRoomSeed } from '../../../src/core/index.js';
import { I64_MAX } from '../../../src/core/disagg/bootstrap-room.js';
import { WorkerRegistry, type WorkerInfo } from '../../../src/discovery/index.js';
import { EngineClient } from '../../../src/engines/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import {
  bootstrapFor,
  bootstrapProblem,
  decodeRouterOverride,
  handoffPath,
  prefillWorkerInfo,
  withPromptTokensDetails,
} from '../../../src/routing/disagg/handoff.js';
import { StickySessions } from '../../../src/routing/sticky-sessions.js';
import { ModelRouter, type ModelRouterOptions } from '../../../src/routing/model-router.js';
import { makeRouterContext } from '../../../src/routing/context.js';
import type { LegRequest } from '../../../src/routing/push/types.js';
import { prepare } from '../../helpers/fleet.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';

const MODEL = 'mock-model';

function worker(id: number, role: WorkerInfo['role'], extra: Partial<WorkerInfo> = {}): WorkerInfo {
  return { id, model: MODEL, url: `http://127.0.0.1:${id}`, role, dialect: 'vllm', dpStart: 0, dpSize: 1, ...extra };
}

function routerOn(
  registry: WorkerRegistry,
  opts: Partial<ModelRouterOptions> = {},
  metrics?: KvgateMetrics,
): ModelRouter {
  return new ModelRouter(
    {
      model: MODEL,
      mode: 'kv',
      blockSize: 16,
      registry,
      engine: new EngineClient(),
      tickIntervalMs: 0,
      routerConfig: { useKvEvents: false },
      ...opts,
    },
    makeRouterContext({ rng: seededRng(1), clock: new ManualClock(), metrics }),
  );
}

function legOf(tokens: number[], hints: Parameters<typeof prepare>[1] = {}): LegRequest {
  const req = prepare(tokens, hints);
  return {
    requestId: req.requestId,
    path: '/v1/completions',
    body: req.body,
    stream: req.stream,
    isl: req.tokenIds.length,
    hashes: req.hashes,
    routing: req.hints,
    phase: 'aggregated',
    signal: req.signal,
    receivedAt: req.receivedAt,
  };
}

describe('lifecycle', () => {
  it('pending -> active -> inactive -> active, with canServe following enforce_disagg', async () => {
    const registry = new WorkerRegistry();
    // A decode worker that can serve alone (kv_both): the lenient router's fallback.
    registry.add(worker(1, 'decode', { servesAggregated: true }));
    const lenient = routerOn(registry, { routerConfig: { useKvEvents: false, routerTrackOutputBlocks: true } });
    const strict = routerOn(registry, { enforceDisagg: true });
    expect(lenient.prefill.state).toBe('pending');
    expect(lenient.prefill.pool).toBeUndefined();
    expect([lenient.canServe(), strict.canServe()]).toEqual([true, false]);
    expect([lenient.prefill.canServeRequests(), strict.prefill.canServeRequests()]).toEqual([true, false]);
    await expect(strict.route(prepare([1, 2, 3]))).rejects.toSatisfy((e: unknown) =>
      isKvgateError(e, 'KVG_ERR_PREFILL_NOT_ACTIVATED'),
    );

    registry.add(worker(11, 'prefill'));
    expect(lenient.prefill.state).toBe('active');
    expect(lenient.prefill.activations).toBe(1);
    const pool = lenient.prefill.pool!;
    // The prefill pool has its own KvRouter, typed prefill, scoring without active-block tracking.
    expect(pool.role).toBe('prefill');
    expect(pool.kvRouter).not.toBe(lenient.decode.kvRouter);
    expect(pool.kvRouter!.workerType).toBe('prefill');
    expect(pool.kvRouter!.config).toMatchObject({ routerTrackActiveBlocks: false, routerTrackOutputBlocks: false });
    expect(lenient.decode.kvRouter!.workerType).toBe('decode');
    expect(lenient.decode.kvRouter!.config).toMatchObject({
      routerTrackActiveBlocks: true,
      routerTrackOutputBlocks: true,
    });
    expect(pool.workers().map((w) => w.id)).toEqual([11]);
    expect(lenient.decode.workers().map((w) => w.id)).toEqual([1]);
    expect([lenient.canServe(), strict.canServe()]).toEqual([true, true]);

    registry.add(worker(12, 'prefill'));
    registry.markDown(11);
    expect(lenient.prefill.state).toBe('active');
    registry.markDown(12);
    expect(lenient.prefill.state).toBe('inactive');
    expect(strict.prefill.state).toBe('inactive');
    expect([lenient.canServe(), strict.canServe()]).toEqual([true, false]);
    expect(lenient.prefill.pool).toBe(pool);

    registry.markUp(12);
    expect(lenient.prefill.state).toBe('active');
    expect(lenient.prefill.activations).toBe(2);
    expect(lenient.prefill.pool).toBe(pool);
    expect([lenient.canServe(), strict.canServe()]).toEqual([true, true]);
    registry.markDown(1);
    expect([lenient.canServe(), strict.canServe()]).toEqual([false, false]);
    await Promise.all([lenient.close(), strict.close()]);
    expect(lenient.canServe()).toBe(false);
  });

  // issue 12 item 10: decode-only workers cannot serve a request alone, so nothing falls back to them.
  it('without enforce_disagg, decode-only workers and no prefill pool: not servable, a clear 503, no fallback', async () => {
    const registry = new WorkerRegistry();
    for (const w of [worker(1, 'decode'), worker(2, 'decode'), worker(11, 'prefill')]) registry.add(w);
    const r = routerOn(registry);
    expect(r.canServe()).toBe(true);
    registry.markDown(11);
    expect(r.prefill.state).toBe('inactive');
    expect(r.canServe()).toBe(false);
    // One code for the cause, whether the frontend asks first (unavailable) or the router is called.
    expect(r.unavailable()).toSatisfy(
      (e: unknown) =>
        isKvgateError(e, 'KVG_ERR_PREFILL_NOT_ACTIVATED') &&
        e.statusCode === 503 &&
        /no prefill worker is available and its decode workers are decode-only/.test(e.message),
    );
    for (const call of [() => r.route(prepare([1, 2, 3])), () => r.query(prepare([1, 2, 3], { queryOnly: true }))]) {
      await expect(call()).rejects.toSatisfy(
        (e: unknown) => isKvgateError(e, 'KVG_ERR_PREFILL_NOT_ACTIVATED') && e.statusCode === 503,
      );
    }
    // One decode worker that can serve alone is enough for the fallback.
    registry.add(worker(3, 'decode', { servesAggregated: true }));
    expect(r.canServe()).toBe(true);
    registry.markUp(11);
    expect(r.canServe()).toBe(true);
    await r.close();
  });

  it('non-KV modes get a simple prefill router; an unusable SGLang bootstrap endpoint keeps a worker out', async () => {
    const registry = new WorkerRegistry();
    registry.add(worker(1, 'decode', { dialect: 'sglang' }));
    registry.add(worker(11, 'prefill', { dialect: 'sglang', bootstrap: { host: '127.0.0.1', port: 70000 } }));
    const rr = routerOn(registry, { mode: 'round-robin' });
    expect(rr.prefill.state).toBe('pending');
    registry.add(worker(12, 'prefill', { dialect: 'sglang', bootstrap: { host: '127.0.0.1', port: 8998 } }));
    expect(rr.prefill.state).toBe('active');
    expect(rr.prefill.pool!.mode).toBe('round-robin');
    expect(rr.prefill.pool!.kvRouter).toBeUndefined();
    expect(rr.prefill.pool!.workers().map((w) => w.id)).toEqual([12]);
    await rr.close();
  });
});

describe('routing rules', () => {
  it('direct mode needs the prefill worker id, and says so', async () => {
    const registry = new WorkerRegistry();
    registry.add(worker(1, 'decode'));
    registry.add(worker(11, 'prefill'));
    const r = routerOn(registry, { mode: 'direct' });
    for (const p of [r.route(prepare([1, 2, 3])), r.query(prepare([1, 2, 3]))]) {
      await expect(p).rejects.toSatisfy(
        (e: unknown) =>
          isKvgateError(e, 'KVG_ERR_MISSING_WORKER_ID') &&
          e.statusCode === 400 &&
          /prefill worker .*x-prefill-instance-id.*nvext\.prefill_worker_id/.test(e.message),
      );
    }
    await expect(r.route(prepare([1, 2, 3], { hints: { annotations: [], prefillWorkerId: 11 } }))).rejects.toSatisfy(
      (e: unknown) => isKvgateError(e, 'KVG_ERR_MISSING_WORKER_ID') && /decode worker/.test(e.message),
    );
    const q = await r.query(
      prepare([1, 2, 3], { hints: { annotations: [], prefillWorkerId: 11, backendInstanceId: 1 } }),
    );
    expect(q).toMatchObject({ worker: { workerId: 1 }, prefillWorker: { workerId: 11, dpRank: 0 } });
    await r.close();
  });

  // issue 12 item 4: a prefill session never overrides the request's allowed_worker_ids.
  // issue 30: a query changes no router state, so the binding it passes over stays (it used to be dropped).
  it('a query passes over a sticky prefill worker the request does not allow, keeping the binding', async () => {
    const registry = new WorkerRegistry();
    for (const w of [worker(1, 'decode'), worker(11, 'prefill'), worker(12, 'prefill')]) registry.add(w);
    const r = routerOn(registry);
    r.prefill.sessions.bind('s', { workerId: 11, dpRank: 0 });
    const session = { id: 's' };
    const q = await r.query(
      prepare([1, 2, 3], { hints: { annotations: [], session, allowedWorkerIds: new Set([12, 1]) } }),
    );
    expect(q.prefillWorker?.workerId).toBe(12);
    expect(r.prefill.sessions.lookup('s')).toMatchObject({ workerId: 11, dpRank: 0 });
    // Without the restriction, a binding is honoured as before.
    const free = await r.query(prepare([1, 2, 3], { hints: { annotations: [], session } }));
    expect(free.prefillWorker?.workerId).toBe(11);
  });

  // issue 30: a query changes no router state, session bindings included.
  it("a query whose required taints exclude the session's prefill worker keeps the binding", async () => {
    const registry = new WorkerRegistry();
    for (const w of [
      worker(1, 'decode', { taints: ['h100'] }),
      worker(11, 'prefill'),
      worker(12, 'prefill', { taints: ['h100'] }),
    ])
      registry.add(w);
    const r = routerOn(registry);
    r.prefill.sessions.bind('s', { workerId: 11, dpRank: 0 });
    const session = { id: 's' };
    const byTaint = await r.query(
      prepare([1, 2, 3], { hints: { annotations: [], session, routingConstraints: { requiredTaints: ['h100'] } } }),
    );
    expect(byTaint.prefillWorker?.workerId).toBe(12);
    expect(r.prefill.sessions.lookup('s')).toMatchObject({ workerId: 11, dpRank: 0 });
    // And the binding still steers the next unrestricted query.
    expect((await r.query(prepare([1, 2, 3], { hints: { annotations: [], session } }))).prefillWorker?.workerId).toBe(
      11,
    );
  });

  // issue 12 item 6: a client's router_config_override does not change the prefill choice.
  it("the prefill worker is chosen without the client's override: the cache holder every time", async () => {
    const registry = new WorkerRegistry();
    for (const w of [worker(1, 'decode'), worker(11, 'prefill'), worker(12, 'prefill')]) registry.add(w);
    const r = routerOn(registry);
    const tokens = Array.from({ length: 16 * 8 }, (_, i) => 300 + i);
    // Worker 11 served this prompt (approximate mode records it); its load is gone, its cache stays.
    const kv = r.prefill.pool!.kvRouter!;
    kv.addRequest({ requestId: 'warm', workerId: 11, tokens });
    kv.free('warm');
    const choices: number[] = [];
    for (let i = 0; i < 20; i++) {
      const q = await r.query(
        prepare(tokens, {
          hints: { annotations: [], routerConfigOverride: { overlapScoreCredit: 0, routerTemperature: 1 } },
        }),
      );
      choices.push(q.prefillWorker!.workerId);
    }
    expect(choices).toEqual(Array(20).fill(11));
  });

  it('decode routing ignores decode-side cache (no overlap credit) while aggregated routing follows it; the query books nothing', async () => {
    const registry = new WorkerRegistry();
    registry.add(worker(1, 'decode'));
    registry.add(worker(2, 'decode'));
    const r = routerOn(registry, { routerConfig: { useKvEvents: true } });
    const tokens = Array.from({ length: 16 * 8 }, (_, i) => 100 + i);
    const blockHashes = prepare(tokens).hashes.local;
    r.decode.kvRouter!.index.applyStored(
      2,
      0,
      null,
      [...blockHashes].map((_, i) => BigInt(900 + i)),
      blockHashes,
    );
    const agg = await r.decode.select(legOf(tokens), 'query');
    expect(agg.worker.id).toBe(2);
    const [c1, c2] = [1, 2].map((id) => agg.decision!.candidates.find((c) => c.workerId === id)!.cost);
    expect(c2).toBeLessThan(c1!);

    registry.add(worker(11, 'prefill'));
    const q = await r.prefill.query(
      legOf(tokens, {
        hints: { annotations: [], routerConfigOverride: { routerTemperature: 0, prefillLoadScale: 2 } },
      }),
    );
    const costs = q.decode.decision!.candidates.map((c) => c.cost);
    expect(costs).toHaveLength(2);
    expect(costs[0]).toBe(costs[1]);
    expect(q.prefill.worker.id).toBe(11);
    expect(r.prefill.pool!.kvRouter!.activeRequestCount).toBe(0);
    expect(r.decode.kvRouter!.activeRequestCount).toBe(0);
    await r.close();
  });
});

describe('conditional disaggregation (disagg_policy)', () => {
  // issue 30: per request, disaggregated or aggregated, counted by decision and reason.
  it('input_length: a short prompt is served aggregated on a decode worker that can, a long one disaggregated', async () => {
    const registry = new WorkerRegistry();
    for (const w of [worker(1, 'decode', { servesAggregated: true }), worker(11, 'prefill')]) registry.add(w);
    const metrics = new KvgateMetrics({ processMetrics: false });
    const policy = { mode: 'input_length', minInputTokens: 64, maxPrefillLoadTokens: 0 } as const;
    const r = routerOn(registry, { disaggPolicy: policy }, metrics);
    const tokens = (n: number): number[] => Array.from({ length: n }, (_, i) => i + 1);
    const short = await r.query(prepare(tokens(40)));
    expect(short.prefillWorker).toBeUndefined();
    expect(short.worker.workerId).toBe(1);
    const long = await r.query(prepare(tokens(64)));
    expect(long.prefillWorker?.workerId).toBe(11);
    const text = await metrics.text();
    expect(
      sampleSum(text, 'kvgate_router_disagg_decisions_total', { decision: 'aggregated', reason: 'short_input' }),
    ).toBe(1);
    expect(
      sampleSum(text, 'kvgate_router_disagg_decisions_total', { decision: 'disaggregated', reason: 'long_input' }),
    ).toBe(1);
    expect(r.prefill.decide(10).header).toBe('aggregated; reason=short_input');
    await r.close();
  });

  it('a request the policy keeps aggregated never goes to a decode-only worker of the pool', async () => {
    const registry = new WorkerRegistry();
    for (const w of [worker(1, 'decode'), worker(2, 'aggregated'), worker(11, 'prefill')]) registry.add(w);
    const r = routerOn(registry, { disaggPolicy: { mode: 'never', minInputTokens: 0, maxPrefillLoadTokens: 0 } });
    for (let i = 0; i < 8; i++) {
      const q = await r.query(prepare([i + 1, i + 2, i + 3]));
      expect(q.prefillWorker).toBeUndefined();
      expect(q.worker.workerId).toBe(2);
    }
    await r.close();
  });

  it('a policy that says aggregated still disaggregates when no decode worker can serve alone', async () => {
    const registry = new WorkerRegistry();
    for (const w of [worker(1, 'decode'), worker(11, 'prefill')]) registry.add(w);
    const r = routerOn(registry, { disaggPolicy: { mode: 'never', minInputTokens: 0, maxPrefillLoadTokens: 0 } });
    expect(r.prefill.decide(10)).toMatchObject({ disaggregate: true, reason: 'always' });
    expect((await r.query(prepare([1, 2, 3]))).prefillWorker?.workerId).toBe(11);
    await r.close();
  });
});

describe('sticky prefill sessions', () => {
  it('binds, slides its TTL on use, expires, and unbinds with its worker', () => {
    const clock = new ManualClock();
    const s = new StickySessions(clock, 1000);
    s.bind('a', { workerId: 11, dpRank: 0 });
    s.bind('b', { workerId: 12, dpRank: 1 }, 5000);
    s.bind('c', { workerId: 11, dpRank: 0 });
    clock.advance(900);
    expect(s.touch('a')).toBe(true);
    clock.advance(900);
    expect(s.lookup('a')).toMatchObject({ workerId: 11, dpRank: 0 });
    expect(s.lookup('c')).toBeUndefined(); // 1800 ms after binding, never used
    clock.advance(100);
    expect(s.lookup('a')).toBeUndefined(); // exactly ttl after its last use
    expect(s.touch('a')).toBe(false);
    expect(s.lookup('b')).toMatchObject({ workerId: 12, dpRank: 1, ttlMs: 5000 });
    s.bind('d', { workerId: 12, dpRank: 0 });
    expect(s.unbindWorker(12)).toBe(2);
    expect(s.size).toBe(0);
    s.bind('e', { workerId: 13, dpRank: 0 });
    clock.advance(999);
    expect(s.sweep()).toBe(0);
    clock.advance(1);
    expect(s.sweep()).toBe(1);
    expect(s.unbind('e')).toBe(false);
  });
});

describe('handoff helpers', () => {
  it('the protocol follows the worker: SGLang with a bootstrap endpoint rendezvouses, everything else is synchronous', () => {
    expect(handoffPath(worker(1, 'prefill', { dialect: 'sglang', bootstrap: { host: 'p', port: 8998 } }))).toBe(
      'bootstrap',
    );
    expect(handoffPath(worker(1, 'prefill'))).toBe('sync');
    expect(handoffPath(worker(1, 'prefill', { dialect: 'sglang' }))).toBe('sync');
    expect(bootstrapProblem(worker(1, 'prefill'))).toBeUndefined();
    expect(bootstrapProblem(worker(1, 'prefill', { dialect: 'sglang' }))).toMatch(/needs a bootstrap endpoint/);
    expect(bootstrapProblem(worker(1, 'prefill', { dialect: 'sglang', bootstrap: { host: '', port: 1 } }))).toMatch(
      /host is empty/,
    );
    expect(bootstrapProblem(worker(1, 'prefill', { dialect: 'sglang', bootstrap: { host: 'p', port: 0 } }))).toMatch(
      /port 0/,
    );
  });

  it('bootstrap rooms encode the rank within the worker and stay within 63 bits', () => {
    const rng = seededRng(9);
    for (const [dpStart, dpSize] of [
      [0, 1],
      [0, 2],
      [0, 7],
      [4, 3],
      [8, 48],
    ] as const) {
      const w = worker(1, 'prefill', { dialect: 'sglang', bootstrap: { host: 'p', port: 8998 }, dpStart, dpSize });
      for (let rank = dpStart; rank < dpStart + dpSize; rank++) {
        const b = bootstrapFor(w, rank, rng);
        expect(b).toMatchObject({ host: 'p', port: 8998 });
        const room = b.room as bigint;
        expect(room % BigInt(dpSize)).toBe(BigInt(rank - dpStart));
        expect(room >= 0n && room <= I64_MAX).toBe(true);
      }
    }
  });

  it('computeBootstrapRoom equals the reference formula over the spec sweep (and size 1 keeps r)', () => {
    const rng = seededRng(2027);
    const reference = (rank: bigint, size: bigint, r: bigint): bigint =>
      (r % ((I64_MAX - rank) / size + 1n)) * size + rank;
    const rs = [I64_MAX, I64_MAX - 1n, 0n, 12345n, ...Array.from({ length: 8 }, () => randomRoomSeed(rng))];
    for (const size of [1, 3, 5, 6, 7, 9, 16, 32, 48, 49, 64, 128]) {
      for (let rank = 0; rank < size; rank++) {
        for (const r of rs) expect(computeBootstrapRoom(rank, size, r)).toBe(reference(BigInt(rank), BigInt(size), r));
        // The largest room for this (rank, size) is within i64 and within one stride of it.
        const top = computeBootstrapRoom(rank, size, (I64_MAX - BigInt(rank)) / BigInt(size));
        expect(top <= I64_MAX && top > I64_MAX - BigInt(size)).toBe(true);
      }
    }
    for (const r of rs) expect(computeBootstrapRoom(0, 1, r)).toBe(r);
    // Small seeds map one to one: distinct r, distinct rooms.
    expect(computeBootstrapRoom(2, 5, 10n)).toBe(52n);
  });

  it('the decode override zeroes credit, reuse and prefill tracking, keeping the other fields', () => {
    expect(decodeRouterOverride(undefined)).toEqual({
      overlapScoreCredit: 0,
      assumeKvReuse: false,
      trackPrefillTokens: false,
    });
    expect(
      decodeRouterOverride({
        router_temperature: 0.5,
        overlap_score_credit: 3,
        assume_kv_reuse: true,
        shared_cache_multiplier: 1,
      }),
    ).toEqual({
      routerTemperature: 0.5,
      sharedCacheMultiplier: 1,
      overlapScoreCredit: 0,
      assumeKvReuse: false,
      trackPrefillTokens: false,
    });
    expect(decodeRouterOverride({ prefillLoadScale: 2, trackPrefillTokens: true })).toEqual({
      prefillLoadScale: 2,
      overlapScoreCredit: 0,
      assumeKvReuse: false,
      trackPrefillTokens: false,
    });
  });

  it('prefill worker attribution: tracker, then direct target, then the payload', () => {
    const tracker = new RequestTracker(new ManualClock());
    const payload = { routing_data: { worker_id: { prefill_worker_id: 33, prefill_dp_rank: 2 } } };
    expect(prefillWorkerInfo(undefined, undefined, payload)).toEqual({ workerId: 33, dpRank: 2 });
    expect(prefillWorkerInfo(tracker, { workerId: 22, dpRank: 1 }, payload)).toEqual({ workerId: 22, dpRank: 1 });
    expect(
      prefillWorkerInfo(tracker, undefined, { routing_data: { worker_id: { prefill_worker_id: 'x' } } }),
    ).toBeUndefined();
    tracker.recordWorker({ workerId: 11, dpRank: 0 }); // aggregated phase: fills the prefill slot too
    expect(prefillWorkerInfo(tracker, { workerId: 22, dpRank: 1 }, payload)).toEqual({ workerId: 11, dpRank: 0 });
  });

  it("usage details from the prefill replace the decode engine's; nothing to patch without usage", () => {
    const details = { cached_tokens: 96 };
    expect(
      withPromptTokensDetails(
        { id: 'x', usage: { prompt_tokens: 100, prompt_tokens_details: { cached_tokens: 0 } } },
        details,
      ),
    ).toEqual({ id: 'x', usage: { prompt_tokens: 100, prompt_tokens_details: { cached_tokens: 96 } } });
    expect(withPromptTokensDetails({ id: 'x', choices: [] }, details)).toBeUndefined();
    expect(withPromptTokensDetails('[DONE]', details)).toBeUndefined();
  });
});
