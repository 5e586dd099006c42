/**
 * The order in which one `kvgate mocker` engine with a single seat (`--max-num-seqs 1`) answers requests sent
 * through a gateway: what reached the engine decides it, so under `--scheduling-policy priority` the order shows
 * the `priority` each request carried there.
 */
import { expect } from 'vitest';
import { until } from './until.js';

/** One request: a label for the order, its gateway path (default chat completions), headers and JSON body. */
export interface OrderedRequest {
  readonly label: string;
  readonly path?: string;
  readonly headers?: Record<string, string>;
  readonly body: Record<string, unknown>;
}

/** Requests waiting at the engine (its only rank), from its `/admin/state`. */
async function waiting(engineUrl: string): Promise<number> {
  const state = (await (await fetch(`${engineUrl}/admin/state`)).json()) as { ranks: { waiting: number }[] };
  return state.ranks[0]!.waiting;
}

const post = (url: string, r: Omit<OrderedRequest, 'label'>, signal?: AbortSignal): Promise<Response> =>
  fetch(`${url}${r.path ?? '/v1/chat/completions'}`, {
    method: 'POST',
    ...(signal !== undefined ? { signal } : {}),
    headers: { 'content-type': 'application/json', ...r.headers },
    body: JSON.stringify(r.body),
  });

/**
 * Holds the engine's seat with a long stream (`holder`, a chat body: it is sent streaming with 4000 tokens to
 * generate), sends `requests` one by one, each once the previous waits at the engine, then cancels the stream;
 * resolves to the labels in the order the engine answered them (each answer a 200).
 */
export async function engineAnswerOrder(
  engineUrl: string,
  gateway: string,
  holder: Omit<OrderedRequest, 'label'>,
  requests: readonly OrderedRequest[],
): Promise<string[]> {
  const abort = new AbortController();
  const held = await post(
    gateway,
    { ...holder, body: { ...holder.body, max_tokens: 4000, stream: true } },
    abort.signal,
  );
  expect(held.status).toBe(200);
  const reader = held.body!.getReader();
  await reader.read();
  const order: string[] = [];
  const sent: Promise<void>[] = [];
  try {
    for (const r of requests) {
      const queued = (await waiting(engineUrl)) + 1;
      sent.push(
        post(gateway, r).then(async (res) => {
          expect(res.status, `${r.label}: ${res.status}`).toBe(200);
          await res.text();
          order.push(r.label);
        }),
      );
      await until(async () => (await waiting(engineUrl)) === queued, `${r.label} waiting at the engine`);
    }
  } finally {
    abort.abort(); // the seat frees: the engine admits by what it was sent
    await reader.cancel().catch(() => undefined);
  }
  await Promise.all(sent);
  return order;
}
