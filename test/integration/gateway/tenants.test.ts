/**
 * Tenant classes end to end: `kvgate serve` (KV routing, the router queue on) in front of one slow `kvgate mocker`
 * engine, real processes over real sockets. The engine prefills for seconds, so while one request prefills the
 * next ones wait in the router queue (one request per worker: `tenants.queue_limit_per_worker: 1`), and each step
 * below waits on `/metrics` for the state it needs, never on a sleep.
 *
 * Tenants come from API keys (acme: class free, beta: class team) or, for a key that names none, `other` (the
 * default class, team). The free class has a rate limit of one request per 100 s: acme's second request is
 * refused with 429 and a Retry-After of the bucket's wait. A full queue sheds the class most over its share with
 * 529 and Retry-After: a team request takes the place of acme's queued one (free is over its share), and beta's
 * request, whose own class is then the fuller, is refused. Everything is counted per tenant, under declared
 * tenant names and `other` only.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const KEY_ACME = 'acme-key-0001';
const KEY_BETA = 'beta-key-0002';
const KEY_GUEST = 'guest-key-0003';

let suite: MockerSuite;
let url: string;

beforeAll(async () => {
  // Step times x250: a prompt's prefill takes about 4 s, the window every step below runs in.
  suite = await startMockerSuite('tenants', ['--speedup', '0.004', '--tokenizer', 'demo'], 1);
  const e = suite.engines[0]!;
  const file = suite.write(
    'serve.yaml',
    serveConfig(
      MODEL,
      [
        'router_mode: kv',
        'router: { router_queue_threshold: 1.0 }',
        'workers:',
        `  - ${workerEntry(1, e).replace(/ }$/, ', max_num_batched_tokens: 10 }')}`,
      ],
      [
        'preprocess: { threads: 0 }',
        `auth: { api_keys: [${KEY_ACME}, ${KEY_BETA}, ${KEY_GUEST}] }`,
        'tenants:',
        '  default_class: team',
        '  queue_limit_per_worker: 1',
        '  classes:',
        '    - { name: team, weight: 2 }',
        '    - { name: free, weight: 1, request_rate: 0.01, request_burst: 1 }',
        '  members:',
        `    - { name: acme, class: free, api_keys: [${KEY_ACME}] }`,
        `    - { name: beta, class: team, api_keys: [${KEY_BETA}] }`,
      ],
    ),
  );
  const gw = await startServeCli(file);
  suite.procs.push(gw.proc);
  url = gw.url;
}, 60_000);

afterAll(async () => {
  await suite?.stop();
});

function chat(key: string, tag: string): Promise<Response> {
  return fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({
      model: MODEL,
      messages: [{ role: 'user', content: `${tag} tell me about the weather in twenty words or so today` }],
      max_tokens: 1,
    }),
  });
}

const queued = (tenant: string): Promise<number> => metric(url, 'kvgate_tenant_queued_requests', { tenant });

async function errorCode(res: Response): Promise<string> {
  return ((await res.json()) as { error: { code: string } }).error.code;
}

describe('tenants over real sockets', () => {
  it('rate-limits per tenant (429) and sheds the class over its share when the queue is full (529)', async () => {
    // beta's request prefills; the worker is busy (its prompt is over the 10-token budget).
    const first = chat(KEY_BETA, 'one');
    await until(async () => (await metric(url, 'kvgate_router_requests_started_total')) >= 1, 'beta dispatched');
    // acme's waits in the queue, which is now full (one request per worker).
    const acmeQueued = chat(KEY_ACME, 'two');
    await until(async () => (await queued('acme')) === 1, "acme's request queued", 10_000);

    const limited = await chat(KEY_ACME, 'three');
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('100');
    expect(await errorCode(limited)).toBe('KVG_ERR_RATE_LIMITED');

    // A guest (no tenant of its own: other, class team) takes acme's place: free is the class over its share.
    const guest = chat(KEY_GUEST, 'four');
    const shed = await acmeQueued;
    expect(shed.status).toBe(529);
    expect(shed.headers.get('retry-after')).toBe('1');
    expect(await errorCode(shed)).toBe('KVG_ERR_QUEUE_SHED');
    await until(async () => (await queued('other')) === 1, "the guest's request queued", 10_000);

    // Now team holds the queue: beta's newcomer is the one refused, not the guest's earlier request.
    const refused = await chat(KEY_BETA, 'five');
    expect(refused.status).toBe(529);
    expect(await errorCode(refused)).toBe('KVG_ERR_QUEUE_SHED');

    expect((await first).status).toBe(200);
    expect((await guest).status).toBe(200);

    const text = await (await fetch(`${url}/metrics`)).text();
    const sample = (name: string, tenant: string): Promise<number> => metric(url, name, { tenant });
    expect(await sample('kvgate_tenant_requests_rate_limited_total', 'acme')).toBe(1);
    expect(await sample('kvgate_tenant_requests_shed_total', 'acme')).toBe(1);
    expect(await sample('kvgate_tenant_requests_shed_total', 'beta')).toBe(1);
    expect(await sample('kvgate_tenant_requests_shed_total', 'other')).toBe(0);
    expect(await sample('kvgate_tenant_requests_admitted_total', 'beta')).toBe(2);
    expect(await sample('kvgate_tenant_requests_admitted_total', 'acme')).toBe(1);
    expect(await sample('kvgate_tenant_requests_admitted_total', 'other')).toBe(1);
    expect(await queued('acme')).toBe(0);
    expect(await queued('other')).toBe(0);
    const labels = new Set([...text.matchAll(/tenant="([^"]*)"/g)].map((m) => m[1]));
    expect([...labels].sort()).toEqual(['acme', 'beta', 'other']);
  }, 60_000);

  it('refuses a tenant over its request rate before its body is parsed or tokenized', async () => {
    // acme spent its one request above; its class refills one per 100 s. Its bodies are not read as JSON now: a
    // malformed one and a 200 KB prompt get the same 429 (before the rate was checked after preprocessing, the
    // first was a 400 and the second was parsed and tokenized to be refused).
    const post = (key: string, body: string): Promise<Response> =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body,
      });
    const long = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'weather '.repeat(25_000) }] });
    for (const body of ['{"model": ', long]) {
      const res = await post(KEY_ACME, body);
      expect(res.status).toBe(429);
      expect(await errorCode(res)).toBe('KVG_ERR_RATE_LIMITED');
      const after = Number(res.headers.get('retry-after'));
      expect(after).toBeGreaterThanOrEqual(1);
      expect(after).toBeLessThanOrEqual(100);
    }
    expect(await metric(url, 'kvgate_tenant_requests_rate_limited_total', { tenant: 'acme' })).toBe(3);
    // A tenant within its limits still gets its malformed body's own answer.
    const bad = await post(KEY_BETA, '{"model": ');
    expect(bad.status).toBe(400);
    expect(await errorCode(bad)).toBe('KVG_ERR_INVALID_JSON');
  }, 30_000);
});
