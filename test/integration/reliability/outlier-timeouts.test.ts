/**
 * Outlier ejection of an engine that takes requests and produces nothing, with real processes: `kvgate serve`
 * (round robin, short engine timeouts) in front of a healthy engine and a wedged one (a real HTTP server whose
 * /health passes, as a vLLM whose engine loop hangs answers its probe). The wedged engine either never writes its
 * response head, or writes the SSE head at once and then nothing (a vLLM stream's head goes out before its first
 * token). Every request it gets fails its first-byte deadline and is retried on the healthy engine, so each client
 * still gets its answer; after `consecutive_errors` such timeouts in a row the wedged worker is ejected and no
 * request waits on it any more.
 *
 * Before the fix: first-byte timeouts counted nothing toward the worker's ejection, and a stream's head counted
 * as a success, so the wedged worker took its share of traffic forever, each request waiting out the deadline.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  answerEngineProbe,
  completionChunk,
  sseEvent,
  sseHead,
  startHttpEngine,
  type HttpEngine,
  type RecordedRequest,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfigObject, type ServedGateway } from '../../helpers/serve-process.js';

const MODEL = 'wedge-model';
const FIRST_BYTE_MS = 400;
const CONSECUTIVE = 2;

function healthy(req: RecordedRequest, res: ServerResponse): void {
  if (answerEngineProbe(req, res, MODEL)) return;
  sseHead(res);
  res.write(sseEvent(completionChunk('ok', 'stop')));
  res.end(sseEvent('[DONE]'));
}

/** Takes the request and never answers it; `head`: writes the SSE head first. */
function wedged(head: boolean) {
  return (req: RecordedRequest, res: ServerResponse): void => {
    if (answerEngineProbe(req, res, MODEL)) return;
    if (head) sseHead(res);
  };
}

describe.each([
  { what: 'never writes its response head', head: false },
  { what: 'writes its SSE head, then nothing', head: true },
])('a wedged engine that $what', ({ head }) => {
  const engines: HttpEngine[] = [];
  let gw: ServedGateway;

  beforeAll(async () => {
    engines.push(await startHttpEngine(wedged(head)), await startHttpEngine(healthy));
    gw = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      health: {
        interval_ms: 200,
        max_ejected_percent: 50,
        outlier_detection: { consecutive_errors: CONSECUTIVE, base_ejection_ms: 60_000 },
      },
      engine_timeouts: { first_byte_timeout_ms: FIRST_BYTE_MS, stream_idle_timeout_ms: FIRST_BYTE_MS },
      models: [
        {
          name: MODEL,
          block_size: 16,
          tokenizer: 'none',
          router_mode: 'round-robin',
          panic_threshold_percent: 0,
          workers: engines.map((e, i) => ({ id: i + 1, url: e.url })),
        },
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await Promise.all(engines.map((e) => e.close()));
  });

  const posts = (e: HttpEngine): number => e.requests.filter((r) => r.method === 'POST').length;

  it('is ejected after consecutive_errors first-byte timeouts; its requests are answered elsewhere meanwhile', async () => {
    for (let i = 0; i < 3 * CONSECUTIVE; i++) {
      const res = await fetch(`${gw.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: `request ${i}`, max_tokens: 4, stream: true }),
      });
      expect(res.status).toBe(200);
      expect(await res.text()).toContain('[DONE]');
    }
    expect(await metric(gw.url, 'kvgate_router_engine_timeouts_total', { kind: 'first_byte' })).toBe(CONSECUTIVE);
    expect(
      await metric(gw.url, 'kvgate_worker_ejections_total', { worker_id: '1', reason: 'consecutive_errors' }),
    ).toBe(1);
    // Once ejected it gets no more requests; its probe still passes.
    expect(posts(engines[0]!)).toBe(CONSECUTIVE);
    expect(posts(engines[1]!)).toBe(3 * CONSECUTIVE);
  }, 30_000);
});
