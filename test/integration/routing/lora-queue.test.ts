/**
 * A LoRA adapter's request in the router queue, end to end: `kvgate serve` (KV routing, the router queue on) in front
 * of one slow `kvgate mocker` engine that serves the adapter `sql-adapter` (every worker does), real processes over
 * real sockets. While one request prefills, the next ones wait in the router queue. The adapter's request waits
 * there too, behind the base model's request queued before it: its restriction to the adapter's workers is kvgate's
 * own, not a picker's list. It used to skip the queue (an allowed-worker list did) and run ahead of everyone
 * queued. Each step waits on `/metrics`, never a sleep; one-token answers come in the order requests left the queue.
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
const ADAPTER = 'sql-adapter';

let suite: MockerSuite;
let url: string;

beforeAll(async () => {
  // Step times x250: a prompt's prefill takes about 4 s, the window each step below runs in.
  suite = await startMockerSuite('lora-queue', ['--speedup', '0.004', '--tokenizer', 'demo', '--lora', ADAPTER], 1);
  const e = suite.engines[0]!;
  const lines = [
    'router_mode: kv',
    'router: { router_queue_threshold: 1.0 }',
    `lora_adapters: [${ADAPTER}]`,
    'workers:',
    `  - ${workerEntry(1, e).replace(/ }$/, ', max_num_batched_tokens: 10 }')}`,
  ];
  url = await serveInSuite(suite, suite.write('serve.yaml', serveConfig(MODEL, lines)));
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

const pending = (): Promise<number> => metric(url, 'kvgate_router_queue_pending_requests');

describe("a LoRA adapter's request", () => {
  it('waits in the router queue behind the requests queued before it', async () => {
    const order: string[] = [];
    const answered = (label: string) => async (r: Response) => {
      expect(r.status).toBe(200);
      await r.text();
      order.push(label);
    };
    // The first request prefills; the worker is busy (its prompt is over the 10-token budget).
    const first = chat('holder').then(answered('holder'));
    await until(async () => (await metric(url, 'kvgate_router_requests_started_total')) >= 1, 'the holder dispatched');
    const base = chat('base').then(answered('base'));
    await until(async () => (await pending()) === 1, "the base model's request queued", 10_000);
    const lora = chat('lora', ADAPTER).then(answered('lora'));
    await until(async () => (await pending()) === 2, "the adapter's request queued", 10_000);
    await Promise.all([first, base, lora]);
    expect(order).toEqual(['holder', 'base', 'lora']);
  }, 60_000);
});
