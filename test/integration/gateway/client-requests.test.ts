/**
 * `limits.max_concurrent_requests_per_client` against `kvgate serve` in front
 * of a `kvgate mocker` engine (real processes, real sockets): one client
 * holding its bound of streams open is refused the next with 429
 * KVG_ERR_TOO_MANY_CLIENT_REQUESTS while another client is served; once its
 * streams end (cut by the client, failed, or read to their end) it is admitted
 * again. Clients are told apart as behind a trusted proxy (X-Forwarded-For
 * from 127.0.0.1), the identity the pending-connection bound counts by.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLogLines, startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { openStream } from '../../helpers/drained-stream.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const HOG = '203.0.113.7';
const OTHER = '198.51.100.1';
const BOUND = 3;

describe('limits.max_concurrent_requests_per_client', () => {
  let suite: MockerSuite;
  let model: string;
  let url: string;
  let gateway: CliProcess;

  beforeAll(async () => {
    suite = await startMockerSuite('client-requests', ['--speedup', '1000', '--no-kv-events'], 1);
    model = suite.engines[0]!.model;
    const limits =
      '{ client_address: "header:X-Forwarded-For", trusted_proxies: [127.0.0.0/8], max_concurrent_requests: 16, ' +
      `max_concurrent_requests_per_client: ${BOUND} }`;
    const workers = ['router_mode: round-robin', 'workers:', `  - { id: 1, url: "${suite.engines[0]!.url}" }`];
    const file = suite.write(
      'serve.yaml',
      serveConfig(model, workers, ['preprocess: { threads: 0 }', `limits: ${limits}`]),
    );
    const started = await startServeCli(file);
    suite.procs.push(started.proc);
    ({ url, proc: gateway } = started);
  });
  afterAll(async () => {
    await suite?.stop();
  });

  /** The engine's answers stall after `n` tokens (null: they run to their end), for requests that start from now. */
  async function setStall(n: number | null): Promise<void> {
    const res = await fetch(`${suite.engines[0]!.url}/admin/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ stall_after_tokens: n }),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
  }

  /** A streamed completion sent through the proxy for `client`. */
  function stream(client: string, signal?: AbortSignal, name = model): Promise<Response> {
    return fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-for': client },
      body: JSON.stringify({ model: name, prompt: `a stream for ${client}`, max_tokens: 8, stream: true }),
      signal,
    });
  }

  const lines = (re: RegExp): Record<string, unknown>[] =>
    jsonLogLines(gateway).filter((l) => typeof l.msg === 'string' && re.test(l.msg));
  const refusals = (): Promise<number> =>
    metric(url, 'kvgate_http_rejections_total', { code: 'KVG_ERR_TOO_MANY_CLIENT_REQUESTS' });

  const atBound = (): Promise<number> => metric(url, 'kvgate_http_clients_at_request_bound');

  it('a client holding its bound of streams gets 429 on the next while another is served; it is admitted again once they end', async () => {
    expect(await atBound()).toBe(0);
    await setStall(1);
    const cut = new AbortController();
    const held = await Promise.all(Array.from({ length: BOUND }, () => stream(HOG, cut.signal)));
    for (const r of held) {
      expect(r.status).toBe(200);
      await openStream(r);
    }
    // The operator sees the client at its bound before anyone is refused.
    expect(await atBound()).toBe(1);
    // Over its bound: its own code, Retry-After, no engine address; twice, and logged once.
    for (let i = 0; i < 2; i++) {
      const refused = await stream(HOG);
      const text = await refused.text();
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(refused.headers.get('connection')).not.toBe('close');
      const { error } = JSON.parse(text) as { error: { code: string; message: string } };
      expect(error.code).toBe('KVG_ERR_TOO_MANY_CLIENT_REQUESTS');
      expect(error.message).toMatch(/holds 3 requests in flight/);
      expect(text).not.toContain(suite.engines[0]!.url);
      expect(text).not.toContain('127.0.0.1');
    }
    expect(await refusals()).toBe(2);
    // Another client of the same proxy is served meanwhile.
    const other = await stream(OTHER);
    expect(other.status).toBe(200);
    await openStream(other);
    const episode = /max_concurrent_requests_per_client requests in flight/;
    expect(lines(episode)).toEqual([expect.objectContaining({ client: HOG, maxConcurrentRequestsPerClient: BOUND })]);

    // The client cuts its streams: its slots come back (the other client's stream still holds one).
    cut.abort();
    await until(async () => (await metric(url, 'kvgate_http_inflight_requests')) === 1, "the hog's streams released");
    expect(await atBound()).toBe(0);
    expect(lines(/below limits.max_concurrent_requests_per_client again/)).toEqual([
      expect.objectContaining({ client: HOG, refused: 2 }),
    ]);
    await setStall(null);
    // Failed requests (an unknown model, answered after the slot was taken) give theirs back too.
    for (let i = 0; i < BOUND + 1; i++) {
      const failed = await stream(HOG, undefined, 'no-such-model');
      expect(failed.status).toBe(404);
      await failed.arrayBuffer();
    }
    // Streams read to their end give theirs back: twice the bound, one bound at a time, all admitted.
    for (let round = 0; round < 2; round++) {
      const answers = await Promise.all(Array.from({ length: BOUND }, () => stream(HOG)));
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200]);
      await Promise.all(answers.map(async (r) => (await openStream(r)).finish()));
    }
    expect(await refusals()).toBe(2);
    expect(lines(episode)).toHaveLength(1);
  }, 60_000);
});
