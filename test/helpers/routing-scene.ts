/**
 * The scene the routing-cost integration suites build on a `kvgate serve` in front of mocker engines: a
 * prompt cached on one worker, a stream held in flight there, and the router's choice asked without
 * dispatching. Token-id prompts, so block counts are exact.
 */
import { expect } from 'vitest';
import { metric } from './metric-sum.js';
import { until } from './until.js';

/** A gateway and the model the scene's requests name. */
export interface Gateway {
  readonly url: string;
  readonly model: string;
}

/** POSTs `{ model, ...body }` as JSON to `path` on the gateway. */
export function postModel(g: Gateway, path: string, body: Record<string, unknown>): Promise<Response> {
  return fetch(`${g.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: g.model, ...body }),
  });
}

/** The router's choice for `prompt` (optionally pinned to worker `pin`), without dispatching: worker and overlap blocks. */
export async function routeIds(
  g: Gateway,
  prompt: readonly number[],
  pin?: number,
): Promise<{ worker: number; overlap: number }> {
  const res = await postModel(g, '/v1/route', {
    prompt,
    max_tokens: 1,
    return_token_ids: false,
    ...(pin !== undefined ? { nvext: { backend_instance_id: pin } } : {}),
  });
  const json = (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number };
  expect(res.status).toBe(200);
  return { worker: json.worker.worker_id, overlap: json.overlap_blocks };
}

/** Serves `prompt` once on worker `workerId` and waits until the router's index holds `blocks` of it there. */
export async function cacheOn(g: Gateway, workerId: number, prompt: readonly number[], blocks: number): Promise<void> {
  const seed = await postModel(g, '/v1/completions', {
    prompt,
    max_tokens: 1,
    nvext: { backend_instance_id: workerId },
  });
  expect(seed.status).toBe(200);
  expect(seed.headers.get('x-kvgate-worker')).toBe(String(workerId));
  await seed.arrayBuffer();
  await until(
    async () => (await routeIds(g, prompt, workerId)).overlap === blocks,
    `the prompt indexed on worker ${workerId}`,
    10_000,
  );
}

/**
 * A stream of `prompt` that stays in flight on worker `workerId`, whose engine (at `engineUrl`) stalls every
 * answer after 2 tokens from now on; resolves once the gateway books it, with the reader to cancel at the end.
 */
export async function holdStreamOn(
  g: Gateway,
  workerId: number,
  engineUrl: string,
  prompt: readonly number[],
): Promise<ReadableStreamDefaultReader<Uint8Array>> {
  const fault = await fetch(`${engineUrl}/admin/faults`, {
    method: 'POST',
    body: JSON.stringify({ stall_after_tokens: 2 }),
  });
  expect(fault.status).toBe(200);
  await fault.arrayBuffer();
  const stream = await postModel(g, '/v1/completions', {
    prompt,
    max_tokens: 50,
    stream: true,
    nvext: { backend_instance_id: workerId },
  });
  expect(stream.headers.get('x-kvgate-worker')).toBe(String(workerId));
  const reader = stream.body!.getReader();
  await reader.read();
  await until(
    async () => (await metric(g.url, 'kvgate_worker_active_requests', { worker_id: String(workerId) })) === 1,
    `the stream booked on worker ${workerId}`,
  );
  return reader;
}

/** The first model's resolved router knobs and preset, from `/admin/config`. */
export async function adminRouter(g: Gateway): Promise<{ preset: string; router: Record<string, unknown> }> {
  const c = (await (await fetch(`${g.url}/admin/config`)).json()) as {
    models: { routerPreset: string; router: Record<string, unknown> }[];
  };
  return { preset: c.models[0]!.routerPreset, router: c.models[0]!.router };
}
