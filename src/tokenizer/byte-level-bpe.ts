/**
 * `ByteLevelBpe`: Hugging Face's byte-level BPE encoding, reproduced in JavaScript for the `tokenizer.json`
 * shapes `readBpeShape` accepts, so the gateway tokenizes without the native round trip. It follows
 * `tokenizers` step by step: added tokens split first (leftmost, longest), each remaining segment normalized
 * (NFC) and split by the pre-tokenizer regexes, each piece's UTF-8 bytes merged by merge priority (the lowest
 * merge index first, the leftmost of equal ones, exactly as the Rust `Word::merge_all`), then the
 * post-processor's special tokens. Merging by priority rather than by token rank (tiktoken's rule) makes
 * the result independent of how the merges relate to the vocabulary's ids.
 */
import { readBpeShape, type BpeShape } from './bpe-shape.js';
import { scannerFor, type PieceScanner } from './pretokenize.js';

/** Heap entries pack a merge rank over a byte position below 2^32. */
const P = 2 ** 32;
/** Pieces up to this many characters are cached; longer ones are rare and would pin memory. */
const CACHE_PIECE_CHARS = 256;
const CACHE_ENTRIES = 1 << 16;
/** Pieces up to this many bytes merge by a scan (`#mergeSmall`), longer ones through a heap. */
const SMALL_PIECE = 48;
const NO_MERGE = 0x7fffffff;

/** GPT-2's byte-to-character table: printable bytes map to themselves, the rest to U+0100 onwards. */
function byteChars(): string[] {
  const out: string[] = new Array<string>(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    out[b] = String.fromCharCode(printable ? b : 256 + extra++);
  }
  return out;
}

/** Thrown inside an encode when a split regex matches the empty string (the caller keeps the native result). */
class NotExact extends Error {}

/** ES2024 string methods Node 20 has and this project's TypeScript lib does not declare. */
type WellFormed = string & { isWellFormed(): boolean; toWellFormed(): string };

const escapeRegex = (s: string): string => s.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');

/** A regex matching any of `contents`, longest first: at the leftmost position that matches, the longest wins. */
function alternation(contents: string[]): RegExp | undefined {
  if (contents.length === 0) return undefined;
  const sorted = [...contents].sort((a, b) => b.length - a.length);
  return new RegExp(sorted.map(escapeRegex).join('|'), 'gu');
}

/** A byte-level BPE encoder equal to the native tokenizer on the shapes it accepts. */
export class ByteLevelBpe {
  readonly #byteIds: Int32Array;
  /** (left id, right id) → merge rank and merged id. */
  readonly #merges: PairTable;
  /** Whole pieces (as text) that are one vocabulary token, for `ignore_merges`. */
  readonly #whole: Map<string, number> | undefined;
  /** What encoding needs of the shape; the vocabulary and merge list themselves are not kept. */
  readonly #shape: Pick<BpeShape, 'nfc' | 'splits' | 'prefix' | 'suffix'>;
  /** The split regexes, sticky. */
  readonly #sticky: RegExp[];
  /** Per split, the hand-written scanner equal to its regex, where `pretokenize.ts` has one. */
  readonly #scanners: (PieceScanner | undefined)[];
  readonly #added: RegExp | undefined;
  readonly #addedNormalized: RegExp | undefined;
  readonly #addedIds = new Map<string, number>();
  readonly #cache = new Map<string, number | number[]>();
  #bytes = new Uint8Array(1024);
  readonly #utf8 = new TextEncoder();

  // Scratch of #merge, grown as needed: the symbols of the piece being merged as a linked list.
  #id = new Int32Array(64);
  #next = new Int32Array(64);
  #prev = new Int32Array(64);
  readonly #heap = new MinHeap();

  private constructor(shape: BpeShape, byteIds: Int32Array, merges: PairTable) {
    this.#shape = { nfc: shape.nfc, splits: shape.splits, prefix: shape.prefix, suffix: shape.suffix };
    this.#byteIds = byteIds;
    this.#merges = merges;
    this.#sticky = shape.splits.map((re) => new RegExp(re.source, 'uy'));
    this.#scanners = shape.splits.map(scannerFor);
    if (shape.ignoreMerges) this.#whole = wholeTokens(shape.vocab);
    for (const a of shape.added) this.#addedIds.set(a.content, a.id);
    // As the native tokenizer: tokens matched in the raw text first, then, in the normalized text between
    // them, those marked `normalized`.
    this.#added = alternation(shape.added.filter((a) => !a.normalized).map((a) => a.content));
    this.#addedNormalized = alternation(shape.added.filter((a) => a.normalized).map((a) => a.content));
  }

  /** The encoder for a parsed `tokenizer.json`, or the reason its shape is not one this encoder reproduces. */
  static fromJson(json: unknown): ByteLevelBpe | { refused: string } {
    const shape = readBpeShape(json);
    if ('refused' in shape) return shape;
    const chars = byteChars();
    const byteIds = new Int32Array(256);
    for (let b = 0; b < 256; b++) {
      const id = shape.vocab[chars[b]!];
      if (id === undefined) return { refused: `byte ${b} has no token` };
      byteIds[b] = id;
    }
    const merges = new PairTable(shape.merges.length);
    for (let i = 0; i < shape.merges.length; i++) {
      const [l, r] = shape.merges[i]!;
      const a = shape.vocab[l];
      const b = shape.vocab[r];
      const c = shape.vocab[l + r];
      if (a === undefined || b === undefined || c === undefined)
        return { refused: `merge ${i} names a token not in the vocabulary` };
      // A later duplicate of a pair overrides the earlier one, as in the native map.
      merges.set(a, b, i, c);
    }
    return new ByteLevelBpe(shape, byteIds, merges);
  }

  /**
   * The ids of `text`, with the post-processor's special tokens when `addSpecialTokens`; undefined in the one
   * case this encoder does not decide (a split regex matching the empty string), where the native one must.
   */
  encode(text: string, addSpecialTokens: boolean): number[] | undefined {
    // Node hands the native tokenizer lone surrogates as U+FFFD; do the same.
    const t = text as WellFormed;
    const s = t.isWellFormed() ? text : t.toWellFormed();
    const out: number[] = addSpecialTokens ? [...this.#shape.prefix] : [];
    try {
      this.#addedSplit(this.#added, s, out, (gap) => this.#segment(gap, out));
    } catch (err) {
      if (err instanceof NotExact) return undefined;
      throw err;
    }
    if (addSpecialTokens) for (const id of this.#shape.suffix) out.push(id);
    return out;
  }

  /** A text between raw-matched added tokens: normalized, then split by the added tokens matched normalized. */
  #segment(text: string, out: number[]): void {
    const norm = this.#shape.nfc ? text.normalize('NFC') : text;
    this.#addedSplit(this.#addedNormalized, norm, out, (gap) => this.#split(0, gap, out));
  }

  /** The ids of the added tokens `re` finds in `text` (leftmost, longest), and `gap` for each text between them. */
  #addedSplit(re: RegExp | undefined, text: string, out: number[], gap: (text: string) => void): void {
    let last = 0;
    if (re !== undefined) {
      re.lastIndex = 0;
      for (let m = re.exec(text); m !== null; m = re.exec(text)) {
        if (m.index > last) gap(text.slice(last, m.index));
        out.push(this.#addedIds.get(m[0])!);
        last = m.index + m[0].length;
      }
    }
    if (last < text.length) gap(last === 0 ? text : text.slice(last));
  }

  /**
   * Applies split `level` (isolating: matches and the gaps between them are pieces) and the ones after it.
   * A split with a scanner walks its consecutive matches (its pattern leaves no gaps). Otherwise a sticky
   * test at the current position finds the next match without building a match array; only after a gap does
   * the global regex search for the next one.
   */
  #split(level: number, text: string, out: number[]): void {
    if (level === this.#sticky.length) {
      this.#piece(text, out);
      return;
    }
    const scan = this.#scanners[level];
    if (scan !== undefined) {
      for (let pos = 0, n = text.length; pos < n;) {
        const end = scan(text, pos);
        this.#split(level + 1, pos === 0 && end === n ? text : text.slice(pos, end), out);
        pos = end;
      }
      return;
    }
    const sticky = this.#sticky[level]!;
    const n = text.length;
    let pos = 0;
    while (pos < n) {
      sticky.lastIndex = pos;
      if (sticky.test(text)) {
        const end = sticky.lastIndex;
        if (end === pos) throw new NotExact();
        this.#split(level + 1, pos === 0 && end === n ? text : text.slice(pos, end), out);
        pos = end;
        continue;
      }
      const re = this.#shape.splits[level]!;
      re.lastIndex = pos;
      const m = re.exec(text);
      const gapEnd = m === null ? n : m.index;
      this.#split(level + 1, text.slice(pos, gapEnd), out);
      pos = gapEnd;
    }
  }

  #piece(piece: string, out: number[]): void {
    const hit = this.#cache.get(piece);
    if (hit !== undefined) {
      if (typeof hit === 'number') out.push(hit);
      else for (const id of hit) out.push(id);
      return;
    }
    const whole = this.#whole?.get(piece);
    const ids = whole !== undefined ? [whole] : this.#merge(piece);
    if (piece.length <= CACHE_PIECE_CHARS) {
      // Bounded by clearing: the cache only saves time, it never changes a result.
      if (this.#cache.size >= CACHE_ENTRIES) this.#cache.clear();
      this.#cache.set(piece, ids.length === 1 ? ids[0]! : ids);
    }
    for (const id of ids) out.push(id);
  }

  /** The native `Word::merge_all`: repeatedly merge the pair of the lowest merge rank, leftmost first. */
  #merge(piece: string): number[] {
    if (this.#bytes.length < piece.length * 3) this.#bytes = new Uint8Array(piece.length * 3);
    const n = this.#utf8.encodeInto(piece, this.#bytes).written;
    if (this.#id.length < n) {
      this.#id = new Int32Array(n * 2);
      this.#next = new Int32Array(n * 2);
      this.#prev = new Int32Array(n * 2);
    }
    const bytes = this.#bytes;
    const id = this.#id;
    const next = this.#next;
    const prev = this.#prev;
    const heap = this.#heap;
    const merges = this.#merges;
    if (n <= SMALL_PIECE) {
      for (let i = 0; i < n; i++) id[i] = this.#byteIds[bytes[i]!]!;
      return this.#mergeSmall(n);
    }
    for (let i = 0; i < n; i++) {
      id[i] = this.#byteIds[bytes[i]!]!;
      prev[i] = i - 1;
      next[i] = i + 1 < n ? i + 1 : -1;
    }
    heap.clear();
    for (let i = 0; i + 1 < n; i++) offer(merges, heap, id[i]!, id[i + 1]!, i);
    while (heap.size > 0) {
      const top = heap.pop();
      const rank = Math.floor(top / P);
      const pos = top - rank * P;
      const nx = next[pos]!;
      if (id[pos] === -1 || nx === -1) continue;
      const slot = merges.find(id[pos]!, id[nx]!);
      if (slot < 0 || merges.rank[slot] !== rank) continue;
      id[pos] = merges.result[slot]!;
      id[nx] = -1;
      const after = next[nx]!;
      next[pos] = after;
      if (after !== -1) prev[after] = pos;
      const before = prev[pos]!;
      if (before !== -1) offer(merges, heap, id[before]!, id[pos]!, before);
      if (after !== -1) offer(merges, heap, id[pos]!, id[after]!, pos);
    }
    const ids: number[] = [];
    for (let i = 0; i !== -1; i = next[i]!) ids.push(id[i]!);
    return ids;
  }
  /**
   * `#merge` for a short piece (ids already in `#id`): the same choice, the pair of the lowest rank and the
   * leftmost of equals, found by a scan of the pairs' ranks kept in an array, which beats a heap at this size.
   */
  #mergeSmall(n: number): number[] {
    const id = this.#id;
    const slots = this.#next;
    const ranks = this.#prev;
    const merges = this.#merges;
    const pair = (i: number): void => {
      const slot = merges.find(id[i]!, id[i + 1]!);
      slots[i] = slot;
      ranks[i] = slot < 0 ? NO_MERGE : merges.rank[slot]!;
    };
    for (let i = 0; i + 1 < n; i++) pair(i);
    let m = n;
    for (;;) {
      let best = -1;
      let bestRank = NO_MERGE;
      for (let i = 0; i + 1 < m; i++) {
        if (ranks[i]! < bestRank) {
          bestRank = ranks[i]!;
          best = i;
        }
      }
      if (best < 0) break;
      id[best] = merges.result[slots[best]!]!;
      // Drop symbol best + 1 and the pair that started at it.
      for (let j = best + 1; j + 1 < m; j++) id[j] = id[j + 1]!;
      for (let j = best + 1; j + 2 < m; j++) {
        slots[j] = slots[j + 1]!;
        ranks[j] = ranks[j + 1]!;
      }
      m--;
      if (best + 1 < m) pair(best);
      if (best > 0) pair(best - 1);
    }
    return Array.from(id.subarray(0, m));
  }
}

/** Queues the merge of the pair at `pos`, if the pair has one. */
function offer(merges: PairTable, heap: MinHeap, left: number, right: number, pos: number): void {
  const slot = merges.find(left, right);
  if (slot >= 0) heap.push(merges.rank[slot]! * P + pos);
}

/** An open-addressing hash table from a pair of token ids to its merge (rank, merged id). */
class PairTable {
  readonly left: Int32Array;
  readonly right: Int32Array;
  readonly rank: Int32Array;
  readonly result: Int32Array;
  readonly #mask: number;

  constructor(count: number) {
    let size = 1024;
    while (size < count * 2) size *= 2;
    this.#mask = size - 1;
    this.left = new Int32Array(size).fill(-1);
    this.right = new Int32Array(size);
    this.rank = new Int32Array(size);
    this.result = new Int32Array(size);
  }

  /** The slot of the pair, or -1. */
  find(a: number, b: number): number {
    let i = (Math.imul(a, 0x9e3779b1) ^ Math.imul(b, 0x85ebca6b)) & this.#mask;
    for (;;) {
      const l = this.left[i]!;
      if (l === -1) return -1;
      if (l === a && this.right[i] === b) return i;
      i = (i + 1) & this.#mask;
    }
  }

  set(a: number, b: number, rank: number, result: number): void {
    let i = (Math.imul(a, 0x9e3779b1) ^ Math.imul(b, 0x85ebca6b)) & this.#mask;
    while (this.left[i] !== -1 && !(this.left[i] === a && this.right[i] === b)) i = (i + 1) & this.#mask;
    this.left[i] = a;
    this.right[i] = b;
    this.rank[i] = rank;
    this.result[i] = result;
  }
}

/** Vocabulary tokens whose bytes are valid UTF-8, by their text (a regex piece is always valid text). */
function wholeTokens(vocab: Readonly<Record<string, number>>): Map<string, number> {
  const chars = byteChars();
  const byteOf = new Map<string, number>(chars.map((c, b) => [c, b]));
  // ignoreBOM: a token starting with U+FEFF's bytes keeps it (the default would drop it and alias another token).
  const td = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  const out = new Map<string, number>();
  for (const [tok, id] of Object.entries(vocab)) {
    const bytes = new Uint8Array(tok.length);
    let ok = true;
    for (let i = 0; i < tok.length && ok; i++) {
      const b = byteOf.get(tok[i]!);
      if (b === undefined) ok = false;
      else bytes[i] = b;
    }
    if (!ok) continue;
    try {
      out.set(td.decode(bytes), id);
    } catch {
      // not valid UTF-8: no regex piece can equal it
    }
  }
  return out;
}

/** A binary min-heap of non-negative integers below 2^53. */
class MinHeap {
  #a: number[] = [];
  get size(): number {
    return this.#a.length;
  }
  clear(): void {
    this.#a.length = 0;
  }
  push(v: number): void {
    const a = this.#a;
    let i = a.length;
    a.push(v);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p]! <= v) break;
      a[i] = a[p]!;
      i = p;
    }
    a[i] = v;
  }
  pop(): number {
    const a = this.#a;
    const top = a[0]!;
    const last = a.pop()!;
    const n = a.length;
    if (n > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= n) break;
        const c = l + 1 < n && a[l + 1]! < a[l]! ? l + 1 : l;
        if (a[c]! >= last) break;
        a[i] = a[c]!;
        i = c;
      }
      a[i] = last;
    }
    return top;
  }
}
