/**
 * What an engine says it serves: its OpenAI `GET /v1/models`. vLLM lists the
 * base model (`parent: null`) and each loaded LoRA adapter with `parent` set
 * to the base model's name; SGLang and kvgate's mocker answer the same way.
 * The check compares the list with the name kvgate sends as `model`
 * (`served_model_name`): an engine that does not serve it would answer every
 * request with 404, so such a worker must not be routed to.
 */
import { request, type Dispatcher } from 'undici';
import type { WorkerInfo } from './registry.js';

/**
 * GET `path` on an engine within `timeoutMs`: the body of a 200 answer as `read` makes it, else why not.
 * Never throws.
 */
export async function engineGet<T>(
  base: string,
  path: string,
  timeoutMs: number,
  read: (body: Dispatcher.ResponseData['body']) => Promise<T>,
): Promise<{ ok: true; body: T } | { ok: false; reason: string }> {
  try {
    const res = await request(new URL(path, base), {
      method: 'GET',
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return { ok: false, reason: `GET ${path} answered ${res.statusCode}` };
    }
    return { ok: true, body: await read(res.body) };
  } catch (err) {
    return { ok: false, reason: `GET ${path} failed: ${(err as Error).message}` };
  }
}

/** The outcome of one `/v1/models` check of a worker. */
export type ModelCheck =
  /**
   * The engine serves the expected model; `adapters` are the LoRA adapters it lists under it, `maxModelLen`
   * its context length (vLLM's `max_model_len` on the model's entry) when it says.
   */
  | { readonly kind: 'ok'; readonly adapters: readonly string[]; readonly maxModelLen?: number | undefined }
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
  const got = await engineGet(w.url, '/v1/models', timeoutMs, (b) => b.json());
  if (!got.ok) return { kind: 'unreadable', reason: got.reason };
  const body = got.body;
  const data = (body as { data?: unknown } | null)?.data;
  if (!Array.isArray(data)) return { kind: 'unreadable', reason: 'GET /v1/models has no data list' };
  const entries = data.filter(
    (e): e is { id: string; parent?: unknown; max_model_len?: unknown } =>
      typeof (e as { id?: unknown } | null)?.id === 'string',
  );
  const expected = upstreamModel(w);
  const base = entries.find((e) => e.id === expected);
  if (base === undefined) return { kind: 'mismatch', expected, served: entries.map((e) => e.id) };
  const adapters = entries.filter((e) => e.parent === expected && e.id !== expected).map((e) => e.id);
  const len = base.max_model_len;
  return {
    kind: 'ok',
    adapters,
    ...(Number.isSafeInteger(len) && (len as number) > 0 ? { maxModelLen: len as number } : {}),
  };
}
