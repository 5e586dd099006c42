/**
 * The agent APIs' streams (Anthropic Messages, OpenAI Responses) when their engine fails mid-stream: `kvgate serve`
 * (a real process) in front of a scripted engine (a real HTTP server on a real socket, test/helpers/http-engine.ts)
 * that streams thousands of events and then fails in each API's own way. The client gets every event before the
 * failure, then kvgate's error event in the API's own form (Anthropic's `error` event, the Responses `error` event
 * numbered after the last one relayed), with kvgate's code, the worker's id and none of the engine's text; the
 * failure is counted and logged, and the booking freed.
 *
 * Before the fix, a Responses engine's own `error` event (the API's form: code and message at the top level) and
 * a `response.failed` event went to the client verbatim, the engine's address and text included, and the request
 * was counted as a success.
 *
 * A stream whose body ended cleanly before its answer's final event (`message_stop`, `response.completed`) lost its
 * end: the client gets the API's error event with KVG_ERR_ENGINE_STREAM_BROKEN after every event received, as a
 * chat stream ended without `[DONE]` does; before the fix it looked complete.
 *
 * And a leg that fails before its first event (the engine sent its headers, then died, or sent nothing within
 * `engine_timeouts.first_byte_timeout_ms`) is sent again to another worker (a `kvgate mocker`), as a chat's is:
 * the client, which has seen no event, gets the whole answer of thousands of events to its last one. Before the
 * fix an agent API's stream was never migrated, and such a client got only an error event.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  answerEngineProbe,
  sseHead,
  startHttpEngine,
  type HttpEngine,
  type RecordedRequest,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import {
  jsonLines,
  serveConfigObject,
  startMockerEngine,
  stopServed,
  type ServedGateway,
  type ServedProc,
} from '../../helpers/serve-process.js';
import { namedEvents, readSse, type NamedEvent } from '../../helpers/sse-reader.js';
import { until } from '../../helpers/until.js';

const MODEL = 'agent-model';
const ENGINE_ADDRESS = '10.9.8.7';
const ENGINE_FAILURE = `CUDA error: an illegal memory access was encountered (peer ${ENGINE_ADDRESS}:29500)`;
/** Output deltas the engine streams before it fails. */
const DELTAS = 2000;

const frame = (type: string, data: Record<string, unknown>): string =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

/** A Responses stream's first events, numbered from 0 as engines number them: created, then DELTAS text deltas. */
function responsesStart(): string {
  let s = frame('response.created', { sequence_number: 0, response: { id: 'resp_1', status: 'in_progress' } });
  for (let i = 1; i <= DELTAS; i++)
    s += frame('response.output_text.delta', { sequence_number: i, item_id: 'msg_1', delta: 'tok ' });
  return s;
}

/** A Messages stream's first events: message_start, the text block's start, then DELTAS text deltas. */
function messagesStart(): string {
  let s = frame('message_start', {
    message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 3 } },
  });
  s += frame('content_block_start', { index: 0, content_block: { type: 'text', text: '' } });
  for (let i = 0; i < DELTAS; i++)
    s += frame('content_block_delta', { index: 0, delta: { type: 'text_delta', text: 'tok ' } });
  return s;
}

/** What the engine does, by the request id kvgate forwards (x-request-id). */
function engineRoute(req: RecordedRequest, res: ServerResponse): void {
  if (answerEngineProbe(req, res, MODEL)) return;
  sseHead(res);
  switch (String(req.headers['x-request-id']).split('-')[0]) {
    case 'responseserror':
      // The Responses API's own error event: code and message at the top level.
      res.write(responsesStart());
      res.end(
        frame('error', { code: 'server_error', message: ENGINE_FAILURE, param: null, sequence_number: DELTAS + 1 }),
      );
      return;
    case 'responsesfailed':
      res.write(responsesStart());
      res.end(
        frame('response.failed', {
          sequence_number: DELTAS + 1,
          response: { id: 'resp_1', status: 'failed', error: { code: 'server_error', message: ENGINE_FAILURE } },
        }),
      );
      return;
    case 'messageserror':
      // Anthropic's error event: its error nested in `error`.
      res.write(messagesStart());
      res.end(frame('error', { error: { type: 'api_error', message: ENGINE_FAILURE } }));
      return;
    case 'unfinished':
      // Every delta, then a clean end of the body without the answer's final event.
      res.end(req.url === '/v1/messages' ? messagesStart() : responsesStart());
      return;
    case 'donelast':
      // A whole Messages answer, then `data: [DONE]` after its message_stop (as vLLM ends some streams).
      res.end(`${messagesStart()}${frame('message_stop', {})}data: [DONE]\n\n`);
      return;
    case 'die':
      // The headers, then the connection closed before any event.
      setImmediate(() => res.socket?.destroy());
      return;
    case 'hang':
      // The headers, then nothing: the first-byte deadline ends the leg.
      return;
    default:
      res.writeHead(404).end();
  }
}

const messagesBody = { model: MODEL, max_tokens: 4096, stream: true, messages: [{ role: 'user', content: 'Hi.' }] };
const responsesBody = { model: MODEL, stream: true, input: 'Hi.' };

/** The data of each event, parsed. */
const parsed = (events: readonly NamedEvent[]): Record<string, unknown>[] =>
  events.map((e) => JSON.parse(e.data) as Record<string, unknown>);

describe('agent API streams whose engine fails mid-stream', () => {
  let engine: HttpEngine;
  let gw: ServedGateway;

  beforeAll(async () => {
    engine = await startHttpEngine(engineRoute);
    gw = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      admin: { enabled: true },
      log: { level: 'info' },
      models: [{ name: MODEL, tokenizer: 'demo', router_mode: 'round-robin', workers: [{ id: 1, url: engine.url }] }],
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await engine?.close();
  });

  it("Responses: the engine's error and response.failed events become kvgate's error event after every delta; counted and logged", async () => {
    for (const kind of ['responseserror', 'responsesfailed']) {
      const r = await readSse(`${gw.url}/v1/responses`, responsesBody, {}, { 'x-request-id': `${kind}-1` });
      expect(r.status).toBe(200);
      expect(r.ending).toBe('end');
      const events = namedEvents(r);
      expect(events).toHaveLength(DELTAS + 2);
      expect(events.filter((e) => e.event === 'response.output_text.delta')).toHaveLength(DELTAS);
      // The API's own error event, numbered after the last event relayed, with kvgate's code and the worker.
      expect(events.at(-1)!.event).toBe('error');
      expect(parsed(events).at(-1)).toEqual({
        type: 'error',
        code: 'KVG_ERR_ENGINE_FAILED',
        message: expect.stringContaining('worker 1'),
        param: null,
        sequence_number: DELTAS + 1,
      });
      expect(r.text).not.toContain(ENGINE_ADDRESS);
      expect(r.text).not.toContain('CUDA');
    }
    expect(await metric(gw.url, 'kvgate_router_engine_error_events_total', { kind: 'failed' })).toBe(2);
    await until(
      () =>
        jsonLines(gw.proc).filter(
          (o) => o.msg === 'the engine sent an error event mid-stream (failed)' && o.code === 'KVG_ERR_ENGINE_FAILED',
        ).length === 2,
      'two error-event lines',
    );
    // The engine's text is for the log; the access lines carry the code, not a success.
    expect(JSON.stringify(jsonLines(gw.proc))).toContain('CUDA error');
    await until(
      () => jsonLines(gw.proc).filter((o) => o.msg === 'request' && o.code === 'KVG_ERR_ENGINE_FAILED').length === 2,
      'two access lines with the code',
    );
    expect(await metric(gw.url, 'kvgate_worker_active_requests')).toBe(0);
  });

  it("Messages: the engine's error event becomes kvgate's Anthropic error event after every delta", async () => {
    const r = await readSse(`${gw.url}/v1/messages`, messagesBody, {}, { 'x-request-id': 'messageserror-1' });
    expect(r.status).toBe(200);
    const events = namedEvents(r);
    expect(events.filter((e) => e.event === 'content_block_delta')).toHaveLength(DELTAS);
    expect(events.at(-1)!.event).toBe('error');
    expect(parsed(events).at(-1)).toEqual({
      type: 'error',
      error: {
        type: 'api_error',
        code: 'KVG_ERR_ENGINE_FAILED',
        message: expect.stringContaining('worker 1'),
        param: null,
      },
      request_id: 'messageserror-1',
    });
    expect(r.text).not.toContain(ENGINE_ADDRESS);
    expect(await metric(gw.url, 'kvgate_worker_active_requests')).toBe(0);
  });

  it("a stream ended before its answer's final event: every delta, then the API's error event with KVG_ERR_ENGINE_STREAM_BROKEN; counted", async () => {
    const messages = await readSse(`${gw.url}/v1/messages`, messagesBody, {}, { 'x-request-id': 'unfinished-m' });
    const m = namedEvents(messages);
    expect(m.filter((e) => e.event === 'content_block_delta')).toHaveLength(DELTAS);
    expect(m.at(-1)!.event).toBe('error');
    expect(parsed(m).at(-1)).toMatchObject({ type: 'error', error: { code: 'KVG_ERR_ENGINE_STREAM_BROKEN' } });
    const responses = await readSse(`${gw.url}/v1/responses`, responsesBody, {}, { 'x-request-id': 'unfinished-r' });
    const r = namedEvents(responses);
    expect(r.filter((e) => e.event === 'response.output_text.delta')).toHaveLength(DELTAS);
    expect(parsed(r).at(-1)).toMatchObject({
      type: 'error',
      code: 'KVG_ERR_ENGINE_STREAM_BROKEN',
      sequence_number: DELTAS + 1,
    });
    expect(await metric(gw.url, 'kvgate_router_engine_protocol_errors_total', { violation: 'unfinished' })).toBe(2);
    // A whole answer followed by `[DONE]` is whole.
    const whole = await readSse(`${gw.url}/v1/messages`, messagesBody, {}, { 'x-request-id': 'donelast-m' });
    expect(namedEvents(whole).filter((e) => e.event === 'error')).toEqual([]);
    expect(namedEvents(whole).at(-2)!.event).toBe('message_stop');
    expect(await metric(gw.url, 'kvgate_worker_active_requests')).toBe(0);
  });
});

describe('agent API streams whose engine fails before its first event', () => {
  let engine: HttpEngine;
  let mocker: ServedProc;
  let gw: ServedGateway;
  /** Tokens of each answer: thousands of events. */
  const TOKENS = 3000;

  beforeAll(async () => {
    engine = await startHttpEngine(engineRoute);
    const m = await startMockerEngine([
      '--no-kv-events',
      '--model',
      MODEL,
      '--speedup',
      '1000',
      '--max-model-len',
      '65536',
    ]);
    mocker = m.proc;
    gw = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      admin: { enabled: true },
      models: [
        {
          name: MODEL,
          tokenizer: 'demo',
          // Round robin from worker 1, first attempts alternating (retries rotate on their own): each faulted
          // request's first leg goes to the failing engine, its second to the mocker, and a filler after it
          // takes worker 2's turn.
          router_mode: 'round-robin',
          engine_timeouts: { first_byte_timeout_ms: 500 },
          workers: [
            { id: 1, url: engine.url },
            { id: 2, url: String(m.engine.url) },
          ],
        },
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    if (mocker !== undefined) await stopServed(mocker);
    await engine?.close();
  });

  it('Messages and Responses: sent again to the other worker; the client gets every event to the last', async () => {
    const bodies = {
      '/v1/messages': { ...messagesBody, max_tokens: TOKENS, ignore_eos: true },
      '/v1/responses': { ...responsesBody, max_output_tokens: TOKENS, ignore_eos: true },
    };
    for (const [path, body] of Object.entries(bodies))
      for (const fault of ['die', 'hang']) {
        const id = `${fault}-${path.slice(4)}`;
        const r = await readSse(`${gw.url}${path}`, body, {}, { 'x-request-id': id });
        // The failing engine had the first leg.
        expect(engine.requests.filter((q) => q.headers['x-request-id'] === id)).toHaveLength(1);
        expect(r.status).toBe(200);
        expect(r.ending).toBe('end');
        const events = namedEvents(r);
        expect(events.filter((e) => e.event === 'error')).toEqual([]);
        if (path === '/v1/messages') {
          expect(events.filter((e) => e.event === 'content_block_delta')).toHaveLength(TOKENS);
          expect(events.at(-1)!.event).toBe('message_stop');
        } else {
          expect(events.filter((e) => e.event === 'response.output_text.delta')).toHaveLength(TOKENS);
          expect(events.at(-1)!.event).toBe('response.completed');
        }
        // The filler: the next first attempt, on the mocker, so the next faulted request's is on worker 1 again.
        const filler = await readSse(`${gw.url}${path}`, body, {}, { 'x-request-id': `filler-${id}` });
        expect(filler.status).toBe(200);
        expect(engine.requests.filter((q) => q.headers['x-request-id'] === `filler-${id}`)).toHaveLength(0);
      }
    expect(await metric(gw.url, 'kvgate_router_migrations_total', { outcome: 'started' })).toBe(4);
    expect(await metric(gw.url, 'kvgate_router_migrations_total', { outcome: 'succeeded' })).toBe(4);
    await until(async () => (await metric(gw.url, 'kvgate_worker_active_requests')) === 0, 'every booking freed');
    expect(await metric(gw.url, 'kvgate_http_inflight_requests')).toBe(0);
  });
});
