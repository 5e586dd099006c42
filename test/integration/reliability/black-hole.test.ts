/**
 * A black-hole engine (it takes every request and never answers, while its /health passes), with real processes:
 * `kvgate serve` with a short first-byte deadline and a long request timeout in front of it. Every kind of
 * request ends within the first-byte deadline with 504 KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT, its booking freed and
 * its connection to the engine closed, whether it streams or not: chat, completions, the one-token answer,
 * embeddings, and Messages and Responses streaming or not (a non-streaming one streams from the engine: see
 * agent-hung-engine.test.ts).
 *
 * Before the fix: an embeddings request (a pooling leg, sent unstreamed) had no first-byte deadline and waited for
 * limits.request_timeout_ms (10 minutes by default) on the engine.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  answerEngineProbe,
  startHttpEngine,
  type HttpEngine,
  type RecordedRequest,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfigObject, type ServedGateway } from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

const MODEL = 'hole-model';
const FIRST_BYTE_MS = 500;
const REQUEST_TIMEOUT_MS = 30_000;

describe('a black-hole engine', () => {
  let engine: HttpEngine;
  let gw: ServedGateway;

  beforeAll(async () => {
    engine = await startHttpEngine((req: RecordedRequest, res: ServerResponse) => {
      answerEngineProbe(req, res, MODEL); // a POST is never answered
    });
    gw = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      limits: { request_timeout_ms: REQUEST_TIMEOUT_MS },
      health: { outlier_detection: { consecutive_errors: 0 } },
      engine_timeouts: { first_byte_timeout_ms: FIRST_BYTE_MS },
      models: [
        {
          name: MODEL,
          block_size: 16,
          tokenizer: 'none',
          router_mode: 'round-robin',
          migration_limit: 0,
          workers: [{ id: 1, url: engine.url }],
        },
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await engine?.close();
  });

  const posts = (): RecordedRequest[] => engine.requests.filter((r) => r.method === 'POST');

  const cases: [string, string, Record<string, unknown>][] = [
    ['chat, streaming', '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], stream: true }],
    ['chat', '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }],
    ['completion, one token', '/v1/completions', { prompt: 'hi', max_tokens: 1 }],
    ['embeddings', '/v1/embeddings', { input: 'hi there' }],
    [
      'messages, streaming',
      '/v1/messages',
      { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, stream: true },
    ],
    ['responses, streaming', '/v1/responses', { input: 'hi', max_output_tokens: 8, stream: true }],
    ['messages', '/v1/messages', { messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }],
    ['responses', '/v1/responses', { input: 'hi', max_output_tokens: 8 }],
  ];

  it.each(cases)(
    '%s: 504 KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT within the deadline, booking and connection freed',
    async (_, path, body) => {
      const before = posts().length;
      const t0 = performance.now();
      const res = await fetch(`${gw.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, ...body }),
      });
      const text = await res.text();
      const ms = performance.now() - t0;
      expect(res.status, text).toBe(504);
      expect(text).toContain('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT');
      expect(ms).toBeLessThan(FIRST_BYTE_MS + 4_000);
      // Sent once (nowhere else to go), and its connection closed: the engine learns the request is gone.
      expect(posts().length).toBe(before + 1);
      await posts().at(-1)!.closed;
      expect(posts().at(-1)!.clientClosed).toBe(true);
      await until(
        async () => (await metric(gw.url, 'kvgate_worker_active_requests', { worker_id: '1' })) === 0,
        'freed',
      );
    },
    30_000,
  );
});
