/**
 * What an engine says it serves: its OpenAI `GET /v1/models`. vLLM lists the
 * base model (`parent: null`) and each loaded LoRA adapter with `parent` set
 * to the base model's name; SGLang and kvgate's mocker answer the same way.
 * The check compares the list with the name kvgate sends as `model`
 * (`served_model_name`): an engine that does not serve it would answer every
 * request with 404, so such a worker must not be routed to.
 */
import { request } from 'undici';
import type { WorkerInfo } from './registry.js';

/** The outcome of one `/v1/models` check of a worker. */
export type ModelCheck =
  /** The engine serves the expected model; `adapters` are the LoRA adapters it lists under it. */
  | { readonly kind: 'ok'; readonly adapters: readonly string[] }
  /** The engine answered but does not serve `expected`; `served` is every id it lists. */
  | { readonly kind: 'mismatch'; readonly expected: string; readonly served: readonly string[] }
  /** No usable answer (no such endpoint, not JSON, timeout): nothing is known, nothing changes. */
  | { readonly kind: 'unreadable'; readonly reason: string };

/** The name engines are sent as `model` for this worker. */
function upstreamModel(w: WorkerInfo): string {
  return w.servedModelName ?? w.model;
}

/** Reads the engine's `/v1/models` and compares it with the worker's served model name. Never throws. */
export async function checkEngineModels(w: WorkerInfo, timeoutMs: number): Promise<ModelCheck> {
  let body: unknown;
  try {
    const res = await request(new URL('/v1/models', w.url), {
      method: 'GET', headersTimeout: timeoutMs, bodyTimeout: timeoutMs, signal: AbortSignal.timeout(timeoutMs),
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return { kind: 'unreadable', reason: `GET /v1/models answered ${res.statusCode}` };
    }
    body = await res.body.json();
  } catch (err) {
    return { kind: 'unreadable', reason: `GET /v1/models failed: ${(err as Error).message}` };
  }
  const data = (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return { kind: 'unreadable', reason: 'GET /v1/models has no data list' };
  const entries = data.filter((e): e is { id: string; parent?: unknown } => typeof (e as { id?: unknown } | null)?.id === 'string');
  const expected = upstreamModel(w);
  if (!entries.some((e) => e.id === expected)) return { kind: 'mismatch', expected, served: entries.map((e) => e.id) };
  return { kind: 'ok', adapters: entries.filter((e) => e.parent === expected && e.id !== expected).map((e) => e.id) };
}
