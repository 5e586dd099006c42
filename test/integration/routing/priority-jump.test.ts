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
  answerOrder,
  dispatched,
  queued,
  QUEUE_MODEL as MODEL,
  startQueueSuite,
} from '../../helpers/router-queue-order.js';
import { postChat, type MockerSuite } from '../../helpers/serve-suite.js';

let suite: MockerSuite;
let url: string;

beforeAll(async () => {
  ({ suite, url } = await startQueueSuite('priority-jump', [], []));
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

describe('the router queue priority hint', () => {
  it("is clamped to the class's max_priority_jump: a huge one no longer overtakes a request queued before it", async () => {
    const { order, answered } = answerOrder();
    // The first request prefills; the worker is busy (its prompt is over the 10-token budget).
    const first = chat('holder').then(answered('holder'));
    await dispatched(url, 1);
    const early = chat('early', { agent_hints: { priority: 10 } }).then(answered('early'));
    await queued(url, 1, 'the early request queued');
    const jumper = chat('jumper', { agent_hints: { priority: 1_000_000 } }).then(answered('jumper'));
    await queued(url, 2, 'the jumper queued');
    await Promise.all([first, early, jumper]);
    expect(order).toEqual(['holder', 'early', 'jumper']);
    const clamped = { tenant: 'other', hint: 'priority_jump', action: 'clamped' };
    expect(await metric(url, 'kvgate_tenant_priority_limits_total', clamped)).toBe(1);
  }, 60_000);
});
