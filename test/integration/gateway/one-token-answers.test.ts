/**
 * A non-streaming request for one token goes to the engine unstreamed, and the
 * engine's own JSON answer is relayed. `kvgate serve` (a real process, KV mode)
 * in front of two scripted engines (real HTTP servers on real sockets,
 * test/helpers/http-engine.ts) that record what they receive and answer a
 * stream or a JSON body as asked:
 *
 * - `stream: false` (or no `stream`) with `max_tokens: 1`: the engine is asked
 *   for no stream and no usage chunk; the client gets the engine's answer byte
 *   for byte with kvgate's worker headers, and the router still books and
 *   frees the request, observes TTFT and the output length, and compares the
 *   engine's `prompt_tokens_details.cached_tokens` with its prediction;
 * - longer non-streaming requests and streaming ones keep the streamed leg;
 * - an engine that resets the connection before answering is a failure before
 *   any answer byte: the request is retried on the other worker.
 *
 * Before the change every generating leg was streamed and the answer
 * assembled from the chunks.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  answerEngineProbe,
  sendJson,
  sseEvent,
  sseHead,
  startHttpEngine,
  type HttpEngine,
  type RecordedRequest,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { jsonLines, serveConfigObject, type ServedGateway } from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

const MODEL = 'one-token-model';

/** The engine's non-streaming answer, with fields an assembled answer would not have in this order. */
function engineAnswer(workerId: number): Record<string, unknown> {
  return {
    id: `chatcmpl-engine-${workerId}`,
    object: 'chat.completion',
    created: 1_700_000_000,
    model: MODEL,
    system_fingerprint: `fp-worker-${workerId}`,
    choices: [
      { index: 0, message: { role: 'assistant', content: 'Y', reasoning_content: null }, finish_reason: 'length' },
    ],
    usage: { prompt_tokens: 12, completion_tokens: 1, total_tokens: 13, prompt_tokens_details: { cached_tokens: 0 } },
    prompt_logprobs: null,
    kv_transfer_params: null,
  };
}

const streamChunk = (delta: Record<string, unknown>, finish: string | null): Record<string, unknown> => ({
  id: 'chatcmpl-stream',
  object: 'chat.completion.chunk',
  created: 1_700_000_000,
  model: MODEL,
  choices: [{ index: 0, delta, finish_reason: finish }],
});

/** Request ids whose first attempt was reset (`reset-*`: the engine that sees one first drops the connection). */
const resetOnce = new Set<string>();

function answer(workerId: number, req: RecordedRequest, res: ServerResponse): void {
  if (answerEngineProbe(req, res, MODEL)) return;
  const id = String(req.headers['x-request-id']);
  if (id.startsWith('reset-') && !resetOnce.has(id)) {
    resetOnce.add(id);
    res.socket?.destroy();
    return;
  }
  if ((req.json as { stream?: unknown }).stream !== true) return sendJson(res, 200, engineAnswer(workerId));
  sseHead(res);
  res.end(
    sseEvent(streamChunk({ role: 'assistant', content: 'Y' }, null)) +
      sseEvent(streamChunk({ content: 'es' }, 'length')) +
      sseEvent({
        ...streamChunk({}, null),
        choices: [],
        usage: { prompt_tokens: 12, completion_tokens: 2, total_tokens: 14 },
      }) +
      sseEvent('[DONE]'),
  );
}

let engines: HttpEngine[] = [];
let gw: ServedGateway;

beforeAll(async () => {
  engines = [await startHttpEngine((q, r) => answer(1, q, r)), await startHttpEngine((q, r) => answer(2, q, r))];
  gw = await serveConfigObject({
    listen: { host: '127.0.0.1', port: 0 },
    preprocess: { threads: 0 },
    log: { level: 'info' },
    // KV mode without KV events (approximate): the scripted engines publish none.
    router: { use_kv_events: false },
    models: [
      {
        name: MODEL,
        workers: engines.map((e, i) => ({ id: i + 1, url: e.url })),
      },
    ],
  });
}, 60_000);

afterAll(async () => {
  await gw?.stop();
  await Promise.all(engines.map((e) => e.close()));
});

const messages = [{ role: 'user', content: 'Answer yes or no: is the sky blue?' }];

function post(id: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-request-id': id },
    body: JSON.stringify({ model: MODEL, messages, ...body }),
  });
}

/** What the engines received for the client's request id (its attempts, in order of arrival at each engine). */
function legsOf(id: string): { worker: number; json: Record<string, unknown> }[] {
  return engines.flatMap((e, i) =>
    e.requests
      .filter((r) => r.headers['x-request-id'] === id)
      .map((r) => ({ worker: i + 1, json: r.json as Record<string, unknown> })),
  );
}

describe('a non-streaming one-token request is sent unstreamed and the engine answer relayed', () => {
  it('the engine is asked for no stream; the client gets its answer as written, accounted as a streamed leg is', async () => {
    const sum = (name: string, labels: Record<string, string> = {}): Promise<number> => metric(gw.url, name, labels);
    const ttft0 = await sum('kvgate_router_time_to_first_token_seconds_count', { worker_type: 'aggregated' });
    const compared0 = await sum('kvgate_router_prediction_total');
    const osl0 = await sum('kvgate_router_output_sequence_tokens_count');

    for (const [id, extra] of [
      ['plain-1', { max_tokens: 1 }],
      ['plain-2', { max_tokens: 1, stream: false }],
      ['plain-3', { max_tokens: 64, max_completion_tokens: 1 }],
    ] as const) {
      const res = await post(id, extra);
      expect(res.status, id).toBe(200);
      expect(res.headers.get('content-type'), id).toBe('application/json');
      const worker = Number(res.headers.get('x-kvgate-worker'));
      expect(res.headers.get('x-kvgate-worker-dp-rank'), id).toBe('0');
      // The engine's bytes, not an answer rebuilt from chunks.
      expect(await res.text(), id).toBe(JSON.stringify(engineAnswer(worker)));
      const legs = legsOf(id);
      expect(
        legs.map((l) => l.worker),
        id,
      ).toEqual([worker]);
      expect(legs[0]!.json['stream'] ?? false, id).toBe(false);
      expect(legs[0]!.json['stream_options'], id).toBeUndefined();
      expect(legs[0]!.json['messages'], id).toEqual(messages);
    }

    await until(
      async () => (await sum('kvgate_router_output_sequence_tokens_count')) === osl0 + 3,
      'the output lengths observed',
    );
    expect(await sum('kvgate_router_time_to_first_token_seconds_count', { worker_type: 'aggregated' })).toBe(ttft0 + 3);
    // The engine's cached_tokens, read from its JSON answer, compared with the prediction once per request.
    expect(await sum('kvgate_router_prediction_total')).toBe(compared0 + 3);
    expect(await sum('kvgate_worker_active_requests')).toBe(0);
    const access = jsonLines(gw.proc).filter((o) => o.msg === 'request' && o.reqId === 'plain-1');
    expect(access).toHaveLength(1);
    expect(access[0]).toMatchObject({ status: 200, upstreamStatus: 200, route: '/v1/chat/completions' });
  });

  it('a longer non-streaming request and a streaming one keep the streamed leg', async () => {
    const long = await post('long-1', { max_tokens: 2 });
    expect(long.status).toBe(200);
    const assembled = (await long.json()) as { choices: { message: { content: string } }[] };
    expect(assembled.choices[0]!.message.content).toBe('Yes');
    expect(legsOf('long-1')[0]!.json).toMatchObject({ stream: true, stream_options: { include_usage: true } });

    const streamed = await post('stream-1', { max_tokens: 1, stream: true });
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get('content-type')).toContain('text/event-stream');
    expect(await streamed.text()).toContain('data: [DONE]');
    expect(legsOf('stream-1')[0]!.json).toMatchObject({ stream: true });
  });

  it('an engine that resets before answering: retried on the other worker, the client gets that answer', async () => {
    const retries0 = await metric(gw.url, 'kvgate_router_retries_total');
    const res = await post('reset-1', { max_tokens: 1 });
    expect(res.status).toBe(200);
    const worker = Number(res.headers.get('x-kvgate-worker'));
    expect(await res.text()).toBe(JSON.stringify(engineAnswer(worker)));
    const legs = legsOf('reset-1');
    expect(legs).toHaveLength(2);
    // One attempt on each worker: the reset one, then the one that answered.
    expect(legs.map((l) => l.worker).sort()).toEqual([1, 2]);
    expect(legs.every((l) => (l.json['stream'] ?? false) === false)).toBe(true);
    expect(await metric(gw.url, 'kvgate_router_retries_total')).toBe(retries0 + 1);
    await until(async () => (await metric(gw.url, 'kvgate_worker_active_requests')) === 0, 'the bookings freed');
  });
});
