/**
 * The router queue's priority hint (`nvext.agent_hints.priority`) end to end: `kvgate serve` (KV routing, the router
 * queue on) in front of one slow `kvgate mocker` engine, real processes over real sockets. The engine prefills for
 * seconds, so while one request prefills the next ones wait in the router queue, and leave it one by one in its
 * order; each answers with one token, so they answer in that order. Each step waits on `/metrics`, never a sleep.
 *
 * Without `tenants`, every client is the tenant `other` of the default class, whose `max_priority_jump` is 10 s: a
 * request asking for a jump of a million seconds is clamped to 10 and no longer overtakes one queued before it with
 * 10; the clamp is counted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import {
  postChat,
  serveConfig,
  serveInSuite,
  startMockerSuite,
  workerEntry,
  type MockerSuite,
} from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';

let suite: MockerSuite;
let url: string;

beforeAll(async () => {
  // Step times x250: a prompt's prefill takes about 4 s, the window each step below runs in.
  suite = await startMockerSuite('priority-jump', ['--speedup', '0.004', '--tokenizer', 'demo'], 1);
  const e = suite.engines[0]!;
  const lines = [
    'router_mode: kv',
    'router: { router_queue_threshold: 1.0 }',
    'workers:',
    `  - ${workerEntry(1, e).replace(/ }$/, ', max_num_batched_tokens: 10 }')}`,
  ];
  url = await serveInSuite(suite, suite.write('serve.yaml', serveConfig(MODEL, lines)));
}, 60_000);

afterAll(async () => {
  await suite?.stop();
});

const chat = (tag: string, nvext?: Record<string, unknown>): Promise<Response> =>
  postChat(url, {
    model: MODEL,
    messages: [{ role: 'user', content: `${tag} tell me about the weather in twenty words or so today` }],
    max_tokens: 1,
    ...(nvext !== undefined ? { nvext } : {}),
  });

const pending = (): Promise<number> => metric(url, 'kvgate_router_queue_pending_requests');

describe('the router queue priority hint', () => {
  it("is clamped to the class's max_priority_jump: a huge one no longer overtakes a request queued before it", async () => {
    // The first request prefills; the worker is busy (its prompt is over the 10-token budget).
    const order: string[] = [];
    const answered = (label: string) => async (r: Response) => {
      expect(r.status).toBe(200);
      await r.text();
      order.push(label);
    };
    const first = chat('holder').then(answered('holder'));
    await until(async () => (await metric(url, 'kvgate_router_requests_started_total')) >= 1, 'the holder dispatched');
    const early = chat('early', { agent_hints: { priority: 10 } }).then(answered('early'));
    await until(async () => (await pending()) === 1, 'the early request queued', 10_000);
    const jumper = chat('jumper', { agent_hints: { priority: 1_000_000 } }).then(answered('jumper'));
    await until(async () => (await pending()) === 2, 'the jumper queued', 10_000);
    await Promise.all([first, early, jumper]);
    expect(order).toEqual(['holder', 'early', 'jumper']);
    const clamped = { tenant: 'other', hint: 'priority_jump', action: 'clamped' };
    expect(await metric(url, 'kvgate_tenant_priority_limits_total', clamped)).toBe(1);
  }, 60_000);
});
