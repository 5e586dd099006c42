/**
 * Issue 13: the gateway's HTTP edge against hostile or broken clients, over
 * real sockets on OS-chosen ports (in front of FakeRouters). Each test names
 * the item it pins.
 */
import { connect, type Socket } from 'node:net';
import { gzipSync } from 'node:zlib';
import { describe, expect, it, vi } from 'vitest';
import { until } from '../helpers/until.js';
import { KEY, chat, post, start } from './server-harness.js';

/** Opens a raw connection, writes `head`, and collects what comes back until the server closes it. */
function rawRequest(
  port: number,
  head: string,
  opts: { localAddress?: string } = {},
): { socket: Socket; answer: Promise<string> } {
  const socket = connect({ host: '127.0.0.1', port, ...opts });
  socket.on('error', () => undefined);
  const answer = new Promise<string>((resolve) => {
    let text = '';
    socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
    socket.on('close', () => resolve(text));
  });
  socket.write(head);
  return { socket, answer };
}

function statusOf(raw: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1] ?? 0);
}

function errorOf(raw: string): { code: string; message: string } {
  return (JSON.parse(raw.slice(raw.indexOf('\r\n\r\n') + 4)) as { error: { code: string; message: string } }).error;
}

function postHead(port: number, length: number, extra = ''): string {
  return `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nContent-Length: ${length}\r\n${extra}\r\n`;
}

describe('slow clients (issue 13 item 1)', () => {
  it("a slow body holds no concurrency slot: with every slot's worth of slow bodies open, normal requests are served", async () => {
    const g = await start({ limits: { max_concurrent_requests: 2, body_timeout_ms: 60_000 } });
    const port = Number(new URL(g.url).port);
    const slow = Array.from({ length: 6 }, () => rawRequest(port, `${postHead(port, 1000)}{"model": "demo", `));
    await until(() => g.server.inflight === 0, 'slow connections open');
    for (let i = 0; i < 4; i++)
      expect((await post(`${g.url}/v1/chat/completions`, chat(`normal ${i}`))).status).toBe(200);
    for (const s of slow) s.socket.destroy();
  });

  it('headers that do not arrive in time get 408 with an error object', async () => {
    const g = await start({ limits: { header_timeout_ms: 200 } });
    const port = Number(new URL(g.url).port);
    const { answer } = rawRequest(port, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n`); // never the blank line
    const raw = await answer;
    expect(statusOf(raw)).toBe(408);
    expect(errorOf(raw).code).toBe('KVG_ERR_CLIENT_TIMEOUT');
  });

  it('one client address holds at most max_pending_connections_per_client incomplete requests; others are unaffected', async () => {
    const g = await start({ limits: { max_pending_connections_per_client: 3, body_timeout_ms: 60_000 } });
    const port = Number(new URL(g.url).port);
    // 127.0.0.2 is another loopback address: another client.
    const slow = Array.from({ length: 3 }, () =>
      rawRequest(port, `${postHead(port, 1000)}{"model"`, { localAddress: '127.0.0.2' }),
    );
    await until(() => slow.every((s) => s.socket.bytesWritten > 0), 'slow clients connected');
    const extra = rawRequest(port, `${postHead(port, 2)}{}`, { localAddress: '127.0.0.2' });
    const raw = await extra.answer;
    expect(statusOf(raw)).toBe(429);
    expect(raw.toLowerCase()).toContain('connection: close');
    expect(errorOf(raw).code).toBe('KVG_ERR_TOO_MANY_CONNECTIONS');
    expect((await post(`${g.url}/v1/chat/completions`, chat('another client'))).status).toBe(200);
    slow[0]!.socket.destroy();
    const again = (): Promise<string> =>
      rawRequest(port, `${postHead(port, 2, 'Connection: close\r\n')}{}`, { localAddress: '127.0.0.2' }).answer;
    await until(async () => statusOf(await again()) === 400, 'room again');
    for (const s of slow) s.socket.destroy();
  });
});

describe('client input that gave 500s (issue 13 item 11)', () => {
  it('GET /v1/models/%ZZ is a 400', async () => {
    const g = await start();
    const r = await fetch(`${g.url}/v1/models/%ZZ`);
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe('KVG_ERR_INVALID_REQUEST');
  });

  it('tools nested 10,000 levels deep are a 400, and the server keeps serving', async () => {
    const g = await start({ limits: { max_body_bytes: 1 << 20, max_prompt_tokens: 2000, max_concurrent_requests: 4 } });
    const deep = `${'['.repeat(10_000)}${']'.repeat(10_000)}`;
    const body = `{"model": "demo", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": ${deep}}}]}`;
    const r = await post(`${g.url}/v1/chat/completions`, body);
    expect(r.status).toBe(400);
    expect(r.json.error.code).toBe('KVG_ERR_INVALID_REQUEST');
    expect(r.json.error.message).toMatch(/deeper than 100 levels/);
    // Brackets inside strings are text, not nesting.
    expect((await post(`${g.url}/v1/chat/completions`, chat('{['.repeat(200)))).status).toBe(200);
  });
});

describe('contradictory pins (issue 13 item 13)', () => {
  it('each contradiction is a 400 naming both fields; an empty or unknown allow-list is a 400, not a 503', async () => {
    const g = await start();
    const cases: {
      name: string;
      body: Record<string, unknown>;
      headers?: Record<string, string>;
      code: string;
      param: string;
      mentions?: string;
    }[] = [
      {
        name: 'two pin headers',
        body: chat('x'),
        headers: { 'x-worker-instance-id': '3', 'x-dynamo-worker-instance-id': '2' },
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'x-dynamo-worker-instance-id',
        mentions: 'x-worker-instance-id',
      },
      {
        name: 'backend vs decode',
        body: chat('x', { nvext: { backend_instance_id: 1, decode_worker_id: 2 } }),
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'nvext.decode_worker_id',
        mentions: 'nvext.backend_instance_id',
      },
      {
        name: 'unknown decode worker on an aggregated model',
        body: chat('x', { nvext: { decode_worker_id: 99 } }),
        code: 'KVG_ERR_UNKNOWN_WORKER',
        param: 'nvext.decode_worker_id',
      },
      {
        name: 'pin outside the allow-list',
        body: chat('x', { nvext: { backend_instance_id: 1, allowed_worker_ids: [2, 3] } }),
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'nvext.backend_instance_id',
        mentions: 'nvext.allowed_worker_ids',
      },
      {
        name: 'header pin outside the allow-list',
        body: chat('x', { nvext: { allowed_worker_ids: [2] } }),
        headers: { 'x-worker-instance-id': '3' },
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'x-worker-instance-id',
        mentions: 'nvext.allowed_worker_ids',
      },
      {
        name: 'empty allow-list',
        body: chat('x', { nvext: { allowed_worker_ids: [] } }),
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'nvext.allowed_worker_ids',
      },
      {
        name: 'allow-list of unknown ids',
        body: chat('x', { nvext: { allowed_worker_ids: [77, 78] } }),
        code: 'KVG_ERR_INVALID_REQUEST',
        param: 'nvext.allowed_worker_ids',
      },
    ];
    for (const c of cases) {
      const r = await post(`${g.url}/v1/chat/completions`, c.body, c.headers);
      expect(r.status, c.name).toBe(400);
      expect(r.json.error.code, c.name).toBe(c.code);
      expect(r.json.error.param, c.name).toBe(c.param);
      if (c.mentions !== undefined) expect(r.json.error.message, c.name).toContain(c.mentions);
    }
    expect(g.routers.demo.routed.length).toBe(0);
    // Agreeing pins and a pin inside the allow-list are served.
    const ok = await post(
      `${g.url}/v1/chat/completions`,
      chat('x', { nvext: { backend_instance_id: 2, decode_worker_id: 2, allowed_worker_ids: [2, 77] } }),
      { 'x-worker-instance-id': '2', 'x-dynamo-worker-instance-id': '2' },
    );
    expect(ok.status).toBe(200);
    expect(ok.headers.get('x-kvgate-worker')).toBe('2');
  });
});

describe('the 413 can be read (issue 13 item 16)', () => {
  it("Node's fetch streaming an oversized body sees the 413 twenty times out of twenty", async () => {
    const g = await start();
    const chunk = new Uint8Array(256 * 1024).fill(0x20);
    const outcomes: (number | string)[] = [];
    for (let i = 0; i < 20; i++) {
      const body = new ReadableStream<Uint8Array>({
        async start(c) {
          for (let k = 0; k < 16; k++) {
            c.enqueue(chunk);
            await new Promise((r) => setImmediate(r));
          }
          c.close();
        },
      });
      try {
        const r = await fetch(`${g.url}/v1/chat/completions`, { method: 'POST', body, duplex: 'half' } as RequestInit);
        outcomes.push(r.status);
        expect(((await r.json()) as { error: { code: string } }).error.code).toBe('KVG_ERR_BODY_TOO_LARGE');
      } catch (err) {
        outcomes.push(String((err as { cause?: { code?: string } }).cause?.code ?? err));
      }
    }
    expect(outcomes).toEqual(Array(20).fill(413));
  });
});

describe('smaller edge cases (issue 13 item 17)', () => {
  it('a second Authorization header is refused even when the first is valid', async () => {
    const g = await start({ auth: { api_keys: [KEY] } });
    const port = Number(new URL(g.url).port);
    const body = JSON.stringify(chat('hi'));
    const { answer } = rawRequest(
      port,
      `${postHead(port, Buffer.byteLength(body), `Authorization: Bearer ${KEY}\r\nAuthorization: Bearer wrong-key-000000\r\nConnection: close\r\n`)}${body}`,
    );
    const raw = await answer;
    expect(statusOf(raw)).toBe(400);
    expect(errorOf(raw)).toMatchObject({ code: 'KVG_ERR_INVALID_REQUEST' });
    expect(errorOf(raw).message).toMatch(/Authorization header must be given once/);
  });

  it('a gzip body is decoded within the body limit; a gzip bomb is a 413; other encodings are a 415', async () => {
    const g = await start();
    const gz = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' },
      body: gzipSync(JSON.stringify(chat('zipped'))),
    });
    expect(gz.status).toBe(200);
    expect(g.routers.demo.routed[0]!.body).toEqual(chat('zipped'));
    const bomb = gzipSync(JSON.stringify(chat(' '.repeat(10 * 1024 * 1024))));
    expect(bomb.length).toBeLessThan(64 * 1024);
    const big = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-encoding': 'gzip' },
      body: bomb,
    });
    expect(big.status).toBe(413);
    const zstd = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-encoding': 'zstd' },
      body: 'x',
    });
    expect(zstd.status).toBe(415);
    expect(((await zstd.json()) as { error: { code: string } }).error.code).toBe('KVG_ERR_UNSUPPORTED_ENCODING');
  });

  it('invalid UTF-8 in a JSON body is a 400, not silently replaced', async () => {
    const g = await start();
    const bytes = Buffer.concat([
      Buffer.from('{"model": "demo", "messages": [{"role": "user", "content": "a'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from('"}]}'),
    ]);
    const r = await fetch(`${g.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: bytes,
    });
    expect(r.status).toBe(400);
    expect(((await r.json()) as { error: { code: string; message: string } }).error).toMatchObject({
      code: 'KVG_ERR_INVALID_JSON',
      message: 'the request body is not valid UTF-8',
    });
    expect(g.routers.demo.routed.length).toBe(0);
  });

  it('Expect: bogus gets 417 with an error object', async () => {
    const g = await start();
    const port = Number(new URL(g.url).port);
    const { answer } = rawRequest(port, `${postHead(port, 2, 'Expect: bogus\r\n')}{}`);
    const raw = await answer;
    expect(statusOf(raw)).toBe(417);
    expect(errorOf(raw).code).toBe('KVG_ERR_EXPECTATION_FAILED');
  });
});

describe('requests Node cannot parse (audit g)', () => {
  const body = JSON.stringify(chat('smuggled'));
  const h = (port: number): string => `Host: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n`;
  const chunked = `${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  const cases: { name: string; head: (port: number) => string; status: number; code: string; reason?: RegExp }[] = [
    {
      name: 'Content-Length and Transfer-Encoding',
      head: (p) =>
        `POST /v1/chat/completions HTTP/1.1\r\n${h(p)}Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n${chunked}`,
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
      reason: /Transfer-Encoding/,
    },
    {
      name: 'two Content-Lengths',
      head: (p) =>
        `POST /v1/chat/completions HTTP/1.1\r\n${h(p)}Content-Length: ${body.length}\r\nContent-Length: 5\r\n\r\n${body}`,
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
    },
    {
      name: 'an invalid chunk size',
      head: (p) =>
        `POST /v1/chat/completions HTTP/1.1\r\n${h(p)}Transfer-Encoding: chunked\r\n\r\nzz\r\n${body}\r\n0\r\n\r\n`,
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
    },
    {
      name: 'obsolete line folding',
      head: (p) =>
        `POST /v1/chat/completions HTTP/1.1\r\n${h(p)}Transfer-Encoding:\r\n chunked\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
      status: 400,
      code: 'KVG_ERR_INVALID_REQUEST',
    },
    {
      name: 'a 20 KB header',
      head: (p) => `POST /v1/chat/completions HTTP/1.1\r\n${h(p)}X-Big: ${'a'.repeat(20_000)}\r\n\r\n`,
      status: 431,
      code: 'KVG_ERR_HEADERS_TOO_LARGE',
      reason: /larger than the limit of \d+ bytes/,
    },
    {
      name: '3,000 headers',
      head: (p) =>
        `POST /v1/chat/completions HTTP/1.1\r\n${h(p)}${Array.from({ length: 3000 }, (_, i) => `X-H${i}: v\r\n`).join('')}\r\n`,
      status: 431,
      code: 'KVG_ERR_HEADERS_TOO_LARGE',
    },
  ];

  it('each is answered with its status and an error object, the connection is closed, and nothing is routed', async () => {
    const g = await start();
    const port = Number(new URL(g.url).port);
    for (const c of cases) {
      const raw = await rawRequest(port, c.head(port)).answer;
      expect(statusOf(raw), c.name).toBe(c.status);
      expect(raw.toLowerCase(), c.name).toContain('connection: close');
      const err = errorOf(raw);
      expect(err.code, c.name).toBe(c.code);
      if (c.reason !== undefined) expect(err.message, c.name).toMatch(c.reason);
    }
    expect(g.routers.demo.routed.length).toBe(0);
    const scrape = await (await fetch(`${g.url}/metrics`)).text();
    expect(scrape).toMatch(/kvgate_http_rejections_total\{code="KVG_ERR_HEADERS_TOO_LARGE"\} 2/);
  });

  it('an HTTP/1.0 request with Transfer-Encoding is a 400 and the connection closes, keep-alive asked or not (RFC 9112, 6.1)', async () => {
    const g = await start();
    const port = Number(new URL(g.url).port);
    const head = (extra: string): string =>
      `POST /v1/chat/completions HTTP/1.0\r\n${h(port)}Transfer-Encoding: chunked\r\n${extra}\r\n${chunked}`;
    // The second: keep-alive asked, and a request pipelined behind the body, which must not be answered.
    const heads = [head(''), `${head('Connection: keep-alive\r\n')}GET /health HTTP/1.1\r\nHost: x\r\n\r\n`];
    for (const text of heads) {
      const raw = await rawRequest(port, text).answer;
      expect(statusOf(raw), raw).toBe(400);
      expect([...raw.matchAll(/HTTP\/1\.1 \d{3} /g)].length).toBe(1);
      expect(raw.toLowerCase()).toContain('connection: close');
      const err = errorOf(raw) as { code: string; message: string; param?: string };
      expect(err).toMatchObject({ code: 'KVG_ERR_INVALID_REQUEST', param: 'transfer-encoding' });
      expect(err.message).toMatch(/HTTP\/1\.0 request may not carry Transfer-Encoding.*RFC 9112, section 6\.1/);
    }
    expect(g.routers.demo.routed.length).toBe(0);
    const scrape = await (await fetch(`${g.url}/metrics`)).text();
    expect(scrape).toMatch(/kvgate_http_rejections_total\{code="KVG_ERR_INVALID_REQUEST"\} 2/);
    // HTTP/1.0 without Transfer-Encoding is served.
    const b = JSON.stringify(chat('one-oh'));
    const plain = `POST /v1/chat/completions HTTP/1.0\r\n${h(port)}Content-Length: ${b.length}\r\n\r\n${b}`;
    expect(statusOf(await rawRequest(port, plain).answer)).toBe(200);
  });

  it('pipelined requests on one connection, a stream among them, are answered in order', async () => {
    const g = await start();
    const port = Number(new URL(g.url).port);
    const one = (id: string, extra: Record<string, unknown> = {}, close = ''): string => {
      const b = JSON.stringify(chat(id, extra));
      return `${postHead(port, Buffer.byteLength(b), `X-Request-Id: ${id}\r\n${close}`)}${b}`;
    };
    const raw = await rawRequest(
      port,
      one('first') + one('second', { stream: true }) + one('third', {}, 'Connection: close\r\n'),
    ).answer;
    expect([...raw.matchAll(/x-request-id: (\S+)/g)].map((m) => m[1])).toEqual(['first', 'second', 'third']);
    expect([...raw.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1])).toEqual(['200', '200', '200']);
    expect(g.routers.demo.routed.length).toBe(3);
  });
});

describe('connections one client holds open (audit g)', () => {
  it('past max_connections_per_client, idle keep-alive ones included, a new connection is closed; others are served', async () => {
    const g = await start({ limits: { max_connections_per_client: 3, max_pending_connections_per_client: 8 } });
    const port = Number(new URL(g.url).port);
    const health = `GET /health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`;
    // Three connections from 127.0.0.2 that each served a request and stay open (keep-alive), idle.
    const idle = Array.from({ length: 3 }, () => rawRequest(port, health, { localAddress: '127.0.0.2' }));
    const got: string[] = ['', '', ''];
    idle.forEach((c, i) => c.socket.on('data', (d: Buffer) => (got[i] += d.toString('latin1'))));
    await until(() => got.every((t) => t.includes('{"status":"ok"}')), 'the idle connections served');
    const extra = rawRequest(port, `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, {
      localAddress: '127.0.0.2',
    });
    expect(await extra.answer).toBe('');
    expect((await fetch(`${g.url}/health`)).status).toBe(200); // another client
    const scrape = await (await fetch(`${g.url}/metrics`)).text();
    expect(scrape).toMatch(/kvgate_http_rejections_total\{code="KVG_ERR_TOO_MANY_CONNECTIONS"\} 1/);
    expect(scrape).toMatch(/kvgate_http_connections_refused_total\{limit="max_connections_per_client"\} 1/);
    idle[0]!.socket.destroy();
    const again = (): Promise<string> =>
      rawRequest(port, `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, { localAddress: '127.0.0.2' })
        .answer;
    await until(async () => statusOf(await again()) === 200, 'room again');
    for (const c of idle) c.socket.destroy();
  });
});

describe('connections the gateway holds open in all (audit h)', () => {
  it('past limits.max_connections a new connection is closed at accept, counted, logged once an episode; the admin listener is not bounded', async () => {
    const g = await start({
      limits: { max_connections: 4, max_connections_per_client: 2 },
      admin: { enabled: true, port: 0 },
    });
    const warn = vi.spyOn(g.server.logger, 'warn');
    const info = vi.spyOn(g.server.logger, 'info');
    const port = Number(new URL(g.url).port);
    const health = `GET /health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`;
    // Two clients at their own bound of two idle keep-alive connections each: the gateway's four.
    const idle = ['127.0.0.2', '127.0.0.2', '127.0.0.3', '127.0.0.3'].map((a) =>
      rawRequest(port, health, { localAddress: a }),
    );
    const got = idle.map(() => '');
    idle.forEach((c, i) => c.socket.on('data', (d: Buffer) => (got[i] += d.toString('latin1'))));
    await until(() => got.every((t) => t.includes('{"status":"ok"}')), 'the idle connections served');
    const close = `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`;
    // A third client, twice: closed unanswered.
    for (let i = 0; i < 2; i++) expect(await rawRequest(port, close, { localAddress: '127.0.0.4' }).answer).toBe('');
    const refused = async (): Promise<string> =>
      (await g.server.metrics.registry.getSingleMetricAsString('kvgate_http_connections_refused_total'))
        .split('\n')
        .at(-1)!;
    expect(await refused()).toBe('kvgate_http_connections_refused_total{limit="max_connections"} 2');
    const capLines = (spy: typeof warn): unknown[][] =>
      spy.mock.calls.filter((c) => String(c[1]).includes('limits.max_connections'));
    expect(capLines(warn)).toHaveLength(1);
    // The admin listener still answers probes and scrapes.
    expect((await fetch(`${g.adminUrl!}/health`)).status).toBe(200);
    expect((await fetch(`${g.adminUrl!}/metrics`)).status).toBe(200);
    idle[0]!.socket.destroy();
    await until(
      async () => statusOf(await rawRequest(port, close, { localAddress: '127.0.0.4' }).answer) === 200,
      'room again',
    );
    expect(capLines(info)).toHaveLength(1);
    // Tries before the gateway saw the close were refused too: the episode's count is the counter's.
    const total = Number((await refused()).split(' ')[1]);
    expect(capLines(info)[0]![0]).toMatchObject({ refused: total });
    expect(capLines(warn)).toHaveLength(1);
    for (const c of idle) c.socket.destroy();
  });
});
