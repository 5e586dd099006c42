/**
 * Locality lost: a request sent away from the worker with the most cached
 * blocks of its prompt (load won over cache) is counted, with the blocks it
 * gave up. `kvgate serve` in front of two `kvgate mocker` engines (real
 * processes, HTTP and ZMQ KV events): a prompt is cached on worker 1, worker 1
 * is then loaded with long pinned streams, and the same prompt again is
 * forced to worker 2.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import { distinctWords, startKvGatewaySuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';

describe('the locality-lost metric', () => {
  let suite: MockerSuite;
  let url: string;
  const loaders: AbortController[] = [];

  const post = async (body: Record<string, unknown>, signal?: AbortSignal): Promise<Response> =>
    fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, ...body }),
      ...(signal !== undefined ? { signal } : {}),
    });
  const route = async (messages: unknown, id: number): Promise<Record<string, unknown>> =>
    (await (
      await fetch(`${url}/v1/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages, nvext: { backend_instance_id: id } }),
      })
    ).json()) as Record<string, unknown>;

  beforeAll(async () => {
    ({ suite, url } = await startKvGatewaySuite('locality-lost', MODEL, 2));
  }, 60_000);

  afterAll(async () => {
    for (const c of loaders) c.abort();
    await suite?.stop();
  });

  it('counts a request moved off the best-overlap worker, and the blocks that cost', async () => {
    const messages = [{ role: 'user', content: distinctWords('ctx', 300) }];
    // The prompt is cached on worker 1 (its KV events reach the index).
    expect((await post({ messages, max_tokens: 1, nvext: { backend_instance_id: 1 } })).status).toBe(200);
    let cached = 0;
    await until(async () => (cached = Number((await route(messages, 1)).overlap_blocks)) > 0, 'prompt indexed on 1');
    const labels = { model: MODEL, worker_type: 'aggregated' };
    expect(await metric(url, 'kvgate_router_locality_lost_blocks_total')).toBe(0);
    // Worker 1 is loaded with long streams pinned there: their active blocks outweigh the cached prompt.
    for (let i = 0; i < 4; i++) {
      const c = new AbortController();
      loaders.push(c);
      const res = await post(
        {
          messages: [{ role: 'user', content: distinctWords(`load${i}`, 600) }],
          max_tokens: 20_000,
          ignore_eos: true,
          stream: true,
          nvext: { backend_instance_id: 1 },
        },
        c.signal,
      );
      expect(res.status).toBe(200);
    }
    const res = await post({ messages, max_tokens: 1 });
    expect(res.status).toBe(200);
    await res.text();
    const moved = await metric(url, 'kvgate_router_non_max_overlap_selections_total', labels);
    expect(moved).toBe(1);
    expect(await metric(url, 'kvgate_router_locality_lost_blocks_total', labels)).toBe(cached);
  }, 60_000);
});
