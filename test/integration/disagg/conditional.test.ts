/**
 * Conditional disaggregation over real sockets: `kvgate serve` in front of a vLLM-protocol mocker prefill engine and
 * a mocker engine that can serve alone (kv_both) in the decode pool, the model's `disagg_policy` an input-length
 * bound. A short prompt is served whole on the decode worker, a long one goes through the prefill worker; the
 * decision is named in the `x-kvgate-disagg` header and counted by decision and reason.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMockerCli, startServeCli } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const FAST = ['--speedup', '1000', '--model', MODEL, '--tokenizer', 'demo'];
const BOUND = 256;

describe('disagg_policy input_length through kvgate serve', () => {
  let suite: MockerSuite;
  let url: string;

  beforeAll(async () => {
    suite = await startMockerSuite('conditional-disagg', [...FAST, '--mode', 'prefill'], 1);
    const d = await startMockerCli(FAST, 1);
    suite.procs.push(d.proc);
    const p = suite.engines[0]!;
    const e = d.engines[0]!;
    const config = serveConfig(MODEL, [
      `disagg_policy: { mode: input_length, min_input_tokens: ${BOUND} }`,
      'workers:',
      `  - { id: 1, role: prefill, url: "${p.url}", kv_events: "${p.kv_events[0]}" }`,
      `  - { id: 2, role: decode, serves_aggregated: true, url: "${e.url}", kv_events: "${e.kv_events[0]}" }`,
    ]);
    const gw = await startServeCli(suite.write('kvgate.yaml', config));
    suite.procs.push(gw.proc);
    url = gw.url;
  }, 120_000);
  afterAll(async () => {
    await suite?.stop();
  });

  const complete = (tokens: number): Promise<Response> =>
    fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: Array.from({ length: tokens }, (_, i) => 10 + i), max_tokens: 4 }),
    });

  it('serves a prompt under the bound whole on the decode worker, and one at the bound through the prefill worker', async () => {
    const short = await complete(BOUND - 1);
    expect(short.status).toBe(200);
    expect(short.headers.get('x-kvgate-disagg')).toBe('aggregated; reason=short_input');
    expect(short.headers.get('x-kvgate-worker')).toBe('2');
    expect(short.headers.get('x-kvgate-prefill-worker')).toBeNull();
    await short.json();

    const long = await complete(BOUND);
    expect(long.status).toBe(200);
    expect(long.headers.get('x-kvgate-disagg')).toBe('disaggregated; reason=long_input');
    expect(long.headers.get('x-kvgate-prefill-worker')).toBe('1');
    expect(long.headers.get('x-kvgate-worker')).toBe('2');
    await long.json();

    const decisions = (decision: string, reason: string): Promise<number> =>
      metric(url, 'kvgate_router_disagg_decisions_total', { decision, reason });
    expect(await decisions('aggregated', 'short_input')).toBe(1);
    expect(await decisions('disaggregated', 'long_input')).toBe(1);
  });

  it("/v1/route's prefill_worker is filled, in worker's shape, for every request that has a prefill leg", async () => {
    const route = async (tokens: number): Promise<Record<string, unknown>> => {
      const res = await fetch(`${url}/v1/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          prompt: Array.from({ length: tokens }, (_, i) => 10 + i),
          return_token_ids: false,
        }),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as Record<string, unknown>;
    };
    const long = await route(BOUND);
    expect(long).toMatchObject({
      worker: { worker_id: 2, dp_rank: 0 },
      prefill_worker: { worker_id: 1, dp_rank: 0 },
      worker_id: { prefill_worker_id: 1, prefill_dp_rank: 0, decode_worker_id: 2, decode_dp_rank: 0 },
    });
    expect(Object.keys(long.prefill_worker as object)).toEqual(Object.keys(long.worker as object));
    // Served whole: no prefill leg, so no prefill_worker; Dynamo's worker_id names the one worker in both slots.
    const short = await route(BOUND - 1);
    expect(short).toMatchObject({
      worker: { worker_id: 2, dp_rank: 0 },
      prefill_worker: null,
      worker_id: { prefill_worker_id: 2, prefill_dp_rank: 0, decode_worker_id: 2, decode_dp_rank: 0 },
    });
  });
});
