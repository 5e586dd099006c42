/**
 * One parse of a `tokenizer.json` for everything that reads it while a model loads: the JavaScript encoder
 * here, and the gateway's split tokens and token floor (11 MB of JSON for Qwen3, some 100 MB of heap parsed,
 * on the main thread and on every preprocessing thread).
 *
 * Contract: calls for the same path within one synchronous job get the same object, unless the file
 * changed between them; after the job the parse is held only by a `WeakRef`, so it is freed once no caller
 * keeps it (a `WeakRef`'s target stays alive until the end of the job that created or dereferenced it).
 * Callers must not mutate it.
 *
 * A held parse is reused only while the file's size, modification time and inode are those it was parsed
 * from: a model reloaded after its tokenizer.json was replaced in place must not get the old vocabulary
 * because a caller still held the old parse. One `stat` per call, against a parse of megabytes.
 */
import { readFileSync, statSync } from 'node:fs';

/** A parse, and the identity of the file it came from. */
interface Parse {
  readonly file: string;
  readonly json: WeakRef<object>;
}

const parsed = new Map<string, Parse>();

/** What tells a file replaced in place from the one parsed: its size, modification time (ns) and inode. */
function identity(path: string): string {
  const s = statSync(path, { bigint: true });
  return `${s.size}:${s.mtimeNs}:${s.ino}`;
}

/**
 * The parsed `tokenizer.json` at `path`.
 * @throws Error when the file cannot be read, SyntaxError when it is not JSON, TypeError when it is not an object.
 */
export function tokenizerJsonOf(path: string): object {
  const file = identity(path);
  const entry = parsed.get(path);
  const held = entry?.file === file ? entry.json.deref() : undefined;
  if (held !== undefined) return held;
  const json: unknown = JSON.parse(readFileSync(path, 'utf8'));
  if (json === null || typeof json !== 'object') throw new TypeError(`${path} is not a JSON object`);
  parsed.set(path, { file, json: new WeakRef(json) });
  return json;
}
