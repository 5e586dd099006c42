/**
 * What a client of each API is told when its engine fails, and that it never names the engine: `kvgate serve` (a
 * real process) in front of a scripted engine (a real HTTP server, test/helpers/http-engine.ts), a port nothing
 * listens on and a `kvgate mocker` failing every request. Each failure (connection refused, the connection dropped
 * before the answer, reset mid-stream, no first byte in time, a 500 whose body names the engine's URL, a file path
 * and a Python stack) on each route the engines serve (chat, streamed or not; Anthropic Messages and OpenAI
 * Responses, streamed or not; embeddings) answers with a stable KVG_ERR_* code, in the API's own error shape (an
 * error event in a stream begun), and with no address, path or stack of the engine's in the body or the headers.
 * `POST /v1/route` sends nothing to an engine: its answer names workers by id only. hardening.test.ts holds the
 * same cases for `/v1/completions`; engine-answers.test.ts and agent-stream-faults.test.ts the engines' own error
 * events.
 */
import { createServer as createNetServer, type AddressInfo } from 'node:net';
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
import {
  serveConfigObject,
  startMockerEngine,
  stopServed,
  type ServedGateway,
  type ServedProc,
} from '../../helpers/serve-process.js';

const FAKE_ADDRESS = '10.9.8.7';
const FIRST_BYTE_MS = 400;

/** Frames of each API's stream, enough for the gateway to have begun relaying it. */
function firstEvents(path: string): string {
  const named = (type: string, data: Record<string, unknown>): string =>
    `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;
  if (path === '/v1/messages')
    return named('message_start', {
      message: { id: 'msg_1', type: 'message', role: 'assistant', content: [], usage: { input_tokens: 3 } },
    });
  if (path === '/v1/responses')
    return named('response.created', { sequence_number: 0, response: { id: 'resp_1', status: 'in_progress' } });
  return sseEvent({
    id: 'chat-1',
    object: 'chat.completion.chunk',
    choices: [{ index: 0, delta: { role: 'assistant', content: 'Hel' }, finish_reason: null }],
  });
}

/** What the scripted engine does, by the request id kvgate forwards (x-request-id). */
function scripted(self: () => string, model: string): (req: RecordedRequest, res: ServerResponse) => void {
  return (req, res) => {
    if (answerEngineProbe(req, res, model)) return;
    switch (String(req.headers['x-request-id']).split('-')[0]) {
      case 'fail':
        // vLLM's answer to an exception in its server: its own URL, a file path and the stack in the body.
        return sendJson(
          res,
          500,
          {
            error: {
              message:
                `upstream ${self()}${req.url} failed: connect ECONNREFUSED ${FAKE_ADDRESS}:29500\n` +
                'Traceback (most recent call last):\n  File "/opt/vllm/entrypoints/openai/serving_chat.py", line 512',
              type: 'InternalServerError',
              code: 500,
            },
          },
          { server: `uvicorn on ${FAKE_ADDRESS}` },
        );
      case 'refuse':
        // A refusal whose message is the client's business, but whose text names the engine and its files.
        return sendJson(res, 400, {
          error: {
            message:
              `prompt too long for ${self()}${req.url} (peer ${FAKE_ADDRESS}:29500)\n` +
              'Traceback (most recent call last):\n  File "/opt/vllm/entrypoints/openai/serving_chat.py", line 512',
            type: 'BadRequestError',
            param: 'messages',
            code: 400,
          },
        });
      case 'badjson':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(`not json, see ${self()}/debug and /opt/vllm/server.py`);
        return;
      case 'disconnect':
        res.socket?.destroy();
        return;
      case 'reset':
        sseHead(res);
        res.write(firstEvents(req.url));
        setImmediate(() => res.socket?.destroy());
        return;
      case 'hang':
        return; // no byte: the first-byte deadline ends the leg
      default:
        res.writeHead(404).end();
    }
  };
}

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const srv = createNetServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

interface Api {
  readonly path: string;
  readonly stream: boolean;
  body(model: string): Record<string, unknown>;
}

const chat = (stream: boolean): Api => ({
  path: '/v1/chat/completions',
  stream,
  body: (model) => ({ model, messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 4, stream }),
});
const messages = (stream: boolean): Api => ({
  path: '/v1/messages',
  stream,
  body: (model) => ({ model, messages: [{ role: 'user', content: 'Hi.' }], max_tokens: 4, stream }),
});
const responses = (stream: boolean): Api => ({
  path: '/v1/responses',
  stream,
  body: (model) => ({ model, input: 'Hi.', max_output_tokens: 4, stream }),
});
const embeddings: Api = { path: '/v1/embeddings', stream: false, body: (model) => ({ model, input: 'Hi.' }) };
const APIS: readonly Api[] = [
  chat(false),
  chat(true),
  messages(false),
  messages(true),
  responses(false),
  responses(true),
  embeddings,
];

/** The failures, each with its worker and the codes it may answer with. */
const FAILURES = [
  // Refused once, the worker is marked down: later requests pinned to it are refused before they leave.
  { kind: 'refused', worker: 2, codes: ['KVG_ERR_ENGINE_UNREACHABLE', 'KVG_ERR_WORKER_DOWN'] },
  { kind: 'fail', worker: 1, codes: ['KVG_ERR_ENGINE_FAILED'] },
  { kind: 'disconnect', worker: 1, codes: ['KVG_ERR_ENGINE_DISCONNECTED'] },
  { kind: 'reset', worker: 1, codes: ['KVG_ERR_ENGINE_STREAM_BROKEN'], streamOnly: true },
  { kind: 'hang', worker: 1, codes: ['KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT'] },
  { kind: 'refuse', worker: 1, codes: ['KVG_ERR_ENGINE_REJECTED'] },
  { kind: 'badjson', worker: 1, codes: ['KVG_ERR_ENGINE_BAD_RESPONSE'] },
  // The mocker's fault fails generation; its embeddings are answered.
  { kind: 'mocker', worker: 3, codes: ['KVG_ERR_ENGINE_FAILED'], generationOnly: true },
] as const;

/** The error object a client got: the body's, or the last event's of a stream begun (each API's shape). */
function errorOf(status: number, text: string): { code?: unknown; message?: unknown } | undefined {
  if (status !== 200) {
    const json = JSON.parse(text) as { error?: { code?: unknown; message?: unknown } };
    return json.error;
  }
  const frames = text.split('\n\n').filter((f) => f.trim() !== '');
  const data = frames
    .at(-1)
    ?.split('\n')
    .find((l) => l.startsWith('data: '))
    ?.slice('data: '.length);
  if (data === undefined) return undefined;
  const event = JSON.parse(data) as {
    code?: unknown;
    message?: unknown;
    error?: { code?: unknown; message?: unknown };
  };
  // Chat: {error: {...}}; Anthropic: {type: 'error', error: {...}}; Responses: {type: 'error', code, message}.
  return event.error ?? event;
}

describe('engine failures on every API reach the client with a stable code and no engine address', () => {
  let engine: HttpEngine;
  let mocker: ServedProc;
  let gw: ServedGateway;
  let secrets: string[];
  let model: string;

  beforeAll(async () => {
    const m = await startMockerEngine(['--no-kv-events', '--fault-error-rate', '1']);
    mocker = m.proc;
    model = String(m.engine.model);
    let selfUrl = '';
    engine = await startHttpEngine(scripted(() => selfUrl, model));
    selfUrl = engine.url;
    const dead = `http://127.0.0.1:${await closedPort()}`;
    const hostPort = (u: string): string => new URL(u).host;
    secrets = [
      FAKE_ADDRESS,
      '127.0.0.1',
      'localhost',
      hostPort(engine.url),
      hostPort(dead),
      hostPort(String(m.engine.url)),
      'http://',
      '/opt/vllm',
      'Traceback',
      'ECONNREFUSED',
    ];
    gw = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      health: { outlier_detection: { consecutive_errors: 0 } },
      models: [
        {
          name: model,
          router_mode: 'round-robin',
          engine_timeouts: { first_byte_timeout_ms: FIRST_BYTE_MS },
          workers: [
            { id: 1, url: engine.url },
            { id: 2, url: dead },
            { id: 3, url: String(m.engine.url) },
          ],
        },
      ],
    });
  }, 60_000);

  afterAll(async () => {
    await gw?.stop();
    await engine?.close();
    await stopServed(mocker);
  });

  it('each failure on each API: its code, the worker named by id, nothing of the engine in the body or the headers', async () => {
    const seen: string[] = [];
    for (const api of APIS)
      for (const f of FAILURES) {
        if ('streamOnly' in f && !api.stream) continue;
        if ('generationOnly' in f && api.path === '/v1/embeddings') continue;
        const id = `${f.kind}-${api.path.slice(4)}-${api.stream ? 'stream' : 'json'}`;
        const res = await fetch(`${gw.url}${api.path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-request-id': id, 'x-worker-instance-id': String(f.worker) },
          body: JSON.stringify(api.body(model)),
        });
        const text = await res.text();
        for (const s of secrets) expect(text, `${id} body names ${s}: ${text.slice(-400)}`).not.toContain(s);
        for (const [name, value] of res.headers)
          for (const s of secrets) expect(`${name}: ${value}`, `${id} header`).not.toContain(s);
        const error = errorOf(res.status, text);
        seen.push(`${id} ${res.status} ${String(error?.code)}`);
        expect(f.codes as readonly unknown[], `${id}: ${text.slice(-400)}`).toContain(error?.code);
        // A refusal is the client's business: the engine's message, without its addresses, paths and stack.
        if (f.kind === 'refuse')
          expect(error?.message, id).toBe(
            'prompt too long for [address] (peer [address]) [stack trace removed by kvgate]',
          );
        else expect(String(error?.message), id).toContain(`worker ${f.worker}`);
      }
    expect(seen.length, seen.join('\n')).toBe(APIS.length * 7 + 3 - 1);
  }, 120_000);

  it('POST /v1/route answers by worker id, with no engine address', async () => {
    const res = await fetch(`${gw.url}/v1/route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-worker-instance-id': '1' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'Hi.' }] }),
    });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    expect(JSON.parse(text)).toMatchObject({ worker: { worker_id: 1 } });
    for (const s of secrets) expect(text, s).not.toContain(s);
  });
});
