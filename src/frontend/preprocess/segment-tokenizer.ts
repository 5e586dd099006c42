/**
 * Tokenization with a cache of prompt segments, for multi-turn chats that
 * resend their whole history on every turn.
 *
 * Why splitting is exact: a Hugging Face tokenizer extracts added tokens that
 * are not normalized (the special tokens of a chat template: `<|im_start|>`,
 * `<|eot_id|>`, ...) from the text before it normalizes and pre-tokenizes, so
 * the text between two special tokens is tokenized independently of its
 * neighbours. Encoding each segment alone and concatenating the ids with the
 * special tokens' ids gives the ids of the whole text. That holds only for
 * special tokens without lstrip/rstrip/single_word and with normalized=false,
 * and only if the pre-tokenizer does not treat the start of the text specially
 * (Metaspace with prepend_scheme "first" does); so split tokens are chosen by
 * those flags, and `SegmentTokenizer.create` checks exactness on probe texts
 * and turns the cache off for a tokenizer that fails.
 *
 * The cache maps segment text to its ids, least recently used first out,
 * bounded by the total number of ids held and by the bytes it retains. Keys are
 * flattened copies: a segment is a `slice` of the rendered prompt, and in V8 a
 * sliced string keeps its whole parent alive, so a slice as key would retain
 * every prompt that added an entry (a 24 KB system prompt per request) while
 * the limit saw only a few tokens.
 */
import { tokenizerJsonOf, type TextTokenizer } from '../../tokenizer/index.js';

export interface SplitToken {
  content: string;
  id: number;
}

interface AddedTokenJson {
  id: number;
  content: string;
  special?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
  single_word?: boolean;
  normalized?: boolean;
}

// tokenizer.json files are large (11 MB for Qwen3): the split tokens of each are kept once per thread.
const splitTokensByFile = new Map<string, SplitToken[]>();

/** The special added tokens of a tokenizer.json that are safe to split at (see the module comment). */
export function splitTokensOf(tokenizerJsonPath: string): SplitToken[] {
  let tokens = splitTokensByFile.get(tokenizerJsonPath);
  if (tokens === undefined) {
    const json = tokenizerJsonOf(tokenizerJsonPath) as { added_tokens?: AddedTokenJson[] };
    tokens = (json.added_tokens ?? [])
      .filter(
        (t) =>
          t.special === true &&
          t.lstrip !== true &&
          t.rstrip !== true &&
          t.single_word !== true &&
          t.normalized !== true &&
          t.content.length > 0,
      )
      .map((t) => ({ content: t.content, id: t.id }));
    splitTokensByFile.set(tokenizerJsonPath, tokens);
  }
  return tokens;
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}

export interface SegmentEncoding {
  ids: Uint32Array;
  /** Ids that came from the cache. */
  cachedTokens: number;
}

/**
 * A text's split encoding (no add_special_tokens ids) with its split points: for the k-th special token matched,
 * `bounds[2k]` is its character offset in the text and `bounds[2k + 1]` the offset of its id in `ids`. Text that
 * starts at such a point and shares everything before it (and `maxSplitChars` characters after it) with another
 * text is split, hence tokenized, the same way from there on (conversation-cache.ts relies on it).
 */
export interface SplitEncoding extends SegmentEncoding {
  bounds: number[];
}

export interface SegmentCacheStats {
  entries: number;
  tokens: number;
  /** Bytes the entries retain (keys, id arrays, per-entry overhead), as bounded by the byte capacity. */
  bytes: number;
  hits: number;
  misses: number;
}

/** What the cache may hold; either limit at 0 turns it off. */
export interface SegmentCacheCapacity {
  tokens: number;
  bytes: number;
}

/**
 * Bytes an entry costs beyond its key's characters and its ids: the Map slot, the
 * string header, the Uint32Array and ArrayBuffer objects and the backing store's
 * bookkeeping. An upper estimate, so the byte limit bounds what is really retained.
 */
const ENTRY_OVERHEAD_BYTES = 512;

/**
 * A copy of `s` that owns its characters (a sequential string), so caching it keeps
 * nothing else alive. Latin-1 text stays one byte per character; the UTF-16 round trip
 * keeps any other text, lone surrogates included, exactly.
 */
function ownedCopy(s: string, oneByte: boolean): string {
  return oneByte ? Buffer.from(s, 'latin1').toString('latin1') : Buffer.from(s, 'utf16le').toString('utf16le');
}

/** Bytes an entry for `segment` with `idCount` ids retains. */
function entryBytes(keyChars: number, oneByte: boolean, idCount: number): number {
  return keyChars * (oneByte ? 1 : 2) + idCount * 4 + ENTRY_OVERHEAD_BYTES;
}

const NOT_LATIN1 = /[^\u0000-\u00ff]/;

interface CacheEntry {
  /** The owned key this entry is stored under. */
  key: string;
  ids: Uint32Array;
  bytes: number;
}

/** Probe texts for the exactness check: boundaries with spaces, newlines, punctuation and non-ASCII. */
const PROBES = [
  'Hello world',
  ' leading space',
  'trailing space ',
  '\n\nnewlines\n',
  'user\nWhat is 2+2?',
  'ünïcödé 日本語 😀',
  '  ',
  'a',
  "it's",
];

export class SegmentTokenizer {
  readonly #tok: TextTokenizer;
  readonly #ids: Map<string, number>;
  readonly #splitter: RegExp | undefined;
  readonly #capacity: SegmentCacheCapacity;
  readonly #cache = new Map<string, CacheEntry>();
  #held = 0;
  #heldBytes = 0;
  #hits = 0;
  #misses = 0;
  /** What add_special_tokens=true adds around the text, when it could be determined. */
  #around: { prefix: Uint32Array; suffix: Uint32Array } | undefined;
  /** False when the exactness probe failed: every call tokenizes the whole text. */
  #exact: boolean;
  /** The longest split token, in characters. */
  readonly maxSplitChars: number;

  private constructor(tok: TextTokenizer, splitTokens: readonly SplitToken[], capacity: SegmentCacheCapacity) {
    this.#tok = tok;
    this.#ids = new Map(splitTokens.map((t) => [t.content, t.id]));
    // Longest first, so a token that is a prefix of another never wins.
    const alternatives = [...this.#ids.keys()].sort((a, b) => b.length - a.length).map(escapeRegExp);
    this.#splitter = alternatives.length > 0 ? new RegExp(alternatives.join('|'), 'g') : undefined;
    this.#capacity = { ...capacity };
    this.maxSplitChars = Math.max(0, ...[...this.#ids.keys()].map((k) => k.length));
    this.#exact = this.#splitter !== undefined && capacity.tokens > 0 && capacity.bytes > 0;
  }

  /**
   * A segment tokenizer over `tok`, splitting at `splitTokens`, with a cache of at
   * most `capacity.tokens` ids and `capacity.bytes` retained bytes. Runs the
   * exactness probe; on failure the instance still works, without splitting or
   * caching (`exact` is false).
   */
  static async create(
    tok: TextTokenizer,
    splitTokens: readonly SplitToken[],
    capacity: SegmentCacheCapacity,
  ): Promise<SegmentTokenizer> {
    const st = new SegmentTokenizer(tok, splitTokens, capacity);
    if (st.#exact) st.#exact = await st.#probe();
    if (st.#exact) st.#around = await st.#findAround();
    st.#cache.clear();
    st.#held = 0;
    st.#heldBytes = 0;
    st.#hits = 0;
    st.#misses = 0;
    return st;
  }

  /** Whether segments are split and cached (the probe passed and the cache is on). */
  get exact(): boolean {
    return this.#exact;
  }

  stats(): SegmentCacheStats {
    return {
      entries: this.#cache.size,
      tokens: this.#held,
      bytes: this.#heldBytes,
      hits: this.#hits,
      misses: this.#misses,
    };
  }

  async #probe(): Promise<boolean> {
    const specials = [...this.#ids.keys()].slice(0, 4);
    const texts: string[] = [];
    for (let i = 0; i < PROBES.length; i++) {
      const s1 = specials[i % specials.length]!;
      const s2 = specials[(i + 1) % specials.length]!;
      texts.push(`${s1}${PROBES[i]}${s2}${PROBES[(i + 1) % PROBES.length]}${s1}\n`);
      texts.push(`${PROBES[i]}${s2}${s1}${PROBES[(i + 3) % PROBES.length]}`);
    }
    for (const text of texts) {
      const whole = await this.#tok.encode(text, { addSpecialTokens: false });
      const split = await this.#encodeSplit(text);
      if (whole.length !== split.ids.length || whole.some((id, i) => id !== split.ids[i])) return false;
    }
    return true;
  }

  /** Finds the ids add_special_tokens=true puts before and after the text (e.g. BOS), checked on two probes. */
  async #findAround(): Promise<{ prefix: Uint32Array; suffix: Uint32Array } | undefined> {
    let found: { prefix: Uint32Array; suffix: Uint32Array } | undefined;
    for (const probe of ['Hello world', 'a']) {
      const bare = await this.#tok.encode(probe, { addSpecialTokens: false });
      const full = await this.#tok.encode(probe, { addSpecialTokens: true });
      let at = -1;
      for (let i = 0; i + bare.length <= full.length && at < 0; i++) {
        if (bare.every((id, k) => full[i + k] === id)) at = i;
      }
      if (at < 0) return undefined;
      const prefix = Uint32Array.from(full.slice(0, at));
      const suffix = Uint32Array.from(full.slice(at + bare.length));
      if (found !== undefined && (!sameIds(found.prefix, prefix) || !sameIds(found.suffix, suffix))) return undefined;
      found = { prefix, suffix };
    }
    return found;
  }

  /**
   * The ids of `text`, equal to `tok.encode(text, { addSpecialTokens })`.
   * Segments between special tokens come from the cache when seen before.
   */
  async encode(text: string, addSpecialTokens: boolean): Promise<SegmentEncoding> {
    if (!this.#exact || (addSpecialTokens && this.#around === undefined)) {
      return { ids: Uint32Array.from(await this.#tok.encode(text, { addSpecialTokens })), cachedTokens: 0 };
    }
    const inner = await this.#encodeSplit(text);
    return { ids: this.withAround(inner.ids, addSpecialTokens), cachedTokens: inner.cachedTokens };
  }

  /** Whether `encodeSplit` and `withAround` give what `encode` gives for this add_special_tokens. */
  splits(addSpecialTokens: boolean): boolean {
    return this.#exact && (!addSpecialTokens || this.#around !== undefined);
  }

  /** The split encoding of `text` with its split points (only when `splits(...)`). */
  encodeSplit(text: string): Promise<SplitEncoding> {
    return this.#encodeSplit(text);
  }

  /** `inner` with what add_special_tokens adds around it (`inner` itself when nothing). */
  withAround(inner: Uint32Array, addSpecialTokens: boolean): Uint32Array {
    if (!addSpecialTokens || this.#around === undefined) return inner;
    const { prefix, suffix } = this.#around;
    if (prefix.length === 0 && suffix.length === 0) return inner;
    const ids = new Uint32Array(prefix.length + inner.length + suffix.length);
    ids.set(prefix, 0);
    ids.set(inner, prefix.length);
    ids.set(suffix, prefix.length + inner.length);
    return ids;
  }

  /** Ids add_special_tokens puts before the text (0 when none or off). */
  aroundPrefix(addSpecialTokens: boolean): number {
    return addSpecialTokens ? (this.#around?.prefix.length ?? 0) : 0;
  }

  async #encodeSplit(text: string): Promise<SplitEncoding> {
    // parts alternate: text segment (string) or a special token id (number); marks: each special token's offset.
    const parts: (string | number)[] = [];
    const marks: number[] = [];
    let last = 0;
    for (const m of text.matchAll(this.#splitter!)) {
      if (m.index > last) parts.push(text.slice(last, m.index));
      marks.push(m.index);
      parts.push(this.#ids.get(m[0])!);
      last = m.index + m[0].length;
    }
    if (last < text.length) parts.push(text.slice(last));

    const pieces: (Uint32Array | number)[] = new Array<Uint32Array | number>(parts.length);
    const misses: Promise<void>[] = [];
    let cachedTokens = 0;
    for (let i = 0; i < parts.length; i++) {
      const p = parts[i]!;
      if (typeof p === 'number') {
        pieces[i] = p;
        continue;
      }
      const hit = this.#get(p);
      if (hit !== undefined) {
        pieces[i] = hit;
        cachedTokens += hit.length;
        continue;
      }
      // Misses are encoded concurrently (the native tokenizer runs them on libuv threads).
      misses.push(
        this.#tok.encode(p, { addSpecialTokens: false }).then((ids) => {
          const arr = Uint32Array.from(ids);
          pieces[i] = arr;
          this.#put(p, arr);
        }),
      );
    }
    if (misses.length > 0) await Promise.all(misses);
    let total = 0;
    for (const piece of pieces) total += typeof piece === 'number' ? 1 : piece.length;
    const ids = new Uint32Array(total);
    const bounds: number[] = [];
    let at = 0;
    for (const piece of pieces) {
      if (typeof piece === 'number') {
        bounds.push(marks[bounds.length >>> 1]!, at);
        ids[at++] = piece;
      } else {
        ids.set(piece, at);
        at += piece.length;
      }
    }
    return { ids, cachedTokens, bounds };
  }

  #get(segment: string): Uint32Array | undefined {
    const hit = this.#cache.get(segment);
    if (hit === undefined) {
      this.#misses++;
      return undefined;
    }
    this.#hits++;
    // Refresh recency: Map iteration order is insertion order. Re-inserting under the
    // stored key (not `segment`, a slice of this request's prompt) keeps the key owned.
    this.#cache.delete(hit.key);
    this.#cache.set(hit.key, hit);
    return hit.ids;
  }

  #put(segment: string, ids: Uint32Array): void {
    if (this.#cache.has(segment)) return;
    const oneByte = !NOT_LATIN1.test(segment);
    const bytes = entryBytes(segment.length, oneByte, ids.length);
    // A segment bigger than a quarter of the cache would evict too much for one entry.
    if (ids.length > this.#capacity.tokens / 4 || bytes > this.#capacity.bytes / 4) return;
    const key = ownedCopy(segment, oneByte);
    this.#cache.set(key, { key, ids, bytes });
    this.#held += ids.length;
    this.#heldBytes += bytes;
    for (const [key, entry] of this.#cache) {
      if (this.#held <= this.#capacity.tokens && this.#heldBytes <= this.#capacity.bytes) break;
      this.#cache.delete(key);
      this.#held -= entry.ids.length;
      this.#heldBytes -= entry.bytes;
    }
  }
}

function sameIds(a: Uint32Array, b: Uint32Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}
