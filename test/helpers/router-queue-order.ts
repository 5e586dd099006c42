/**
 * A router queue's order, read end to end: `kvgate serve` (KV routing, the router queue on) in front of one slow
 * `kvgate mocker` engine whose prefill takes about 4 s (step times x250, a 10-token batch budget), real processes
 * over real sockets. While one request prefills, the next ones wait in the router queue and leave it one by one in
 * its order; each answers with one token, so they answer in that order. Every step waits on `/metrics`, never a sleep.
 */
import { expect } from 'vitest';
import { metric } from './metric-sum.js';
import { serveConfig, serveInSuite, startMockerSuite, workerEntry, type MockerSuite } from './serve-suite.js';
import { until } from './until.js';

/** The suite's model name. */
export const QUEUE_MODEL = 'mock-model';

/** Starts the engine (with `engineArgs` beyond the slow step times) and the gateway (with `configLines` too). */
export async function startQueueSuite(
  name: string,
  engineArgs: readonly string[],
  configLines: readonly string[],
): Promise<{ suite: MockerSuite; url: string }> {
  const suite = await startMockerSuite(name, ['--speedup', '0.004', '--tokenizer', 'demo', ...engineArgs], 1);
  const lines = [
    'router_mode: kv',
    'router: { router_queue_threshold: 1.0 }',
    ...configLines,
    'workers:',
    `  - ${workerEntry(1, suite.engines[0]!).replace(/ }$/, ', max_num_batched_tokens: 10 }')}`,
  ];
  const url = await serveInSuite(suite, suite.write('serve.yaml', serveConfig(QUEUE_MODEL, lines)));
  return { suite, url };
}

/** The labels of answers in the order they arrived; `answered(label)` records one (it must be a 200). */
export function answerOrder(): { order: string[]; answered: (label: string) => (r: Response) => Promise<void> } {
  const order: string[] = [];
  return {
    order,
    answered: (label) => async (r) => {
      expect(r.status).toBe(200);
      await r.text();
      order.push(label);
    },
  };
}

/** Resolves once the gateway has dispatched `n` requests (the first holds the engine busy). */
export function dispatched(url: string, n: number): Promise<void> {
  return until(async () => (await metric(url, 'kvgate_router_requests_started_total')) >= n, `${n} dispatched`);
}

/** Resolves once `n` requests wait in the router queue (`what` names the last one, for a timeout's message). */
export function queued(url: string, n: number, what: string): Promise<void> {
  return until(async () => (await metric(url, 'kvgate_router_queue_pending_requests')) === n, what, 10_000);
}
