/**
 * A LoRA adapter's request in the router queue, end to end: `kvgate serve` (KV routing, the router queue on) in front
 * of one slow `kvgate mocker` engine that serves the adapter `sql-adapter` (every worker does), real processes over
 * real sockets. While one request prefills, the next ones wait in the router queue. The adapter's request waits
 * there too, behind the base model's request queued before it: its restriction to the adapter's workers is kvgate's
 * own, not a picker's list. It used to skip the queue (an allowed-worker list did) and run ahead of everyone
 * queued. Each step waits on `/metrics`, never a sleep; one-token answers come in the order requests left the queue.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  answerOrder,
  dispatched,
  queued,
  QUEUE_MODEL as MODEL,
  startQueueSuite,
} from '../../helpers/router-queue-order.js';
import { postChat, type MockerSuite } from '../../helpers/serve-suite.js';

const ADAPTER = 'sql-adapter';

let suite: MockerSuite;
let url: string;

beforeAll(async () => {
  ({ suite, url } = await startQueueSuite('lora-queue', ['--lora', ADAPTER], [`lora_adapters: [${ADAPTER}]`]));
}, 60_000);

afterAll(async () => {
  await suite?.stop();
});

const chat = (tag: string, model = MODEL): Promise<Response> =>
  postChat(url, {
    model,
    messages: [{ role: 'user', content: `${tag} tell me about the weather in twenty words or so today` }],
    max_tokens: 1,
  });

describe("a LoRA adapter's request", () => {
  it('waits in the router queue behind the requests queued before it', async () => {
    const { order, answered } = answerOrder();
    // The first request prefills; the worker is busy (its prompt is over the 10-token budget).
    const first = chat('holder').then(answered('holder'));
    await dispatched(url, 1);
    const base = chat('base').then(answered('base'));
    await queued(url, 1, "the base model's request queued");
    const lora = chat('lora', ADAPTER).then(answered('lora'));
    await queued(url, 2, "the adapter's request queued");
    await Promise.all([first, base, lora]);
    expect(order).toEqual(['holder', 'base', 'lora']);
  }, 60_000);
});
