/**
 * Issue 23, section 2, items 1 and 3, against `kvgate serve` in front of a
 * `kvgate mocker` engine (real processes, real sockets):
 *
 * - many slow bodies from one address: behind a proxy, the per-client bound
 *   keyed on a forwarding header turns away only the client the proxy names;
 *   with the bound off, the probes from that address are served; and the
 *   body deadline closes every slow body, however it trickles;
 * - a UTF-8 byte order mark before the JSON is skipped as vLLM skips it (the
 *   engine gets the body without it); two Host headers are a 400.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import {
  completionChunk,
  sendJson,
  sseEvent,
  sseHead,
  startHttpEngine,
  type HttpEngine,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

/** A raw client connection: what it wrote, what came back, whether the server closed it. */
interface Raw {
  readonly socket: Socket;
  /** Everything received until the server closed the connection. */
  readonly answer: Promise<string>;
  closedByServer: boolean;
}

function raw(port: number, text: string | Buffer): Raw {
  const socket = connect({ host: '127.0.0.1', port });
  socket.on('error', () => undefined);
  const r: Raw = {
    socket,
    closedByServer: false,
    answer: new Promise<string>((resolve) => {
      let got = '';
      socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
      socket.on('end', () => (r.closedByServer = true));
      socket.on('close', () => resolve(got));
    }),
  };
  socket.write(text);
  return r;
}

const statusOf = (answer: string): number => Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
const errorOf = (answer: string): { code: string; message: string; param: string | null } =>
  (
    JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as {
      error: { code: string; message: string; param: string | null };
    }
  ).error;

/** The head of a completion whose body (`length` bytes) is still to come. */
const slowHead = (headers = ''): string =>
  `POST /v1/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n${headers}\r\n{`;

describe('slow bodies from one address (issue 23, section 2, item 1)', () => {
  let suite: MockerSuite;
  let model: string;
  const open: Raw[] = [];

  beforeAll(async () => {
    suite = await startMockerSuite('edge-clients', ['--speedup', '1000', '--no-kv-events'], 1);
    model = suite.engines[0]!.model;
  });
  afterAll(async () => {
    for (const r of open) r.socket.destroy();
    await suite?.stop();
  });

  async function gateway(name: string, limits: string): Promise<{ url: string; port: number }> {
    const workers = ['workers:', `  - { id: 1, url: "${suite.engines[0]!.url}" }`];
    const file = suite.write(
      `${name}.yaml`,
      serveConfig(model, ['router_mode: round-robin', ...workers], ['preprocess: { threads: 0 }', `limits: ${limits}`]),
    );
    const { proc, url } = await startServeCli(file);
    suite.procs.push(proc);
    return { url, port: Number(new URL(url).port) };
  }

  /** A probe completion with `headers`; resolves with its status and error code. */
  async function probe(
    url: string,
    headers: Record<string, string> = {},
  ): Promise<{ status: number; code?: string; retryAfter: string | null }> {
    const body = JSON.stringify({ model, prompt: 'probe', max_tokens: 2 });
    const r = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body,
    });
    const answer = (await r.json()) as { error?: { code: string } };
    return { status: r.status, code: answer.error?.code, retryAfter: r.headers.get('retry-after') };
  }

  it("behind a proxy, 300 slow bodies from one client hold only that client's share; the proxy's other clients are served", async () => {
    const { url, port } = await gateway(
      'proxy',
      '{ client_address: "header:X-Forwarded-For", trusted_proxies: [127.0.0.0/8], max_pending_connections_per_client: 50, body_timeout_ms: 60000 }',
    );
    // All 300 come through the proxy (127.0.0.1) for one client; 50 are held, the other 250 are answered 429 and closed.
    const slow = Array.from({ length: 300 }, () => raw(port, slowHead('X-Forwarded-For: 203.0.113.7\r\n')));
    open.push(...slow);
    await until(
      () => slow.filter((r) => r.closedByServer).length === 250,
      "the 250 slow bodies over the client's bound answered",
      30_000,
    );
    const refused = await Promise.all(slow.filter((r) => r.closedByServer).map((r) => r.answer));
    expect(new Set(refused.map((a) => `${statusOf(a)} ${errorOf(a).code}`))).toEqual(
      new Set(['429 KVG_ERR_TOO_MANY_CONNECTIONS']),
    );
    expect(refused.every((a) => /\r\nretry-after: 1\r\n/i.test(a) && /\r\nconnection: close\r\n/i.test(a))).toBe(true);
    expect(await metric(url, 'kvgate_http_pending_connections')).toBe(50);
    // The proxy's other clients are served; the slow client, even writing its own X-Forwarded-For, is not.
    for (let i = 1; i <= 10; i++) expect((await probe(url, { 'x-forwarded-for': `198.51.100.${i}` })).status).toBe(200);
    const refusedProbe = { status: 429, code: 'KVG_ERR_TOO_MANY_CONNECTIONS', retryAfter: '1' };
    expect(await probe(url, { 'x-forwarded-for': '203.0.113.7' })).toMatchObject(refusedProbe);
    expect(await probe(url, { 'x-forwarded-for': '198.51.100.99, 203.0.113.7' })).toMatchObject(refusedProbe);
    // The 50 within the bound are still open, waiting for their bodies.
    expect(slow.filter((r) => !r.closedByServer && !r.socket.destroyed)).toHaveLength(50);
  }, 60_000);

  it('with the per-client bound off, probes from the address holding 300 slow bodies are served', async () => {
    const { url, port } = await gateway(
      'off',
      '{ client_address: "off", max_pending_connections_per_client: 50, body_timeout_ms: 60000 }',
    );
    const slow = Array.from({ length: 300 }, () => raw(port, slowHead()));
    open.push(...slow);
    await until(
      async () => (await metric(url, 'kvgate_http_pending_connections')) === 300,
      'the 300 slow bodies pending',
      30_000,
    );
    for (let i = 0; i < 10; i++) expect((await probe(url)).status).toBe(200);
    expect(slow.filter((r) => r.closedByServer)).toHaveLength(0);
  }, 60_000);

  it('limits.body_deadline_ms closes every slow body, however short its pauses: 408 with its code, then the connection closes', async () => {
    const { url, port } = await gateway('deadline', '{ body_deadline_ms: 1500, body_timeout_ms: 60000 }');
    const slow = Array.from({ length: 100 }, () => raw(port, slowHead()));
    open.push(...slow);
    // Each trickles a byte every 100 ms (well within the pause bound) until the gateway answers.
    const trickle = setInterval(() => {
      for (const r of slow) if (!r.closedByServer && !r.socket.destroyed) r.socket.write(' ');
    }, 100);
    try {
      const answers = await Promise.all(slow.map((r) => r.answer));
      expect(new Set(answers.map((a) => `${statusOf(a)} ${errorOf(a).code} ${errorOf(a).message}`))).toEqual(
        new Set(['408 KVG_ERR_CLIENT_TIMEOUT the request body did not arrive within 1500 ms']),
      );
      expect(slow.every((r) => r.closedByServer)).toBe(true);
    } finally {
      clearInterval(trickle);
    }
    expect(await metric(url, 'kvgate_http_rejections_total', { code: 'KVG_ERR_CLIENT_TIMEOUT' })).toBe(100);
    expect(await metric(url, 'kvgate_http_pending_connections')).toBe(0);
    expect((await probe(url)).status).toBe(200);
  }, 60_000);
});

describe('malformed requests (issue 23, section 2, item 3)', () => {
  let suite: MockerSuite;
  let engine: HttpEngine;

  beforeAll(async () => {
    suite = await startMockerSuite('edge-input', ['--no-kv-events'], 1);
    // An engine that records the bytes it is sent, to see what the gateway forwards.
    engine = await startHttpEngine((req, res) => {
      if (req.url === '/v1/models') return sendJson(res, 200, { object: 'list', data: [{ id: 'm', object: 'model' }] });
      if (req.url !== '/v1/completions') return sendJson(res, 200, {});
      sseHead(res);
      res.end(`${sseEvent(completionChunk('ok', 'length'))}${sseEvent('[DONE]')}`);
    });
  });
  afterAll(async () => {
    await engine?.close();
    await suite?.stop();
  });

  it('a UTF-8 byte order mark before the JSON is skipped, as vLLM does, and the engine gets the body without it; two are a 400', async () => {
    const file = suite.write(
      'bom.yaml',
      serveConfig('m', ['router_mode: round-robin', 'workers:', `  - { id: 1, url: "${engine.url}" }`]),
    );
    const { proc, url } = await startServeCli(file);
    suite.procs.push(proc);
    const json = JSON.stringify({ model: 'm', prompt: 'with a byte order mark', max_tokens: 2 });
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const post = (body: Buffer): Promise<Response> =>
      fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const ok = await post(Buffer.concat([bom, Buffer.from(json)]));
    expect(ok.status).toBe(200);
    const forwarded = engine.requests.filter((r) => r.url === '/v1/completions').at(-1)!.rawBody;
    expect(forwarded.startsWith('{')).toBe(true);
    expect(forwarded).not.toContain('\ufeff');
    const two = await post(Buffer.concat([bom, bom, Buffer.from(json)]));
    expect(two.status).toBe(400);
    const { error } = (await two.json()) as { error: { code: string; message: string } };
    expect(error.code).toBe('KVG_ERR_INVALID_JSON');
    expect(error.message).toMatch(/two byte order marks; JSON allows none \(RFC 8259\)/);
  });

  it('a request with two Host headers is a 400 on every route (RFC 9112, section 3.2)', async () => {
    const [mocker] = suite.engines;
    const file = suite.write(
      'host.yaml',
      serveConfig(mocker!.model, ['router_mode: round-robin', 'workers:', `  - { id: 1, url: "${mocker!.url}" }`]),
    );
    const { proc, url } = await startServeCli(file);
    suite.procs.push(proc);
    const port = Number(new URL(url).port);
    const body = JSON.stringify({ model: mocker!.model, prompt: 'two hosts', max_tokens: 2 });
    const requests = [
      `POST /v1/completions HTTP/1.1\r\nHost: kvgate\r\nHost: other.example\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
      'GET /health HTTP/1.1\r\nHost: kvgate\r\nhost: kvgate\r\nConnection: close\r\n\r\n',
      'GET /v1/nowhere HTTP/1.1\r\nHost: a\r\nHOST: b\r\nConnection: close\r\n\r\n',
    ];
    for (const text of requests) {
      const answer = await raw(port, text).answer;
      expect(statusOf(answer), answer).toBe(400);
      expect(errorOf(answer)).toMatchObject({ code: 'KVG_ERR_INVALID_REQUEST', param: 'host' });
      expect(errorOf(answer).message).toMatch(/more than one Host header.*RFC 9112/);
    }
    // One Host is fine.
    expect(statusOf(await raw(port, 'GET /health HTTP/1.1\r\nHost: kvgate\r\nConnection: close\r\n\r\n').answer)).toBe(
      200,
    );
  });
});
