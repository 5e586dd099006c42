/**
 * Issue 5, point 3: the prefill router's lifecycle with real engines. Prefill
 * engines are killed and restarted; the registry follows through the health
 * prober; requests fall back to aggregated decode (or fail under
 * enforce_disagg), the model's listing follows canServe(), and disaggregated
 * service resumes without restarting anything in kvgate.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { HealthProber } from '../../../src/discovery/index.js';
import { isKvgateError } from '../../../src/errors/index.js';
import { ModelRouter, makeRouterContext } from '../../../src/routing/index.js';
import {
  BLOCK,
  MODEL,
  booked,
  drain,
  legsOf,
  prepare,
  randomTokens,
  startDisaggFleet,
  type DisaggFleet,
} from './fleet.js';
import { startGateway, type TestGateway } from './gateway.js';

async function listed(gw: TestGateway): Promise<boolean> {
  const res = await fetch(`${gw.url}/v1/models`);
  const json = (await res.json()) as { data: { id: string }[] };
  return json.data.some((m) => m.id === MODEL);
}

async function complete(
  gw: TestGateway,
): Promise<{ status: number; code: string | undefined; prefill: string | null }> {
  const res = await fetch(`${gw.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'The prefill pool came and went', max_tokens: 3 }),
  });
  const json = (await res.json()) as { error?: { code?: string } };
  return { status: res.status, code: json.error?.code, prefill: res.headers.get('x-kvgate-prefill-worker') };
}

describe('vllm: prefill engines killed and restarted', () => {
  let f: DisaggFleet;
  let strict: ModelRouter;
  let gwLenient: TestGateway;
  let gwStrict: TestGateway;
  let prober: HealthProber;
  const rng = seededRng(31);

  beforeAll(async () => {
    // Decode engines that can also serve alone (vLLM's kv_both), so the lenient router can fall back.
    f = await startDisaggFleet({ engine: 'vllm', prefill: 2, decode: 2, decodeMode: 'aggregated' });
    strict = new ModelRouter(
      {
        model: MODEL,
        mode: 'kv',
        blockSize: BLOCK,
        registry: f.registry,
        engine: f.rec.engine,
        tickIntervalMs: 0,
        enforceDisagg: true,
      },
      makeRouterContext({ rng: seededRng(8) }),
    );
    const workers = [...f.prefillWorkers, ...f.decodeWorkers];
    gwLenient = await startGateway(f.router, workers, f.metrics);
    gwStrict = await startGateway(strict, workers, f.metrics, true);
    prober = new HealthProber(f.registry, { unhealthyAfter: 1, timeoutMs: 1000 });
  });
  afterAll(async () => {
    prober?.close();
    await gwLenient?.close();
    await gwStrict?.close();
    await strict?.close();
    await f?.close();
  });

  it('serves disaggregated while prefill engines are up', async () => {
    expect(f.router.prefill.state).toBe('active');
    expect(strict.prefill.state).toBe('active');
    expect([f.router.canServe(), strict.canServe()]).toEqual([true, true]);
    expect([await listed(gwLenient), await listed(gwStrict)]).toEqual([true, true]);
    for (const gw of [gwLenient, gwStrict]) {
      const r = await complete(gw);
      expect(r.status).toBe(200);
      expect(Number(r.prefill)).toBeGreaterThanOrEqual(101);
    }
  });

  it('all prefill engines dead: the lenient model falls back to aggregated decode, the strict one is refused and unlisted', async () => {
    await Promise.all(f.prefill.map((m) => m.crash()));
    await prober.probeAll();
    expect(f.registry.available(MODEL, ['prefill'])).toHaveLength(0);
    expect(f.router.prefill.state).toBe('inactive');
    expect(strict.prefill.state).toBe('inactive');
    expect([f.router.canServe(), strict.canServe()]).toEqual([true, false]);
    expect([await listed(gwLenient), await listed(gwStrict)]).toEqual([true, false]);

    // Lenient: aggregated on a decode worker, no handoff fields, no prefill header.
    const id = 'fallback-1';
    const res = await f.router.route(prepare(randomTokens(rng, 50), { requestId: id, maxTokens: 4 }));
    expect(res.status).toBe(200);
    expect(res.prefillWorker).toBeUndefined();
    expect((await drain(res)).usage?.completion_tokens).toBe(4);
    const legs = legsOf(f.rec, id);
    expect(legs.prefill).toHaveLength(0);
    expect(legs.decode).toHaveLength(1);
    expect(legs.decode[0]!.body).not.toHaveProperty('kv_transfer_params');
    const lenient = await complete(gwLenient);
    expect(lenient.status).toBe(200);
    expect(lenient.prefill).toBeNull();
    expect(await f.metrics.text()).toMatch(/kvgate_router_disagg_fallbacks_total\{model="mock-model"\} [2-9]/);

    // Strict: the frontend refuses the unlisted model; the router says why if asked directly.
    const refused = await complete(gwStrict);
    expect(refused.status).toBe(503);
    // issue 12 item 12: the client gets the code the README documents, not a generic "unavailable".
    expect(refused.code).toBe('KVG_ERR_PREFILL_NOT_ACTIVATED');
    await expect(strict.route(prepare(randomTokens(rng, 50)))).rejects.toSatisfy(
      (e: unknown) =>
        isKvgateError(e, 'KVG_ERR_PREFILL_NOT_ACTIVATED') && e.statusCode === 503 && /enforce_disagg/.test(e.message),
    );
  });

  it('a prefill engine restarts: both models serve disaggregated again, with nothing in kvgate restarted', async () => {
    await f.prefill[0]!.restart();
    await prober.probeAll();
    expect(f.router.prefill.state).toBe('active');
    expect(strict.prefill.state).toBe('active');
    expect(f.router.prefill.activations).toBe(2);
    expect([f.router.canServe(), strict.canServe()]).toEqual([true, true]);
    expect(await listed(gwStrict)).toBe(true);
    for (const router of [f.router, strict]) {
      const id = `resumed-${router === strict ? 'strict' : 'lenient'}`;
      const res = await router.route(prepare(randomTokens(rng, 60), { requestId: id, maxTokens: 3 }));
      expect(res.prefillWorker?.workerId).toBe(f.prefillWorkers[0]!.id);
      expect((await drain(res)).usage?.completion_tokens).toBe(3);
      const legs = legsOf(f.rec, id);
      expect(legs.prefill[0]!.body).toMatchObject({ max_tokens: 1 });
      expect(legs.decode[0]!.body['kv_transfer_params']).toEqual(
        (legs.prefill[0]!.json as Record<string, unknown>)['kv_transfer_params'],
      );
    }
    expect((await complete(gwStrict)).status).toBe(200);
    await f.prefill[1]!.restart();
    await prober.probeAll();
    expect(f.router.prefill.pool!.size).toBe(2);
    for (const router of [f.router, strict]) {
      expect(booked(router.prefill.pool!)).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
      expect(booked(router.decode)).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
    }
  });
});

describe('sglang under enforce_disagg: prefill engine killed and restarted', () => {
  let f: DisaggFleet;
  let prober: HealthProber;

  beforeAll(async () => {
    f = await startDisaggFleet({ engine: 'sglang', prefill: 1, decode: 1, router: { enforceDisagg: true } });
    prober = new HealthProber(f.registry, { unhealthyAfter: 1, timeoutMs: 1000 });
  });
  afterAll(async () => {
    prober?.close();
    await f?.close();
  });

  it('fails clearly while the prefill engine is gone and resumes the rendezvous when it is back', async () => {
    const rng = seededRng(41);
    await drain(await f.router.route(prepare(randomTokens(rng, 40))));
    await f.prefill[0]!.crash();
    await prober.probeAll();
    expect(f.router.canServe()).toBe(false);
    await expect(f.router.route(prepare(randomTokens(rng, 40)))).rejects.toSatisfy((e: unknown) =>
      isKvgateError(e, 'KVG_ERR_PREFILL_NOT_ACTIVATED'),
    );
    await f.prefill[0]!.restart();
    await prober.probeAll();
    expect(f.router.canServe()).toBe(true);
    const id = 'sglang-resumed';
    const res = await f.router.route(prepare(randomTokens(rng, 40), { requestId: id, maxTokens: 5 }));
    expect((await drain(res)).usage?.completion_tokens).toBe(5);
    const { prefill, decode } = legsOf(f.rec, id);
    expect(decode[0]!.body['bootstrap_room']).toBe(prefill[0]!.body['bootstrap_room']);
    expect(decode[0]!.body['bootstrap_port']).toBe(f.prefill[0]!.bootstrapPort);
    expect(f.prefill[0]!.stats().bootstrapPending).toBe(0);
    expect(booked(f.pool())).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
    expect(booked(f.router.decode)).toMatchObject({ requests: 0, inflight: 0, tracked: 0 });
  });
});

// issue 12 item 10: without enforce_disagg, decode-only engines cannot take over when the prefill pool is gone.
describe('sglang decode-only engines without enforce_disagg: prefill engines killed', () => {
  let f: DisaggFleet;
  let gw: TestGateway;
  let prober: HealthProber;

  beforeAll(async () => {
    f = await startDisaggFleet({ engine: 'sglang', prefill: 1, decode: 2 });
    gw = await startGateway(f.router, [...f.prefillWorkers, ...f.decodeWorkers], f.metrics);
    prober = new HealthProber(f.registry, { unhealthyAfter: 1, timeoutMs: 1000 });
  });
  afterAll(async () => {
    prober?.close();
    await gw?.close();
    await f?.close();
  });

  it("the model is not ready and answers a clear 503 instead of the decode engine's 400; it resumes with a prefill engine", async () => {
    expect((await complete(gw)).status).toBe(200);
    await f.prefill[0]!.crash();
    await prober.probeAll();
    expect(f.router.prefill.state).toBe('inactive');
    expect(await listed(gw)).toBe(false);
    expect((await fetch(`${gw.url}/ready`)).status).toBe(503);
    const res = await fetch(`${gw.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'The prefill pool is gone', max_tokens: 3 }),
    });
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(res.status).toBe(503);
    expect(body.error.code).toBe('KVG_ERR_PREFILL_NOT_ACTIVATED');
    expect(body.error.message).toMatch(/no prefill worker is available and its decode workers are decode-only/);
    // Nothing reached a decode engine.
    expect(f.rec.sent.filter((l) => l.role === 'decode' && l.body['bootstrap_room'] === undefined)).toHaveLength(0);
    await f.prefill[0]!.restart();
    await prober.probeAll();
    expect(await listed(gw)).toBe(true);
    expect((await complete(gw)).status).toBe(200);
  });
});
