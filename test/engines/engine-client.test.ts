import { createServer } from 'node:net';
import { gzipSync } from 'node:zlib';
import { once } from 'node:events';
import { afterEach, describe, expect, it } from 'vitest';
import {
  EngineClient,
  EngineHttpError,
  isMigratable,
  protocolViolationOf,
  type DispatchOptions,
  type EngineEvent,
  type EngineEventStream,
} from '../../src/engines/index.js';
import { KvgateError, isKvgateError, type KvgateErrorCode } from '../../src/errors/index.js';
import {
  completionChunk,
  deferred,
  sendJson,
  sseEvent,
  sseHead,
  startHttpEngine,
  until,
  type HttpEngine,
} from '../helpers/http-engine.js';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

async function engine(route: Parameters<typeof startHttpEngine>[0]): Promise<HttpEngine> {
  const e = await startHttpEngine(route);
  cleanups.push(() => e.close());
  return e;
}

function client(...args: ConstructorParameters<typeof EngineClient>): EngineClient {
  const c = new EngineClient(...args);
  cleanups.push(() => c.close({ force: true }));
  return c;
}

async function rejection(p: Promise<unknown>): Promise<KvgateError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof KvgateError) return err;
    throw err;
  }
  throw new Error('expected a rejection');
}

function expectCode(err: unknown, code: KvgateErrorCode, retryable: boolean): void {
  expect(isKvgateError(err, code), `${String(err)}`).toBe(true);
  expect((err as KvgateError).retryable).toBe(retryable);
}

async function collect(stream: EngineEventStream): Promise<{ events: EngineEvent[]; error: unknown }> {
  const events: EngineEvent[] = [];
  try {
    for await (const ev of stream) events.push(ev);
    return { events, error: undefined };
  } catch (error) {
    return { events, error };
  }
}

function openStream(
  c: EngineClient,
  url: string,
  path: string,
  body: Record<string, unknown>,
  opts: DispatchOptions = {},
): Promise<EngineEventStream> {
  return c.dispatch(url, path, body, { ...opts, stream: true });
}

/** A port on which nothing listens (bound, then released). */
async function closedPort(): Promise<number> {
  const srv = createServer().listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address() as { port: number };
  srv.close();
  await once(srv, 'close');
  return port;
}

describe('EngineClient streaming', () => {
  it('passes SSE events through incrementally, with raw bytes, parsed JSON, status, headers and timings', async () => {
    const gate = deferred();
    const e = await engine(async (_req, res) => {
      sseHead(res, { 'x-engine': 'scripted' });
      res.write(sseEvent(completionChunk('Hel')));
      await gate.promise;
      res.write(sseEvent(completionChunk('lo', 'stop')));
      res.end(sseEvent('[DONE]'));
    });
    const c = client();
    c.addWorker(e.url);
    const stream = await openStream(c, e.url, '/v1/completions', { model: 'm', prompt: 'hi', stream: true });
    expect(stream.kind).toBe('stream');
    expect(stream.status).toBe(200);
    expect(stream.headers['x-engine']).toBe('scripted');
    const it = stream[Symbol.asyncIterator]();
    const first = await it.next();
    // The engine is still holding its response open: delivery is incremental.
    expect(e.requests[0]!.finished).toBe(false);
    expect(first.value!.raw.toString()).toBe(sseEvent(completionChunk('Hel')));
    expect(first.value!.json).toEqual(completionChunk('Hel'));
    gate.resolve();
    const second = await it.next();
    expect((second.value!.json as { choices: { finish_reason: string }[] }).choices[0]!.finish_reason).toBe('stop');
    const done = await it.next();
    expect(done.value).toMatchObject({ done: true, data: '[DONE]', json: undefined });
    expect(await it.next()).toEqual({ value: undefined, done: true });
    expect(stream.completed).toBe(true);
    expect(stream.counters).toMatchObject({ events: 3, sawDone: true, discardedTailBytes: 0 });
    const t = stream.timings;
    for (const k of ['connectMs', 'headersMs', 'firstByteMs', 'firstEventMs', 'endMs'] as const)
      expect(t[k]).toBeTypeOf('number');
    expect(t.connectMs!).toBeLessThanOrEqual(t.headersMs!);
    expect(t.headersMs!).toBeLessThanOrEqual(t.firstByteMs!);
    expect(t.firstEventMs!).toBeLessThanOrEqual(t.endMs!);
  });

  it('forwards the body once with routing fields, headers and an exact 63-bit integer', async () => {
    const e = await engine((_req, res) => sendJson(res, 200, { ok: true }));
    const c = client();
    c.addWorker(`${e.url}/`);
    let dispatched = 0;
    const body = {
      model: 'm',
      messages: [{ role: 'user', content: 'x' }],
      max_tokens: 9,
      stream_options: { include_usage: true },
    };
    const res = await c.dispatch(e.url, '/v1/chat/completions', body, {
      extraFields: { max_tokens: 1, stream_options: undefined, bootstrap_room: 9223372036854775807n },
      headers: { 'x-request-id': 'req-1', 'x-data-parallel-rank': '3' },
      onDispatched: () => dispatched++,
    });
    expect(res.kind).toBe('json');
    expect(dispatched).toBe(1);
    const rec = e.requests[0]!;
    expect(rec.method).toBe('POST');
    expect(rec.url).toBe('/v1/chat/completions');
    expect(rec.headers['content-type']).toBe('application/json');
    expect(rec.headers['x-request-id']).toBe('req-1');
    expect(rec.headers['x-data-parallel-rank']).toBe('3');
    expect(rec.rawBody).toBe(
      '{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"bootstrap_room":9223372036854775807}',
    );
    expect(body.max_tokens).toBe(9); // the client's body object is not mutated
  });

  it('expects a stream when the body says stream: true, JSON otherwise', async () => {
    const e = await engine((_req, res) => {
      sseHead(res);
      res.end(sseEvent('[DONE]'));
    });
    const c = client();
    c.addWorker(e.url);
    const res = await c.dispatch(e.url, '/v1/completions', { stream: true });
    expect(res.kind).toBe('stream');
    if (res.kind === 'stream') expect((await collect(res)).events.map((ev) => ev.done)).toEqual([true]);
    // Without the flag an SSE answer is not the JSON that was expected.
    expectCode(
      await rejection(c.dispatch(e.url, '/v1/completions', { stream: false })),
      'KVG_ERR_ENGINE_BAD_RESPONSE',
      false,
    );
  });

  it('prefixes the worker URL base path', async () => {
    const e = await engine((_req, res) => sendJson(res, 200, {}));
    const c = client();
    c.addWorker(`${e.url}/engine-a/`);
    await c.dispatch(`${e.url}/engine-a`, '/v1/models', undefined);
    expect(e.requests[0]).toMatchObject({ method: 'GET', url: '/engine-a/v1/models' });
  });

  it('passes non-streaming JSON through with its bytes and status', async () => {
    const payload = {
      id: 'cmpl-1',
      choices: [{ text: 'ok' }],
      usage: { prompt_tokens: 3, completion_tokens: 1 },
      kv_transfer_params: { remote_engine_id: 'e' },
    };
    const e = await engine((_req, res) => sendJson(res, 201, payload, { 'x-kv': 'yes' }));
    const c = client();
    c.addWorker(e.url);
    const res = await c.dispatch(e.url, '/v1/completions', { prompt: 'p', stream: false });
    expect(res.kind).toBe('json');
    if (res.kind !== 'json') return;
    expect(res.status).toBe(201);
    expect(res.headers['x-kv']).toBe('yes');
    expect(res.body.toString()).toBe(JSON.stringify(payload));
    expect(res.json).toEqual(payload);
    expect(res.timings.endMs).toBeTypeOf('number');
  });

  it('pauses the upstream when the consumer does not read, then delivers every event in order', async () => {
    const total = 4000;
    const line = sseEvent({ pad: 'x'.repeat(1000) });
    let serverBlocked = false;
    const e = await engine(async (_req, res) => {
      sseHead(res);
      for (let i = 0; i < total; i++) {
        if (!res.write(sseEvent({ i, pad: 'x'.repeat(1000) }))) {
          serverBlocked = true;
          await once(res, 'drain');
        }
      }
      res.end(sseEvent('[DONE]'));
    });
    const c = client({ streamHighWaterMark: 4 });
    c.addWorker(e.url);
    const stream = await openStream(c, e.url, '/v1/completions', { stream: true });
    await until(() => serverBlocked, 5_000, 'engine to hit backpressure');
    // Nothing was read: kvgate holds a bounded part of the ~4 MB stream.
    expect(stream.counters.bytes).toBeLessThan((total * line.length) / 2);
    const { events, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(events).toHaveLength(total + 1);
    expect(events.slice(0, total).every((ev, i) => (ev.json as { i: number }).i === i)).toBe(true);
  });
});

describe('EngineClient cancellation', () => {
  it('a client abort mid-stream closes the upstream socket and throws KVG_ERR_CLIENT_ABORTED', async () => {
    const e = await engine((_req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('a')));
    });
    const c = client();
    c.addWorker(e.url);
    const ac = new AbortController();
    const stream = await openStream(c, e.url, '/v1/completions', { stream: true }, { signal: ac.signal });
    const it = stream[Symbol.asyncIterator]();
    expect((await it.next()).done).toBe(false);
    const pending = it.next();
    ac.abort();
    expectCode(await rejection(pending), 'KVG_ERR_CLIENT_ABORTED', false);
    // The engine sees its connection close before its response finished.
    await e.requests[0]!.closed;
    expect(e.requests[0]!.clientClosed).toBe(true);
  });

  it('a client abort before the headers rejects at once and closes the socket', async () => {
    const e = await engine(() => {
      /* never answers */
    });
    const c = client();
    c.addWorker(e.url);
    const ac = new AbortController();
    const p = c.dispatch(e.url, '/v1/completions', { stream: true }, { signal: ac.signal });
    await until(() => e.requests.length === 1, 5_000, 'request to arrive');
    ac.abort();
    expectCode(await rejection(p), 'KVG_ERR_CLIENT_ABORTED', false);
    await e.requests[0]!.closed;
    expect(e.requests[0]!.clientClosed).toBe(true);
  });

  it('an already-aborted signal sends nothing', async () => {
    const e = await engine((_req, res) => sendJson(res, 200, {}));
    const c = client();
    c.addWorker(e.url);
    expectCode(
      await rejection(c.dispatch(e.url, '/x', {}, { signal: AbortSignal.abort() })),
      'KVG_ERR_CLIENT_ABORTED',
      false,
    );
    expect(e.totalConnections()).toBe(0);
  });

  it('leaving the loop early aborts the upstream request', async () => {
    const e = await engine((_req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('a')) + sseEvent(completionChunk('b')));
    });
    const c = client();
    c.addWorker(e.url);
    const stream = await openStream(c, e.url, '/v1/completions', { stream: true });
    for await (const ev of stream) {
      expect(ev.json).toEqual(completionChunk('a'));
      break;
    }
    await e.requests[0]!.closed;
    expect(e.requests[0]!.clientClosed).toBe(true);
    expect(stream.finished).toBe(true);
  });
});

describe('EngineClient failures', () => {
  it('a reset mid-stream delivers the events received, then KVG_ERR_ENGINE_STREAM_BROKEN', async () => {
    const e = await engine((_req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('a')), () => res.socket?.destroy());
    });
    const c = client();
    c.addWorker(e.url);
    const stream = await openStream(c, e.url, '/v1/completions', { stream: true });
    const { events, error } = await collect(stream);
    expect(events.map((ev) => ev.json)).toEqual([completionChunk('a')]);
    expectCode(error, 'KVG_ERR_ENGINE_STREAM_BROKEN', false);
    expect((error as KvgateError).detail).toMatchObject({ worker: e.url, phase: 'body' });
  });

  it('a connection dropped after the request was sent is KVG_ERR_ENGINE_DISCONNECTED, not retryable', async () => {
    const e = await engine((_req, res) => {
      res.socket?.destroy();
    });
    const c = client();
    c.addWorker(e.url);
    let dispatched = false;
    const err = await rejection(c.dispatch(e.url, '/v1/completions', {}, { onDispatched: () => (dispatched = true) }));
    expectCode(err, 'KVG_ERR_ENGINE_DISCONNECTED', false);
    expect(dispatched).toBe(true);
  });

  it('a forced removal fails queued requests as retryable and sent ones as not', async () => {
    const e = await engine(() => {
      /* hold every request */
    });
    const c = client({ connections: 1 });
    c.addWorker(e.url);
    const sent = rejection(c.dispatch(e.url, '/a', {}));
    const queued = rejection(c.dispatch(e.url, '/b', {}));
    await until(() => e.requests.length === 1 && c.stats()[0]!.queued === 1, 5_000, 'one sent, one queued');
    await c.removeWorker(e.url, { force: true });
    expectCode(await sent, 'KVG_ERR_ENGINE_DISCONNECTED', false);
    expectCode(await queued, 'KVG_ERR_ENGINE_UNREACHABLE', true);
    expect(e.requests).toHaveLength(1);
  });

  it('connection refused is KVG_ERR_ENGINE_UNREACHABLE and retryable; nothing was dispatched', async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    const c = client();
    c.addWorker(url);
    let dispatched = false;
    const err = await rejection(
      c.dispatch(url, '/v1/completions', { stream: true }, { onDispatched: () => (dispatched = true) }),
    );
    expectCode(err, 'KVG_ERR_ENGINE_UNREACHABLE', true);
    expect(err.detail).toMatchObject({ phase: 'queued', cause: 'ECONNREFUSED' });
    expect(dispatched).toBe(false);
  });

  it('a connect timeout is KVG_ERR_ENGINE_UNREACHABLE and retryable', async () => {
    // A resolver that never answers keeps the socket connecting until the connect timeout fires.
    const c = client({ connectTimeoutMs: 100, lookup: () => undefined });
    c.addWorker('http://engine.invalid:8000');
    const err = await rejection(c.dispatch('http://engine.invalid:8000', '/v1/completions', {}));
    expectCode(err, 'KVG_ERR_ENGINE_UNREACHABLE', true);
    expect(err.detail).toMatchObject({ cause: 'UND_ERR_CONNECT_TIMEOUT' });
  });

  it('headers timeout fires when the engine accepts but never answers', async () => {
    const e = await engine(() => {
      /* hang */
    });
    const c = client({ headersTimeoutMs: 150 });
    c.addWorker(e.url);
    const err = await rejection(c.dispatch(e.url, '/v1/completions', { stream: true }));
    expectCode(err, 'KVG_ERR_ENGINE_HEADERS_TIMEOUT', false);
    await e.requests[0]!.closed;
  });

  it('body timeout fires when a stream stalls, after the events already received', async () => {
    const e = await engine((_req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('a')));
    });
    const c = client();
    c.addWorker(e.url);
    const stream = await openStream(c, e.url, '/v1/completions', { stream: true }, { bodyTimeoutMs: 150 });
    const { events, error } = await collect(stream);
    expect(events).toHaveLength(1);
    expectCode(error, 'KVG_ERR_ENGINE_BODY_TIMEOUT', false);
  });

  it('a 4xx keeps the engine status and error body; a 5xx becomes 502 with the upstream status in detail', async () => {
    const e = await engine((req, res) => {
      if (req.url === '/bad')
        sendJson(res, 400, { error: { message: 'max_tokens too large', type: 'BadRequestError', code: 400 } });
      else sendJson(res, 503, { detail: 'engine overloaded' });
    });
    const c = client();
    c.addWorker(e.url);
    const bad = await rejection(c.dispatch(e.url, '/bad', { stream: true }));
    expectCode(bad, 'KVG_ERR_ENGINE_REJECTED', false);
    expect(bad).toBeInstanceOf(EngineHttpError);
    const http = bad as EngineHttpError;
    expect(http.statusCode).toBe(400);
    expect(http.upstreamJson).toEqual({
      error: { message: 'max_tokens too large', type: 'BadRequestError', code: 400 },
    });
    expect(Buffer.from(http.upstreamBody).toString()).toContain('max_tokens too large');
    expect(http.message).toContain('max_tokens too large');
    await until(() => c.stats()[0]!.free === 1, 5_000, 'socket back in the pool');
    const failed = await rejection(c.dispatch(e.url, '/fail', {}));
    expectCode(failed, 'KVG_ERR_ENGINE_FAILED', false);
    expect(failed.statusCode).toBe(502);
    expect(failed.detail).toMatchObject({ upstreamStatus: 503, upstreamError: { detail: 'engine overloaded' } });
    // Error bodies were read to the end, so the keep-alive socket was reused.
    expect(e.totalConnections()).toBe(1);
  });

  it('protocol violations are KVG_ERR_ENGINE_BAD_RESPONSE', async () => {
    const e = await engine((req, res) => {
      if (req.url === '/json-for-stream') sendJson(res, 200, { not: 'a stream' });
      else if (req.url === '/not-json') {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('hello');
      } else if (req.url === '/big') sendJson(res, 200, { pad: 'x'.repeat(5000) });
      else {
        res.writeHead(302, { location: '/elsewhere' });
        res.end();
      }
    });
    const c = client({ maxResponseBytes: 1024 });
    c.addWorker(e.url);
    expectCode(
      await rejection(c.dispatch(e.url, '/json-for-stream', { stream: true })),
      'KVG_ERR_ENGINE_BAD_RESPONSE',
      false,
    );
    expectCode(await rejection(c.dispatch(e.url, '/not-json', {})), 'KVG_ERR_ENGINE_BAD_RESPONSE', false);
    expectCode(await rejection(c.dispatch(e.url, '/big', {})), 'KVG_ERR_ENGINE_BAD_RESPONSE', false);
    const redirect = await rejection(c.dispatch(e.url, '/redirect', {}));
    expectCode(redirect, 'KVG_ERR_ENGINE_BAD_RESPONSE', false);
    // A redirect is what the way to that worker answered (an ingress sending http to https): nothing reached the
    // client, and another worker may answer.
    expect(protocolViolationOf(redirect)).toBe('redirect');
    expect(isMigratable(redirect)).toBe(true);
  });

  // An engine (or a proxy in front of it) may compress an answer to a request naming no accepted coding (RFC 9110
  // 12.5.3): kvgate names identity, and a compressed answer is refused at its headers, nothing of it read. Before:
  // the gzip bytes parsed as SSE (a stream "ended inside an event") or as JSON (not_json, not migratable).
  it('asks for identity coding, and a compressed 2xx is a migratable KVG_ERR_ENGINE_BAD_RESPONSE at its headers', async () => {
    const e = await engine((req, res) => {
      const stream = req.url === '/stream';
      const body = stream ? sseEvent(completionChunk('hi', 'stop')) + sseEvent('[DONE]') : '{"choices":[]}';
      res.writeHead(200, {
        'content-type': stream ? 'text/event-stream' : 'application/json',
        'content-encoding': 'gzip',
      });
      res.end(gzipSync(body));
    });
    const c = client();
    c.addWorker(e.url);
    for (const [path, stream] of [
      ['/stream', true],
      ['/json', false],
    ] as const) {
      const err = await rejection(c.dispatch(e.url, path, { stream }, { stream }));
      expectCode(err, 'KVG_ERR_ENGINE_BAD_RESPONSE', false);
      expect(protocolViolationOf(err), path).toBe('content_encoding');
      expect(isMigratable(err), path).toBe(true);
      expect(err.detail).toMatchObject({ contentEncoding: 'gzip' });
    }
    for (const r of e.requests) expect(r.headers['accept-encoding']).toBe('identity');
  });
});

describe('EngineClient pools', () => {
  it('refuses unknown workers as retryable, and rejects bad URLs and options', async () => {
    const c = client();
    expectCode(await rejection(c.dispatch('http://127.0.0.1:1', '/x', {})), 'KVG_ERR_ENGINE_NOT_REGISTERED', true);
    expect(() => c.addWorker('ftp://x')).toThrow(/http or https/);
    expect(() => c.addWorker('not a url')).toThrow(KvgateError);
    expect(() => new EngineClient({ connections: 0 })).toThrow(/connections/);
  });

  it('reuses keep-alive sockets and bounds connections per worker', async () => {
    const release = deferred();
    const e = await engine(async (req, res) => {
      if (req.url === '/hold') await release.promise;
      sendJson(res, 200, { ok: true });
    });
    const c = client({ connections: 2 });
    c.addWorker(e.url);
    await c.dispatch(e.url, '/quick', {});
    // The socket returns to the pool just after the response completes.
    await until(() => c.stats()[0]!.free === 1, 5_000, 'socket back in the pool');
    await c.dispatch(e.url, '/quick', {});
    expect(e.totalConnections()).toBe(1);
    const held = Array.from({ length: 5 }, () => c.dispatch(e.url, '/hold', {}));
    await until(() => e.requests.length === 4, 5_000, 'two held requests');
    expect(c.stats()).toEqual([{ worker: e.url, connected: 2, free: 0, queued: 3, running: 2 }]);
    // One worker's counts, however its URL is spelled; none for a worker not registered.
    expect(c.workerStats(`${e.url}/`)).toEqual(c.stats()[0]);
    expect(c.workerStats('http://127.0.0.1:1')).toBeUndefined();
    expect(e.openSockets()).toBe(2);
    release.resolve();
    await Promise.all(held);
    expect(e.totalConnections()).toBe(2);
  });

  it('removing a worker closes its pool gracefully: in-flight streams finish, sockets close, new dispatches fail', async () => {
    const gate = deferred();
    const e = await engine(async (_req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('a')));
      await gate.promise;
      res.end(sseEvent('[DONE]'));
    });
    const c = client();
    c.addWorker(e.url);
    const stream = await openStream(c, e.url, '/v1/completions', { stream: true });
    const removed = c.removeWorker(e.url);
    expect(c.hasWorker(e.url)).toBe(false);
    expectCode(await rejection(c.dispatch(e.url, '/v1/completions', {})), 'KVG_ERR_ENGINE_NOT_REGISTERED', true);
    gate.resolve();
    const { events, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(events.map((ev) => ev.done)).toEqual([false, true]);
    await removed;
    await until(() => e.openSockets() === 0, 5_000, 'pool sockets to close');
    await c.removeWorker(e.url); // idempotent
  });

  it('a forced removal fails in-flight streams with KVG_ERR_ENGINE_STREAM_BROKEN', async () => {
    const e = await engine((_req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('a')));
    });
    const c = client();
    c.addWorker(e.url);
    const stream = await openStream(c, e.url, '/v1/completions', { stream: true });
    await c.removeWorker(e.url, { force: true });
    const { events, error } = await collect(stream);
    expect(events).toHaveLength(1);
    expectCode(error, 'KVG_ERR_ENGINE_STREAM_BROKEN', false);
    await until(() => e.openSockets() === 0);
  });

  it('close() is idempotent, closes every pool and leaves no socket open', async () => {
    const a = await engine((_req, res) => sendJson(res, 200, {}));
    const b = await engine((_req, res) => sendJson(res, 200, {}));
    const c = new EngineClient();
    c.addWorker(a.url);
    c.addWorker(b.url);
    c.addWorker(a.url); // no-op
    expect(c.workers).toEqual([a.url, b.url]);
    await Promise.all([c.dispatch(a.url, '/x', {}), c.dispatch(b.url, '/x', {})]);
    expect(a.openSockets() + b.openSockets()).toBe(2);
    const first = c.close();
    expect(c.close()).toBe(first);
    await first;
    await until(() => a.openSockets() + b.openSockets() === 0, 5_000, 'all sockets closed');
    expect(() => c.addWorker(a.url)).toThrow(/closed/);
    expectCode(await rejection(c.dispatch(a.url, '/x', {})), 'KVG_ERR_ENGINE_NOT_REGISTERED', true);
  });
});

// Per-leg first-byte and stream-idle timeouts (issue 13 item 9): each its own typed, migratable error,
// the upstream request aborted; a stream paused by its own consumer is never cut for that silence.
async function setup(route: Parameters<typeof startHttpEngine>[0]): Promise<{ e: HttpEngine; c: EngineClient }> {
  const e = await engine(route);
  const c = client({ streamHighWaterMark: 2 });
  c.addWorker(e.url);
  return { e, c };
}

describe('first-byte timeout (issue 13 item 9)', () => {
  it('an engine that takes the request and never answers: KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT, migratable, upstream aborted', async () => {
    const { e, c } = await setup(() => {
      /* hang: no headers */
    });
    const t0 = performance.now();
    const err = await rejection(
      c.dispatch(e.url, '/v1/completions', { stream: true }, { stream: true, firstByteTimeoutMs: 150 }),
    );
    expect(isKvgateError(err, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT')).toBe(true);
    expect(err.statusCode).toBe(504);
    expect(isMigratable(err)).toBe(true);
    expect(err.detail).toMatchObject({ migratable: true, timeoutMs: 150 });
    expect(performance.now() - t0).toBeLessThan(2_000);
    await e.requests[0]!.closed;
    expect(e.requests[0]!.clientClosed).toBe(true);
  });

  it('headers sent but no event: the stream fails with the first-byte timeout', async () => {
    const { e, c } = await setup((_req, res) => sseHead(res));
    const stream = await c.dispatch(
      e.url,
      '/v1/completions',
      { stream: true },
      { stream: true, firstByteTimeoutMs: 150 },
    );
    const { events, error } = await collect(stream);
    expect(events).toHaveLength(0);
    expect(isKvgateError(error, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT')).toBe(true);
    await e.requests[0]!.closed;
  });

  it('a JSON answer that never comes (one-token prefill): first-byte timeout; a prompt answer is not cut', async () => {
    const { e, c } = await setup((req, res) => {
      if (req.url === '/fast') sendJson(res, 200, { ok: true });
    });
    expect((await c.dispatch(e.url, '/fast', {}, { stream: false, firstByteTimeoutMs: 150 })).json).toEqual({
      ok: true,
    });
    const err = await rejection(c.dispatch(e.url, '/slow', {}, { stream: false, firstByteTimeoutMs: 150 }));
    expect(isKvgateError(err, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT')).toBe(true);
  });
});

describe('first-byte timeout while waiting for a connection', () => {
  // The pool's connections to a worker are bounded (`connections`): a request beyond them waits in the pool's queue,
  // where the engine never saw it. Its deadline says so (phase queued), so it is not blamed on the engine.
  it("says the request never left kvgate's queue when every connection to the worker was busy", async () => {
    const e = await engine(() => {
      /* takes every request and never answers */
    });
    const c = client({ connections: 1 });
    c.addWorker(e.url);
    const first = rejection(
      c.dispatch(e.url, '/v1/completions', { stream: true }, { stream: true, firstByteTimeoutMs: 1_000 }),
    );
    await until(() => e.requests.length === 1);
    const queued = await rejection(
      c.dispatch(e.url, '/v1/completions', { stream: true }, { stream: true, firstByteTimeoutMs: 100 }),
    );
    expect(isKvgateError(queued, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT')).toBe(true);
    expect(isMigratable(queued)).toBe(true);
    expect(queued.detail).toMatchObject({ phase: 'queued', timeoutMs: 100, connections: 1 });
    expect(queued.message).toMatch(/no connection to the engine was free/);
    const sent = await first;
    expect(isKvgateError(sent, 'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT')).toBe(true);
    expect(sent.detail).toMatchObject({ phase: 'sent' });
    // The queued request was never written: the engine saw one request.
    await e.requests[0]!.closed;
    expect(e.requests).toHaveLength(1);
  });
});

describe('stream idle timeout (issue 13 item 9)', () => {
  it('a stream that stops mid-way keeps its connection open: the events received, then KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT', async () => {
    const { e, c } = await setup((_req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('a')));
      res.write(sseEvent(completionChunk('b')));
    });
    const stream = await c.dispatch(
      e.url,
      '/v1/completions',
      { stream: true },
      { stream: true, firstByteTimeoutMs: 5_000, streamIdleTimeoutMs: 150 },
    );
    const { events, error } = await collect(stream);
    expect(events).toHaveLength(2);
    expect(isKvgateError(error, 'KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT')).toBe(true);
    expect(isMigratable(error)).toBe(true);
    await e.requests[0]!.closed;
    expect(e.requests[0]!.clientClosed).toBe(true);
  });

  it('events arriving more often than the idle timeout keep the stream alive past it', async () => {
    const { e, c } = await setup(async (_req, res) => {
      sseHead(res);
      for (let i = 0; i < 6; i++) {
        res.write(sseEvent(completionChunk(String(i))));
        await new Promise((r) => setTimeout(r, 60));
      }
      res.end('data: [DONE]\n\n');
    });
    const stream = await c.dispatch(
      e.url,
      '/v1/completions',
      { stream: true },
      { stream: true, firstByteTimeoutMs: 150, streamIdleTimeoutMs: 150 },
    );
    const { events, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(events).toHaveLength(7);
  });

  it("silence while the consumer does not read (socket paused) is not the engine's: no idle timeout", async () => {
    const more = deferred();
    const { e, c } = await setup(async (_req, res) => {
      sseHead(res);
      for (let i = 0; i < 8; i++) res.write(sseEvent(completionChunk(String(i))));
      await more.promise;
      res.end('data: [DONE]\n\n');
    });
    const stream = await c.dispatch(
      e.url,
      '/v1/completions',
      { stream: true },
      { stream: true, streamIdleTimeoutMs: 100 },
    );
    // Nothing is read for several idle periods while the events sit in the buffer (high-water mark 2).
    await until(() => stream.counters.events >= 2, 2_000, 'events buffered');
    await new Promise((r) => setTimeout(r, 400)); // the silence under test, not a synchronisation
    more.resolve();
    const { events, error } = await collect(stream);
    expect(error).toBeUndefined();
    expect(events.length).toBe(9);
    expect(e.requests[0]!.clientClosed).toBe(false);
  });
});

describe('answers that are not what was asked (issue 23 items 1 and 3)', () => {
  const HTML = '<html><head><title>502 Bad Gateway</title></head><body><center>nginx</center></body></html>';

  it('a 200 that is not the content type asked for fails at its headers: BAD_RESPONSE, content_type, migratable, no body read', async () => {
    const { e, c } = await setup((req, res) => {
      const type = {
        '/html': 'text/html; charset=utf-8',
        '/json': 'application/json',
        '/sse': 'text/event-stream',
        '/none': undefined,
      }[req.url];
      res.writeHead(200, type === undefined ? {} : { 'content-type': type });
      res.end(req.url === '/html' ? HTML : req.url === '/json' ? '{"choices":[]}' : 'data: [DONE]\n\n');
    });
    const cases: [string, boolean, string][] = [
      ['/html', true, 'text/html'],
      ['/html', false, 'text/html'],
      ['/json', true, 'application/json'],
      ['/sse', false, 'text/event-stream'],
      ['/none', true, ''],
      ['/none', false, ''],
    ];
    for (const [path, stream, contentType] of cases) {
      const err = await rejection(c.dispatch(e.url, path, { stream }, { stream }));
      expectCode(err, 'KVG_ERR_ENGINE_BAD_RESPONSE', false);
      expect(err.detail, `${path} stream=${stream}`).toMatchObject({
        violation: 'content_type',
        contentType,
        migratable: true,
      });
      expect(protocolViolationOf(err)).toBe('content_type');
      expect(isMigratable(err)).toBe(true);
    }
    // The answers asked for, with parameters and any case, still pass.
    const ok = await startHttpEngine((req, res) => {
      res.writeHead(200, {
        'content-type': req.url === '/sse' ? 'Text/Event-Stream; charset=UTF-8' : 'application/vnd.api+json',
      });
      res.end(req.url === '/sse' ? 'data: [DONE]\n\n' : '{"ok":true}');
    });
    cleanups.push(() => ok.close());
    c.addWorker(ok.url);
    expect((await collect(await openStream(c, ok.url, '/sse', {}))).events.map((ev) => ev.done)).toEqual([true]);
    expect((await c.dispatch(ok.url, '/json', {}, { stream: false })).json).toEqual({ ok: true });
  });

  it('a stream cut inside an event before [DONE]: the complete events, then STREAM_BROKEN (truncated_event, migratable)', async () => {
    const { e, c } = await setup((req, res) => {
      sseHead(res);
      res.write(sseEvent(completionChunk('Hel')));
      res.end(
        req.url === '/cut'
          ? 'data: {"id":"cmpl-test","choices":[{"te'
          : req.url === '/after-done'
            ? 'data: [DONE]\n\ndata: {"x'
            : ': keep-alive',
      );
    });
    const cut = await collect(await openStream(c, e.url, '/cut', {}));
    expect(cut.events.map((ev) => ev.data)).toEqual([JSON.stringify(completionChunk('Hel'))]);
    expectCode(cut.error, 'KVG_ERR_ENGINE_STREAM_BROKEN', false);
    expect((cut.error as KvgateError).detail).toMatchObject({ violation: 'truncated_event', discardedBytes: 39 });
    expect(isMigratable(cut.error)).toBe(true);
    // After [DONE], or a comment: nothing of an event was lost, the stream ends cleanly.
    const afterDone = await openStream(c, e.url, '/after-done', {});
    expect((await collect(afterDone)).error).toBeUndefined();
    expect(afterDone.counters.discardedTailBytes).toBe(9);
    const comment = await openStream(c, e.url, '/comment', {});
    expect(await collect(comment)).toMatchObject({
      error: undefined,
      events: [{ data: JSON.stringify(completionChunk('Hel')) }],
    });
  });

  it('CR-only events arrive as separate events, forwarded with LF line ends', async () => {
    const { e, c } = await setup((_req, res) => {
      sseHead(res);
      res.write('data: {"n":1}\r\rdata: {"n":2}\r');
      res.end('\rdata: [DONE]\r\r');
    });
    const { events, error } = await collect(await openStream(c, e.url, '/v1/completions', {}));
    expect(error).toBeUndefined();
    expect(events.map((ev) => ev.raw.toString())).toEqual([
      'data: {"n":1}\n\n',
      'data: {"n":2}\n\n',
      'data: [DONE]\n\n',
    ]);
    expect(events.map((ev) => ev.json)).toEqual([{ n: 1 }, { n: 2 }, undefined]);
  });
});
