/**
 * Issue 5, point 4: each failure path of disaggregated serving against real
 * engines, and after each one the bookkeeping of both pools is back to zero:
 * prefill engine error, missing kv_transfer_params, SGLang rendezvous timeout
 * (the other leg cancelled), client disconnect during prefill (the prefill is
 * not cancelled), prefill backpressure (503 with the queued/max ISL figures).
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { KvgateError, isKvgateError } from '../../../src/errors/index.js';
import { drain, errorOf, legsOf, poolsAtZero, prepare, randomTokens, fleetsPerTest, until } from './fleet.js';

const fleet = fleetsPerTest();

const rng = seededRng(77);

describe('prefill engine error', () => {
  it('vLLM: the request fails with KVG_ERR_PREFILL_FAILED and is not retried aggregated', async () => {
    const f = await fleet({ engine: 'vllm', prefillMocker: { faults: { errorRate: 1 } } });
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: 'perr-v' })));
    expect(e.code).toBe('KVG_ERR_PREFILL_FAILED');
    expect(e.statusCode).toBe(502);
    expect(e.message).toMatch(/prefill on worker 101 .*failed: .*500/);
    expect(e.detail).toMatchObject({ workerId: 101, cause: 'KVG_ERR_ENGINE_FAILED' });
    expect(legsOf(f.rec, 'perr-v').decode).toHaveLength(0);
    expect(await f.metrics.text()).toMatch(
      /kvgate_router_disagg_requests_total\{model="mock-model",prefill_worker_id="101",handoff="sync",outcome="prefill_failed"\} 1/,
    );
    await poolsAtZero(f);
  });

  it('SGLang: the request fails and its decode half is cancelled, not left at the rendezvous', async () => {
    const f = await fleet({ engine: 'sglang', prefillMocker: { faults: { errorRate: 1 } } });
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: 'perr-s' })));
    expect(e.code).toBe('KVG_ERR_PREFILL_FAILED');
    const decode = legsOf(f.rec, 'perr-s').decode;
    // Either the failure beat the decode dispatch, or the decode leg was cancelled.
    for (const d of decode) await until(() => d.answeredAt !== undefined, 'the decode leg to end');
    for (const d of decode) expect(isKvgateError(d.error, 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    await until(() => f.prefill[0]!.stats().bootstrapPending === 0, 'the rendezvous table to empty');
    await poolsAtZero(f);
  });
});

describe('unreachable prefill worker', () => {
  for (const engine of ['vllm', 'sglang'] as const) {
    it(`${engine}: nothing was sent, so the request runs again on another prefill worker`, async () => {
      const f = await fleet({ engine, prefill: 2 });
      const [dead, alive] = f.prefillWorkers;
      // Make the soon-dead worker the prefill router's favourite: it caches the prompt's prefix.
      const doc = randomTokens(rng, 8 * 16);
      await drain(
        await f.router.route(prepare([...doc, 1], { hints: { annotations: [], prefillWorkerId: dead!.id } })),
      );
      const index = f.pool().kvRouter!.index;
      await until(() => index.findMatches(prepare(doc).hashes.local).count > 0, 'the prefix in the prefill index');
      await f.mockerOf(dead!.id).crash(); // the registry has not noticed
      // Once the client has seen its idle keep-alive sockets close, a new request cannot even connect.
      await until(
        () => f.rec.engine.stats().find((s) => s.worker === dead!.url)?.connected === 0,
        "the dead worker's sockets to close",
      );
      const res = await f.router.route(prepare([...doc, 2], { requestId: `retry-${engine}` }));
      expect(res.prefillWorker?.workerId).toBe(alive!.id);
      expect((await drain(res)).usage?.completion_tokens).toBe(4);
      const legs = legsOf(f.rec, `retry-${engine}`);
      expect(legs.prefill.map((l) => l.workerId)).toEqual([dead!.id, alive!.id]);
      expect(isKvgateError(legs.prefill[0]!.error, 'KVG_ERR_ENGINE_UNREACHABLE')).toBe(true);
      expect(legs.decode).toHaveLength(1);
      if (engine === 'sglang') expect(legs.decode[0]!.body['bootstrap_port']).toBe(alive!.bootstrap!.port);
      expect(await f.metrics.text()).toMatch(
        /kvgate_router_retries_total\{model="mock-model",reason="prefill_unreachable"\} 1/,
      );
      // Pinned to the dead worker: no second chance.
      const e = await errorOf(
        f.router.route(prepare([...doc, 3], { hints: { annotations: [], prefillWorkerId: dead!.id } })),
      );
      expect(e.code).toBe('KVG_ERR_PREFILL_FAILED');
      expect(e.detail).toMatchObject({ workerId: dead!.id, cause: 'KVG_ERR_ENGINE_UNREACHABLE' });
      await poolsAtZero(f);
    });
  }
});

describe('missing disaggregated params', () => {
  it('vLLM: a prefill answer without kv_transfer_params is KVG_ERR_NO_DISAGGREGATED_PARAMS; decode never runs', async () => {
    // An engine that ignores kv_transfer_params (no NIXL connector) registered as a vLLM prefill worker.
    const f = await fleet({ engine: 'vllm', prefillMocker: { engine: 'sglang', mode: 'aggregated' } });
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: 'noparams' })));
    expect(e.code).toBe('KVG_ERR_NO_DISAGGREGATED_PARAMS');
    expect(e.statusCode).toBe(502);
    expect(e.message).toMatch(/from 101 .* has no kv_transfer_params/);
    const legs = legsOf(f.rec, 'noparams');
    expect(legs.prefill).toHaveLength(1);
    expect(legs.decode).toHaveLength(0);
    await poolsAtZero(f);
  });
});

describe('SGLang rendezvous timeout', () => {
  it('the prefill side times out (decode never connected): the decode leg is cancelled at once', async () => {
    const f = await fleet({ engine: 'sglang', prefillMocker: { bootstrapTimeoutMs: 300 } });
    f.decode[0]!.setFaults({ hang: true }); // takes the request, never reaches the bootstrap server
    const t0 = performance.now();
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: 'rdv-p' })));
    expect(e.code).toBe('KVG_ERR_PREFILL_FAILED');
    expect(e.message).toMatch(/504/);
    // Cancelled right after the prefill's timeout, not after the decode's own (minutes-long) header timeout.
    expect(performance.now() - t0).toBeLessThan(5000);
    const d = legsOf(f.rec, 'rdv-p').decode[0]!;
    expect(d.acceptedAt).toBeDefined();
    expect(isKvgateError(d.error, 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    await poolsAtZero(f);
  });

  it('the decode side times out (prefill never arrived): the prefill leg is cancelled', async () => {
    const f = await fleet({ engine: 'sglang', prefillMocker: { bootstrapTimeoutMs: 300 } });
    f.prefill[0]!.setFaults({ hang: true }); // takes the request, never registers at its bootstrap server
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 80), { requestId: 'rdv-d' })));
    // One code per cause: a rendezvous timeout is the prefill phase's failure whichever side timed out.
    expect(e.code).toBe('KVG_ERR_PREFILL_FAILED');
    expect(e.detail).toMatchObject({ workerId: 101, cause: 'KVG_ERR_ENGINE_FAILED' });
    expect(e.message).toMatch(/504.*no prefill request arrived/);
    const p = legsOf(f.rec, 'rdv-d').prefill[0]!;
    await until(() => p.answeredAt !== undefined, 'the prefill leg to end');
    expect(isKvgateError(p.error, 'KVG_ERR_CLIENT_ABORTED')).toBe(true);
    await poolsAtZero(f);
    expect(await f.metrics.text()).toMatch(/handoff="bootstrap",outcome="prefill_failed"\} 1/);
  });
});

describe('client disconnect during prefill', () => {
  it('vLLM: the prefill runs to completion and decode still consumes its KV, with one token', async () => {
    const f = await fleet({ engine: 'vllm' });
    const p = f.prefill[0]!;
    const d = f.decode[0]!;
    p.setFaults({ hang: true });
    const ac = new AbortController();
    const routed = f.router.route(
      prepare(randomTokens(rng, 120), { requestId: 'gone-v', signal: ac.signal, maxTokens: 400 }),
    );
    const leg = (): ReturnType<typeof legsOf> => legsOf(f.rec, 'gone-v');
    await until(() => leg().prefill[0]?.acceptedAt !== undefined, 'the prefill to reach its engine');
    ac.abort(new KvgateError('KVG_ERR_CLIENT_ABORTED', 'client went away'));
    const e = await errorOf(routed);
    expect(e.code).toBe('KVG_ERR_CLIENT_ABORTED');
    // The prefill was not cancelled: it is still on the engine, and finishes once the engine resumes.
    expect(leg().prefill[0]!.error).toBeUndefined();
    p.setFaults({ hang: false });
    await until(() => leg().prefill[0]!.answeredAt !== undefined, 'the prefill answer');
    expect((leg().prefill[0]!.json as Record<string, unknown>)['kv_transfer_params']).toMatchObject({
      do_remote_prefill: true,
    });
    // Decode was routed anyway, cut to one token, and pulled the blocks (the prefill engine holds none).
    await until(() => leg().decode[0]?.answeredAt !== undefined, 'the decode leg');
    expect(leg().decode[0]!.body).toMatchObject({ max_tokens: 1, stream: false });
    expect(leg().decode[0]!.body['kv_transfer_params']).toEqual(
      (leg().prefill[0]!.json as Record<string, unknown>)['kv_transfer_params'],
    );
    await until(() => p.stats().ranks[0]!.heldRequests === 0, 'the prefill engine to release its blocks');
    await until(
      () => d.stats().ranks[0]!.running === 0 && d.stats().ranks[0]!.waiting === 0,
      'the decode engine to drop the request',
    );
    expect(d.stats().ranks[0]!.generationTokens).toBeGreaterThan(0);
    expect(d.stats().ranks[0]!.generationTokens).toBeLessThan(400);
    await poolsAtZero(f);
  });

  it('SGLang: the prefill is not cancelled, the pair completes its rendezvous, then decode is cancelled', async () => {
    const f = await fleet({ engine: 'sglang' });
    const p = f.prefill[0]!;
    const d = f.decode[0]!;
    p.setFaults({ hang: true });
    const ac = new AbortController();
    const routed = f.router.route(
      prepare(randomTokens(rng, 120), { requestId: 'gone-s', signal: ac.signal, maxTokens: 400 }),
    );
    const leg = (): ReturnType<typeof legsOf> => legsOf(f.rec, 'gone-s');
    await until(() => leg().decode[0]?.acceptedAt !== undefined, 'both legs on their engines');
    ac.abort(new KvgateError('KVG_ERR_CLIENT_ABORTED', 'client went away'));
    expect((await errorOf(routed)).code).toBe('KVG_ERR_CLIENT_ABORTED');
    expect(leg().prefill[0]!.error).toBeUndefined();
    expect(leg().decode[0]!.error).toBeUndefined();
    p.setFaults({ hang: false });
    await until(() => leg().prefill[0]!.answeredAt !== undefined, 'the prefill answer');
    expect(leg().prefill[0]!.error).toBeUndefined();
    await until(
      () => d.stats().ranks[0]!.running === 0 && d.stats().ranks[0]!.waiting === 0,
      'the decode engine to drop the request',
    );
    expect(d.stats().ranks[0]!.generationTokens).toBeGreaterThan(0);
    expect(d.stats().ranks[0]!.generationTokens).toBeLessThan(400);
    expect(p.stats().bootstrapPending).toBe(0);
    await poolsAtZero(f);
  });
});

describe('prefill backpressure', () => {
  it('a full prefill queue rejects with 503 and the queued / max ISL figures; queued work completes', async () => {
    const f = await fleet({
      engine: 'vllm',
      prefillWorker: { maxNumBatchedTokens: 64 },
      router: { routerConfig: { routerQueueThreshold: 1, routerQueueByIncomingMissingIsl: [[0, 100]] } },
    });
    f.prefill[0]!.setFaults({ hang: true });
    const first = f.router.route(prepare(randomTokens(rng, 200), { requestId: 'bp-1' }));
    await until(() => legsOf(f.rec, 'bp-1').prefill[0]?.acceptedAt !== undefined, 'the first prefill on its engine');
    const second = f.router.route(prepare(randomTokens(rng, 200), { requestId: 'bp-2' }));
    await until(() => f.pool().kvRouter!.pendingRequests === 1, 'the second prefill parked');
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 200), { requestId: 'bp-3' })));
    expect(e.code).toBe('KVG_ERR_BACKPRESSURE');
    expect(e.statusCode).toBe(503);
    expect(e.detail).toMatchObject({ queuedIslTokens: 200, maxQueuedIslTokens: 100 });
    expect(e.message).toMatch(/200 ISL tokens queued, cap 100/);
    expect(legsOf(f.rec, 'bp-3').prefill).toHaveLength(0);
    expect(legsOf(f.rec, 'bp-3').decode).toHaveLength(0);
    expect(await f.metrics.text()).toMatch(
      /kvgate_router_backpressure_total\{model="mock-model",worker_type="prefill"\} 1/,
    );
    f.prefill[0]!.setFaults({ hang: false });
    for (const r of [first, second]) expect((await drain(await r)).usage?.completion_tokens).toBe(4);
    await poolsAtZero(f);
  });

  it('a tenant shed by the full prefill queue gets 529 KVG_ERR_QUEUE_SHED (not a prefill failure); nothing sent', async () => {
    const f = await fleet({
      engine: 'vllm',
      prefillWorker: { maxNumBatchedTokens: 64 },
      router: { routerConfig: { routerQueueThreshold: 1 } },
    });
    const hints = {
      annotations: [],
      tenant: { tenant: 'noisy', class: 'free', priority: 0, weight: 1, queueLimitPerWorker: 1 },
    };
    f.prefill[0]!.setFaults({ hang: true });
    const first = f.router.route(prepare(randomTokens(rng, 200), { requestId: 'shed-1', hints }));
    await until(() => legsOf(f.rec, 'shed-1').prefill[0]?.acceptedAt !== undefined, 'the first prefill on its engine');
    const second = f.router.route(prepare(randomTokens(rng, 200), { requestId: 'shed-2', hints }));
    await until(() => f.pool().kvRouter!.pendingRequests === 1, 'the second prefill parked');
    const e = await errorOf(f.router.route(prepare(randomTokens(rng, 200), { requestId: 'shed-3', hints })));
    // Before: wrapped as a prefill engine failure (502 KVG_ERR_PREFILL_FAILED), which no prefill ever had.
    expect(e.code).toBe('KVG_ERR_QUEUE_SHED');
    expect(e.statusCode).toBe(529);
    expect(legsOf(f.rec, 'shed-3').prefill).toHaveLength(0);
    expect(legsOf(f.rec, 'shed-3').decode).toHaveLength(0);
    f.prefill[0]!.setFaults({ hang: false });
    for (const r of [first, second]) expect((await drain(await r)).usage?.completion_tokens).toBe(4);
    await poolsAtZero(f);
  });
});
