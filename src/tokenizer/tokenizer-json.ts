/**
 * One parse of a `tokenizer.json` for everything that reads it while a model loads: the JavaScript encoder
 * here, and the gateway's split tokens and token floor (11 MB of JSON for Qwen3, some 100 MB of heap parsed,
 * on the main thread and on every preprocessing thread).
 *
 * Contract: calls for the same path within one synchronous job get the same object; after the job the
 * parse is held only by a `WeakRef`, so it is freed once no caller keeps it (a `WeakRef`'s target stays
 * alive until the end of the job that created or dereferenced it). Callers must not mutate it.
 */
import { readFileSync } from 'node:fs';

const parsed = new Map<string, WeakRef<object>>();

/**
 * The parsed `tokenizer.json` at `path`.
 * @throws Error when the file cannot be read, SyntaxError when it is not JSON, TypeError when it is not an object.
 */
export function tokenizerJsonOf(path: string): object {
  const held = parsed.get(path)?.deref();
  if (held !== undefined) return held;
  const json: unknown = JSON.parse(readFileSync(path, 'utf8'));
  if (json === null || typeof json !== 'object') throw new TypeError(`${path} is not a JSON object`);
  parsed.set(path, new WeakRef(json));
  return json;
}
