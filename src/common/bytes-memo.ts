/**
 * A bounded memo of what was worked out from a byte string, found again by the same bytes: what a request's tools
 * cost to read (python-json.ts) is paid once per tools list, since an agent resends the same list on every turn.
 *
 * Contract: `get` answers a value only for bytes equal to those it was `set` with (looked up by their length and a
 * hash of a sample of them, then compared whole: a memcmp, about 20 µs for 0.8 MB); the memo keeps its own copy of
 * the bytes, so the caller's may change or be transferred afterwards. At most `maxEntries` entries and `maxBytes` of
 * keys plus the sizes their values were set with are held; past either bound the least recently used go first, and
 * an entry larger than `maxBytes` alone is not kept. Per thread: each isolate that imports it has its own.
 */

interface Entry<V> {
  readonly bytes: Buffer;
  readonly value: V;
  readonly size: number;
}

/** Bytes sampled for the lookup hash: spread evenly over the whole string, so an edit anywhere likely changes it. */
const SAMPLES = 256;

/** FNV-1a over `SAMPLES` bytes of `b` spread evenly, with its length: cheap whatever the size. */
function sampleKey(b: Uint8Array): string {
  let h = 0x811c9dc5;
  const step = Math.max(1, Math.floor(b.length / SAMPLES));
  for (let i = 0; i < b.length; i += step) h = Math.imul(h ^ b[i]!, 0x01000193);
  return `${b.length}:${h >>> 0}`;
}

export class BytesMemo<V> {
  /** Insertion order is recency: a hit moves its entry to the end, eviction takes from the front. */
  readonly #entries = new Map<string, Entry<V>>();
  #bytes = 0;

  constructor(
    readonly maxEntries: number,
    readonly maxBytes: number,
  ) {}

  /** How many entries, and how many bytes of keys and values, are held. */
  get size(): { entries: number; bytes: number } {
    return { entries: this.#entries.size, bytes: this.#bytes };
  }

  /** The value set for bytes equal to `bytes`, or undefined (never set, or evicted, or replaced by a hash twin). */
  get(bytes: Uint8Array): V | undefined {
    const key = sampleKey(bytes);
    const e = this.#entries.get(key);
    if (e === undefined || !e.bytes.equals(bytes)) return undefined;
    this.#entries.delete(key);
    this.#entries.set(key, e);
    return e.value;
  }

  /**
   * Remembers `value` for `bytes` (a copy of them), replacing what was held for them or for other bytes of the
   * same length and sample hash; `valueSize`, what the value holds beyond the key (a string's length), counts
   * against `maxBytes`.
   */
  set(bytes: Uint8Array, value: V, valueSize = 0): void {
    const key = sampleKey(bytes);
    this.#drop(key);
    const size = bytes.length + valueSize;
    if (size > this.maxBytes) return;
    this.#entries.set(key, { bytes: Buffer.from(bytes), value, size });
    this.#bytes += size;
    for (const [k] of this.#entries) {
      if (this.#entries.size <= this.maxEntries && this.#bytes <= this.maxBytes) break;
      this.#drop(k);
    }
  }

  #drop(key: string): void {
    const e = this.#entries.get(key);
    if (e === undefined) return;
    this.#entries.delete(key);
    this.#bytes -= e.size;
  }
}
