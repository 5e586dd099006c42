/**
 * The conversation cache: an agent resends its whole conversation every turn,
 * more than 96 % of it seen by the previous turn. For each conversation the
 * cache keeps the last rendered prompt, its ids with their split points
 * (segment-tokenizer.ts `SplitEncoding`) and its block hashes; a new prompt
 * is compared with it, and only the text after the last split point they
 * share is tokenized and hashed: the ids before it are the cached ones, and
 * the sequence-hash chain continues from the last complete block before it.
 *
 * A rendered prompt is kept and compared as the chat template's pieces
 * (template-compile.ts): a message's content is one piece, the same string
 * object turn after turn when the body was reused (body-reuse.ts), so equal
 * pieces cost a pointer comparison, and the prompt is never made one string:
 * only the text after the reused split point is (`textFrom`).
 *
 * Exact by construction, whatever the chat template does to earlier messages
 * (Qwen3 drops the reasoning of earlier turns, so a follow-up's prompt is not
 * an extension of the previous one): only the characters both prompts share
 * are reused, up to a split point (a special token's start) followed by at
 * least `maxSplitChars` shared characters, so both texts are split the same
 * way up to and at that point, and a Hugging Face tokenizer tokenizes the
 * text between split tokens independently of its neighbours (the segment
 * cache's argument). A rewritten prefix is simply a shorter reuse.
 *
 * Which conversation a prompt continues: the one under its key (the first two
 * messages of a chat, or a text prompt's first
 * 4,096 characters); one entry a key, the latest. Bounded in bytes (the text,
 * the ids, the split points and the hashes), least recently used out.
 *
 * The same budget holds each chat conversation's last body as the thread
 * parsed it (body-reuse.ts), under a key of its own: a turn's body is parsed
 * from where it stops repeating the last one. Both kinds share one
 * least-recently-used order; `entries` counts prompts only.
 */
import {
  blockHashes,
  promptHashes,
  sequenceHashes,
  type BlockHashOptions,
  type PromptHashes,
} from '../../wasm/index.js';
import type { BodyEntry } from './body-reuse.js';
import type { SplitEncoding } from './segment-tokenizer.js';

/** What a conversation's last prompt left behind. */
export interface ConversationEntry {
  readonly key: string;
  /** The rendered prompt as its pieces in order (a text prompt as one), and its length in characters. */
  readonly parts: readonly string[];
  readonly length: number;
  /** Its split encoding's ids (without add_special_tokens ids) and split points (SplitEncoding.bounds). */
  readonly inner: Uint32Array;
  readonly bounds: Int32Array;
  /** The block hashes of the prompt's final ids (add_special_tokens ids included) and the hash options they used. */
  readonly hashes: PromptHashes;
  readonly hashKey: string;
  readonly bytes: number;
}

/** What a new prompt can take from a cached one: the text up to `chars` gives the `ids` first split ids. */
export interface Reuse {
  readonly entry: ConversationEntry;
  readonly chars: number;
  readonly ids: number;
  /** Split points before `chars`: an even-length prefix of `entry.bounds`. */
  readonly bounds: number;
}

export interface ConversationCacheStats {
  entries: number;
  bytes: number;
}

/** Bytes an entry costs beyond its arrays and text: the Map slot, the object, the typed arrays' headers. */
const ENTRY_OVERHEAD_BYTES = 1024;
const KEY_TEXT_CHARS = 4096;
/** Below this many units the halving stops and units are compared one by one. */
const LINEAR_UNITS = 64;

/**
 * The length of the longest common prefix of two sequences of `n` comparable units, by halves: `equal(lo, hi)`
 * compares units [lo, hi) of both as a whole (a native memory comparison), so about `n` units are compared in all,
 * whether the sequences differ at their end (a follow-up turn) or not at all.
 */
export function commonPrefixBy(n: number, equal: (lo: number, hi: number) => boolean): number {
  // Units [0, lo) are equal; they differ before hi, unless hi is n.
  let lo = 0;
  let hi = n;
  while (hi - lo > LINEAR_UNITS) {
    const mid = (lo + hi) >>> 1;
    if (equal(lo, mid)) lo = mid;
    else hi = mid;
  }
  while (lo < hi && equal(lo, lo + 1)) lo++;
  return lo;
}

/**
 * The length of the longest common prefix of `a` and `b` (`commonPrefixBy` over slices: equality of slices is a
 * memory comparison, where startsWith compares character by character, 100 times slower).
 */
export function commonPrefixLength(a: string, b: string): number {
  return commonPrefixBy(Math.min(a.length, b.length), (lo, hi) => a.slice(lo, hi) === b.slice(lo, hi));
}

/**
 * The length of the longest common prefix of two texts given as pieces (their concatenations): the leading pieces
 * equal one by one are skipped whole (a pointer comparison for the same string object), and from the first pair
 * that differs the rest of both is compared as text (pieces may cut the same text differently).
 */
export function commonPrefixOfParts(a: readonly string[], b: readonly string[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  let chars = 0;
  while (i < n && a[i] === b[i]) chars += a[i++]!.length;
  if (i === a.length || i === b.length) return chars;
  return chars + commonPrefixLength(joinFrom(a, i), joinFrom(b, i));
}

function joinFrom(parts: readonly string[], i: number): string {
  return i + 1 === parts.length ? parts[i]! : parts.slice(i).join('');
}

/** The text of `parts` (their concatenation) from character `from` on. */
export function textFrom(parts: readonly string[], from: number): string {
  let i = 0;
  let at = 0;
  while (i < parts.length && at + parts[i]!.length <= from) at += parts[i++]!.length;
  if (i === parts.length) return '';
  if (i + 1 === parts.length) return parts[i]!.slice(from - at);
  // One copy into one flat string (the tokenizer reads it whole): the first piece cut, the rest as they are.
  const rest = parts.slice(i);
  rest[0] = rest[0]!.slice(from - at);
  return rest.join('');
}

/** What the cache holds under one key: a conversation's last prompt, or its last chat body (never both). */
type Held = ConversationEntry | (BodyEntry & { readonly bytes: number });

const isPrompt = (h: Held): h is ConversationEntry => (h as Partial<ConversationEntry>).parts !== undefined;

/** Body keys begin with a character no prompt key begins with (chatKey and textKey begin with 0 or 1). */
const BODY_KEY = '\u0002';

export class ConversationCache {
  readonly #capacity: number;
  readonly #entries = new Map<string, Held>();
  #bytes = 0;
  #prompts = 0;

  /** A cache of at most `capacityBytes` (0: off). */
  constructor(capacityBytes: number) {
    this.#capacity = capacityBytes;
  }

  get enabled(): boolean {
    return this.#capacity > 0;
  }

  stats(): ConversationCacheStats {
    return { entries: this.#prompts, bytes: this.#bytes };
  }

  /**
   * The key of a chat: the roles and contents of its first two messages (the system prompt and the first task of an
   * agent's session), and add_special_tokens. Only which cached prompt to compare with depends on it: what is reused
   * is decided by comparing the rendered texts.
   */
  static chatKey(messages: readonly unknown[], addSpecial: boolean): string {
    let key = addSpecial ? '1' : '0';
    for (const m of messages.slice(0, 2)) {
      const { role, content } = (m ?? {}) as { role?: unknown; content?: unknown };
      key += `\u0000${String(role)}\u0000${typeof content === 'string' ? content : JSON.stringify(content ?? null)}`;
    }
    return key;
  }

  /** The key of a text prompt: its first characters. */
  static textKey(text: string, addSpecial: boolean): string {
    return `${addSpecial ? 1 : 0}${text.slice(0, KEY_TEXT_CHARS)}`;
  }

  /**
   * What a prompt (`parts`, its pieces) can reuse of the conversation under `key`: undefined when nothing (no entry,
   * nothing shared past a split point). `guard` is the longest split token's length (the module comment says why).
   */
  reuse(key: string, parts: readonly string[], guard: number): Reuse | undefined {
    const entry = this.#touch(key);
    if (entry === undefined || !isPrompt(entry)) return undefined;
    const shared = commonPrefixOfParts(entry.parts, parts);
    // The last split point p with p + guard <= shared (and guard characters of text after it to compare).
    const b = entry.bounds;
    let lo = 0;
    let hi = b.length >>> 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (b[2 * mid]! + guard <= shared) lo = mid + 1;
      else hi = mid;
    }
    if (lo === 0) return undefined;
    const k = lo - 1;
    return { entry, chars: b[2 * k]!, ids: b[2 * k + 1]!, bounds: 2 * k };
  }

  /** The chat body last kept under `key` (`keepBody`), now the most recently used. */
  body(key: string): BodyEntry | undefined {
    const held = this.#touch(BODY_KEY + key);
    return held === undefined || isPrompt(held) ? undefined : held;
  }

  /**
   * Keeps a conversation's latest chat body under `key` (body-reuse.ts `bodyKey`), replacing its previous one.
   * Counted as its bytes and three bytes a byte of them for the parsed messages (a string holds at most two bytes
   * a character, and a character takes at least one of the body's bytes; objects and keys take the rest).
   */
  keepBody(key: string, entry: BodyEntry): void {
    const bytes = entry.body.byteLength * 4 + key.length * 2 + ENTRY_OVERHEAD_BYTES;
    this.#hold(BODY_KEY + key, { ...entry, bytes });
  }

  #touch(key: string): Held | undefined {
    const held = this.#entries.get(key);
    if (held === undefined) return undefined;
    this.#entries.delete(key);
    this.#entries.set(key, held);
    return held;
  }

  /** Holds `held` under `key`, replacing what was there, then evicts least recently used down to the capacity. */
  #hold(key: string, held: Held): void {
    this.#drop(key);
    // One conversation larger than half the cache would evict the others for a single entry.
    if (held.bytes > this.#capacity / 2) return;
    this.#entries.set(key, held);
    this.#bytes += held.bytes;
    if (isPrompt(held)) this.#prompts++;
    for (const k of this.#entries.keys()) {
      if (this.#bytes <= this.#capacity) break;
      this.#drop(k);
    }
  }

  #drop(key: string): void {
    const old = this.#entries.get(key);
    if (old === undefined) return;
    this.#entries.delete(key);
    this.#bytes -= old.bytes;
    if (isPrompt(old)) this.#prompts--;
  }

  /** Remembers a conversation's latest prompt under `key`, replacing its previous one; evicts least recently used. */
  set(key: string, fields: Omit<ConversationEntry, 'key' | 'bytes'>): void {
    // Two bytes a character: an upper bound (a Latin-1 text takes one), without a scan of the text.
    const chars = fields.length * 2;
    const bytes =
      chars +
      key.length * 2 +
      fields.inner.byteLength +
      fields.bounds.byteLength +
      fields.hashes.local.byteLength +
      fields.hashes.seq.byteLength +
      ENTRY_OVERHEAD_BYTES;
    this.#hold(key, { key, bytes, ...fields });
  }
}

/** The split encoding of a prompt whose text from `reuse.chars` on was encoded as `tail`. */
export function joinSplit(reuse: Reuse | undefined, tail: SplitEncoding): { inner: Uint32Array; bounds: Int32Array } {
  if (reuse === undefined) return { inner: tail.ids, bounds: Int32Array.from(tail.bounds) };
  const inner = new Uint32Array(reuse.ids + tail.ids.length);
  inner.set(reuse.entry.inner.subarray(0, reuse.ids), 0);
  inner.set(tail.ids, reuse.ids);
  const bounds = new Int32Array(reuse.bounds + tail.bounds.length);
  bounds.set(reuse.entry.bounds.subarray(0, reuse.bounds), 0);
  for (let i = 0; i < tail.bounds.length; i += 2) {
    bounds[reuse.bounds + i] = tail.bounds[i]! + reuse.chars;
    bounds[reuse.bounds + i + 1] = tail.bounds[i + 1]! + reuse.ids;
  }
  return { inner, bounds };
}

/**
 * The block hashes of `tokenIds`, whose first `sharedIds` ids are those `cached` was computed over with the same
 * options: the complete blocks among them are taken from `cached`, and the chain continues from the last of them.
 * Laid out as promptHashes lays them out (local then seq in one fresh buffer, which the caller owns).
 */
export function continuedHashes(
  tokenIds: Uint32Array,
  blockSize: number,
  opts: BlockHashOptions,
  cached: PromptHashes | undefined,
  sharedIds: number,
): PromptHashes {
  const reused = cached === undefined ? 0 : Math.min(Math.floor(sharedIds / blockSize), cached.local.length);
  // An Eagle block's window reaches into the next block: only a fresh chain is laid out as promptHashes lays it.
  if (reused === 0 || opts.eagle === true) return promptHashes(tokenIds, blockSize, opts);
  const total = Math.floor(tokenIds.length / blockSize);
  const local = blockHashes(tokenIds.subarray(reused * blockSize), blockSize, opts);
  // seq[0] = local[0]: a chain started at the last reused block's sequence hash continues it.
  const chain = new BigUint64Array(local.length + 1);
  chain[0] = cached!.seq[reused - 1]!;
  chain.set(local, 1);
  const seq = sequenceHashes(chain);
  const out = new BigUint64Array(2 * total);
  out.set(cached!.local.subarray(0, reused), 0);
  out.set(local, reused);
  out.set(cached!.seq.subarray(0, reused), total);
  out.set(seq.subarray(1), total + reused);
  return { local: out.subarray(0, total), seq: out.subarray(total) };
}

/** A copy of `h` in one buffer of its own (the result's arrays are moved to the caller's thread). */
export function ownHashes(h: PromptHashes): PromptHashes {
  const n = h.local.length;
  const out = new BigUint64Array(2 * n);
  out.set(h.local, 0);
  out.set(h.seq, n);
  return { local: out.subarray(0, n), seq: out.subarray(n) };
}
