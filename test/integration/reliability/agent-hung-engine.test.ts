/**
 * Non-streaming Anthropic Messages and OpenAI Responses requests on a hung engine get the bounds a non-streaming
 * chat completion gets, with real processes: `kvgate serve` (short `engine_timeouts`, a long request timeout) in
 * front of `kvgate mocker` engines hung through their fault endpoint (`hang`: they take requests and answer
 * nothing). With the hung engine alone, each request ends with the chat's 504 KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT
 * (in Anthropic's shape on /v1/messages) within the first-byte deadline, counted, its booking freed. Beside a
 * healthy engine, each request that went to the hung one is retried there and answered whole, and the hung worker
 * is ejected after `consecutive_errors` missed deadlines.
 *
 * Before the fix an agent API's non-streaming request was sent to the engine unstreamed, and an unstreamed
 * answer's first byte comes when its generation is done, so no engine deadline bounded it: the client (and its
 * slot) waited for `limits.request_timeout_ms` (10 minutes by default), nothing was retried, and the worker was
 * never counted as failing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import {
  serveConfigObject,
  startMockerEngine,
  stopServed,
  type ServedGateway,
  type ServedProc,
} from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

const MODEL = 'hung-agent-model';
const FIRST_BYTE_MS = 600;
const REQUEST_TIMEOUT_MS = 10_000;
const CONSECUTIVE = 2;

/** The three non-streaming requests: the chat completion whose bounds the agent APIs must share, and theirs. */
const REQUESTS: [string, string, Record<string, unknown>][] = [
  ['chat', '/v1/chat/completions', { messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 16 }],
  ['messages', '/v1/messages', { messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 16 }],
  ['responses', '/v1/responses', { input: 'Hi.', max_output_tokens: 16 }],
];

async function startMockers(n: number): Promise<{ procs: ServedProc[]; urls: string[] }> {
  const started = await Promise.all(
    Array.from({ length: n }, () => startMockerEngine(['--no-kv-events', '--model', MODEL, '--tokenizer', 'demo'])),
  );
  return { procs: started.map((m) => m.proc), urls: started.map((m) => String(m.engine.url)) };
}

async function hang(engineUrl: string): Promise<void> {
  const res = await fetch(`${engineUrl}/admin/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ hang: true }),
  });
  expect(res.status).toBe(200);
  await res.arrayBuffer();
}

async function post(gw: ServedGateway, path: string, body: Record<string, unknown>) {
  const t0 = performance.now();
  const res = await fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, ...body }),
  });
  const json = (await res.json()) as Record<string, unknown>;
  return { status: res.status, json, ms: performance.now() - t0 };
}

/** The gateway's config over `urls`: round robin, no health probe after the first (a hung mocker's /health hangs). */
function gatewayConfig(urls: readonly string[], consecutiveErrors: number): Record<string, unknown> {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    preprocess: { threads: 0 },
    log: { level: 'info' },
    limits: { request_timeout_ms: REQUEST_TIMEOUT_MS },
    health: {
      interval_ms: 3_600_000,
      max_ejected_percent: 50,
      outlier_detection: { consecutive_errors: consecutiveErrors, base_ejection_ms: 60_000 },
    },
    engine_timeouts: { first_byte_timeout_ms: FIRST_BYTE_MS },
    models: [
      {
        name: MODEL,
        tokenizer: 'demo',
        router_mode: 'round-robin',
        panic_threshold_percent: 0,
        workers: urls.map((url, i) => ({ id: i + 1, url })),
      },
    ],
  };
}

describe('non-streaming agent API requests on a hung engine, alone', () => {
  let procs: ServedProc[] = [];
  let gw: ServedGateway;

  beforeAll(async () => {
    const m = await startMockers(1);
    procs = m.procs;
    gw = await serveConfigObject(gatewayConfig(m.urls, 0));
    await hang(m.urls[0]!);
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await Promise.all(procs.map((p) => stopServed(p)));
  });

  it.each(REQUESTS)(
    "%s: the chat's 504 KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT within the first-byte deadline, counted, booking freed",
    async (what, path, body) => {
      const before = await metric(gw.url, 'kvgate_router_engine_timeouts_total', { kind: 'first_byte' });
      const { status, json, ms } = await post(gw, path, body);
      expect(status, JSON.stringify(json)).toBe(504);
      // Anthropic's error shape on /v1/messages, kvgate's code kept in it; the OpenAI error object elsewhere.
      if (what === 'messages') expect(json).toMatchObject({ type: 'error', error: { type: 'timeout_error' } });
      expect((json['error'] as { code: string }).code).toBe('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT');
      expect(ms).toBeLessThan(FIRST_BYTE_MS + 4_000);
      expect(ms).toBeGreaterThanOrEqual(FIRST_BYTE_MS - 50);
      expect(await metric(gw.url, 'kvgate_router_engine_timeouts_total', { kind: 'first_byte' })).toBe(before + 1);
      await until(async () => (await metric(gw.url, 'kvgate_worker_active_requests')) === 0, 'the booking freed');
    },
    30_000,
  );
});

describe('non-streaming agent API requests on a hung engine beside a healthy one', () => {
  let procs: ServedProc[] = [];
  let gw: ServedGateway;

  beforeAll(async () => {
    const m = await startMockers(2);
    procs = m.procs;
    gw = await serveConfigObject(gatewayConfig(m.urls, CONSECUTIVE));
    await hang(m.urls[0]!);
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await Promise.all(procs.map((p) => stopServed(p)));
  });

  it('each is retried on the healthy engine and answered whole; the hung worker is ejected after consecutive_errors', async () => {
    for (let i = 0; i < 3 * CONSECUTIVE; i++) {
      const [, path, body] = REQUESTS[1 + (i % 2)]!;
      const { status, json } = await post(gw, path, body);
      expect(status, JSON.stringify(json)).toBe(200);
      if (path === '/v1/messages') {
        expect(json).toMatchObject({ type: 'message', role: 'assistant', stop_reason: 'max_tokens' });
        expect((json['usage'] as { output_tokens: number }).output_tokens).toBe(16);
      } else {
        expect(json).toMatchObject({ object: 'response' });
        expect((json['usage'] as { output_tokens: number }).output_tokens).toBe(16);
      }
    }
    expect(await metric(gw.url, 'kvgate_router_engine_timeouts_total', { kind: 'first_byte' })).toBe(CONSECUTIVE);
    expect(await metric(gw.url, 'kvgate_router_retries_total', { reason: 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT' })).toBe(
      CONSECUTIVE,
    );
    expect(
      await metric(gw.url, 'kvgate_worker_ejections_total', { worker_id: '1', reason: 'consecutive_errors' }),
    ).toBe(1);
    await until(async () => (await metric(gw.url, 'kvgate_worker_active_requests')) === 0, 'every booking freed');
  }, 60_000);
});
