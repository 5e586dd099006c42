/**
 * The nodes of the in-flight prompt trie (`active-prompt-trie.ts`) and the
 * primitives its walks are made of: finding the child a prompt continues into,
 * matching an edge, and filing a node's children, in a list while they are few
 * (the usual fan-out) and in a map beyond, keyed by 30 bits of their first
 * block's hash (a small integer: a lookup neither allocates a BigInt nor hashes
 * one), the full 64 bits compared on the way, siblings that share those bits
 * chained.
 *
 * Layout. A node is a number, its record `STRIDE` u32 words of one typed array
 * (`rec`); node 0 is the root, and 0 as a child, sibling or parent means none
 * (the root is nobody's child). What a walk reads of a node is in its record:
 * the edge's bounds, its first and last block's hashes, its first child and next
 * sibling. A walk is a chain of dependent loads, one per branch point on the
 * prompt's path; objects scattered over the heap cost one or more cache lines
 * and a TLB entry each, where records packed in one array cost one line each and
 * share a few pages: with the CPU caches cold (the main thread also applies KV
 * events), that is most of a walk's time. Each node's slots are two bit sets in
 * a second typed array (`bits`, `2 * words` u32 a node): the slots holding it
 * (`holds`) and those holding it through two or more sources (`multi`, see
 * `active-prompt-trie.ts`). The prompt an edge refers to (`rep`) and a wide
 * node's map stay in side arrays by node: few walks read them.
 *
 *   rec:  | root | n1: start end last first kids kid next mapped width total ends parent | n2: ... |
 *   bits: | root: holds[words] multi[words] | n1: ... |
 *
 * Freed nodes are reused (a free list through `next`); the array doubles when
 * full. Their side entries are cleared on release, so a dropped node keeps no
 * prompt alive.
 */

/** u32 words per node record: 64 bytes, one cache line when aligned; what a walk reads is in its first 44. */
const STRIDE = 16;
/** Word offsets in a record. */
const START = 0;
const END = 1;
/** The edge's last block (`end - 1`, which never changes for a node): low and high words of its hash. */
const LAST_LO = 2;
const LAST_HI = 3;
/** The edge's first block (`start`): low and high words of its hash, kept in step with `start`. */
const FIRST_LO = 4;
const FIRST_HI = 5;
/** How many children. */
const KIDS = 6;
/** Up to `LIST_MAX` children: the first of them, the others chained through `NEXT`. Unused with a map. */
const KID = 7;
/** The next sibling: in the parent's list, or with the same key in its map; a free node's next free one. */
const NEXT = 8;
/** 1 when the children are in a map: a walk learns it from the record, without loading the side array. */
const MAPPED = 9;
/** How many slots hold the node (its `holds` set's size), read without loading the set. */
const WIDTH = 10;
/** Requests in this subtree. */
const TOTAL = 11;
/** Requests whose prompt ends exactly at `end`. */
const ENDS = 12;
/** Last: a walk down never reads it. */
const PARENT = 13;

/** The low 30 bits of a u32: what a small integer (a Map key that is not a heap number) holds. */
const SMI_BITS = 0x3fffffff;

/** A node keeps its children in a list up to this many (the usual fan-out), in a map beyond. */
const LIST_MAX = 8;

/** The root's number. */
export const ROOT = 0;

/** A node of the trie: a number that stays valid until the node is dropped or merged away. */
export type TrieNode = number;

const NO_REP = new Uint32Array(0);

export class TrieNodes {
  /** The records, `STRIDE` words a node; re-read after `alloc` (it grows). */
  rec = new Uint32Array(64 * STRIDE);
  /** Per node, a prompt whose blocks [0, end) are its path, as u32 pairs (`pairView`). */
  readonly #rep: Uint32Array[] = [NO_REP];
  /** Per node, `words` u32 of the slots holding it, then `words` of those holding it more than once. */
  #bits = new Uint32Array(64 * 2);
  /** u32 words a node's bit set of slots takes (slots beyond `32 * words` grow it). */
  #words = 1;
  /** Per node beyond `LIST_MAX` children: its children by `childKey`, those sharing one chained through `NEXT`. */
  readonly #maps: (Map<number, number> | undefined)[] = [undefined];
  /** Nodes ever handed out (the root included): records past it are unused. */
  #used = 1;
  /** The first free node (0: none), the others chained through `NEXT`. */
  #free = 0;

  /** Records a new node for the edge [start, end) of the prompt `rep32` under `parent`, not yet filed there. */
  alloc(start: number, end: number, rep32: Uint32Array, parent: TrieNode): TrieNode {
    let node = this.#free;
    if (node !== 0) {
      this.#free = this.rec[node * STRIDE + NEXT]!;
    } else {
      node = this.#used++;
      if (node * STRIDE >= this.rec.length) {
        const grown = new Uint32Array(this.rec.length * 2);
        grown.set(this.rec);
        this.rec = grown;
        const bits = new Uint32Array(this.#bits.length * 2);
        bits.set(this.#bits);
        this.#bits = bits;
      }
      this.#rep.push(NO_REP);
      this.#maps.push(undefined);
    }
    const r = this.rec;
    const o = node * STRIDE;
    r.fill(0, o, o + STRIDE);
    r[o + END] = end;
    r[o + PARENT] = parent;
    this.#rep[node] = rep32;
    if (end > 0) {
      const b = (end - 1) << 1;
      r[o + LAST_LO] = rep32[b]!;
      r[o + LAST_HI] = rep32[b + 1]!;
    }
    this.setStart(node, start);
    return node;
  }

  /** Returns a node (dropped from its parent, childless, held by no slot) to the free list; it keeps no prompt alive. */
  release(node: TrieNode): void {
    const w = 2 * this.#words;
    this.#bits.fill(0, node * w, node * w + w);
    this.#rep[node] = NO_REP;
    this.#maps[node] = undefined;
    this.rec[node * STRIDE + NEXT] = this.#free;
    this.#free = node;
  }

  /** Nodes in use, the root included. */
  get live(): number {
    let free = 0;
    for (let f = this.#free; f !== 0; f = this.rec[f * STRIDE + NEXT]!) free++;
    return this.#used - free;
  }

  start(node: TrieNode): number {
    return this.rec[node * STRIDE + START]!;
  }
  end(node: TrieNode): number {
    return this.rec[node * STRIDE + END]!;
  }
  parent(node: TrieNode): TrieNode {
    return this.rec[node * STRIDE + PARENT]!;
  }
  setParent(node: TrieNode, parent: TrieNode): void {
    this.rec[node * STRIDE + PARENT] = parent;
  }
  kids(node: TrieNode): number {
    return this.rec[node * STRIDE + KIDS]!;
  }
  width(node: TrieNode): number {
    return this.rec[node * STRIDE + WIDTH]!;
  }
  addWidth(node: TrieNode, by: number): void {
    this.rec[node * STRIDE + WIDTH]! += by;
  }
  total(node: TrieNode): number {
    return this.rec[node * STRIDE + TOTAL]!;
  }
  addTotal(node: TrieNode, by: number): void {
    this.rec[node * STRIDE + TOTAL]! += by;
  }
  ends(node: TrieNode): number {
    return this.rec[node * STRIDE + ENDS]!;
  }
  addEnds(node: TrieNode, by: number): void {
    this.rec[node * STRIDE + ENDS]! += by;
  }
  rep(node: TrieNode): Uint32Array {
    return this.#rep[node]!;
  }

  /** Makes room in every node's bit sets for slots [0, count). */
  ensureSlots(count: number): void {
    if (count <= 32 * this.#words) return;
    const words = Math.max(this.#words * 2, (count + 31) >>> 5);
    const old = this.#bits;
    const from = 2 * this.#words;
    const to = 2 * words;
    const bits = new Uint32Array((old.length / from) * to);
    for (let n = 0, o = 0; o < old.length; n++, o += from) {
      bits.set(old.subarray(o, o + this.#words), n * to);
      bits.set(old.subarray(o + this.#words, o + from), n * to + words);
    }
    this.#bits = bits;
    this.#words = words;
  }

  /** Whether `slot` holds `node` (a request of the slot passes through it). */
  holds(node: TrieNode, slot: number): boolean {
    return (this.#bits[node * 2 * this.#words + (slot >>> 5)]! & (1 << (slot & 31))) !== 0;
  }
  setHolds(node: TrieNode, slot: number, on: boolean): void {
    this.#setBit(node * 2 * this.#words + (slot >>> 5), slot, on);
  }
  /** Whether `slot` holds `node` through two or more sources. */
  multi(node: TrieNode, slot: number): boolean {
    const w = this.#words;
    return (this.#bits[node * 2 * w + w + (slot >>> 5)]! & (1 << (slot & 31))) !== 0;
  }
  setMulti(node: TrieNode, slot: number, on: boolean): void {
    const w = this.#words;
    this.#setBit(node * 2 * w + w + (slot >>> 5), slot, on);
  }
  /** Gives `to` the slots holding `from`, each once (a split's upper half). */
  copyHolds(from: TrieNode, to: TrieNode): void {
    const w = this.#words;
    this.#bits.copyWithin(to * 2 * w, from * 2 * w, from * 2 * w + w);
  }

  /**
   * For each slot holding `node` and not in `seen` (`words` u32), writes `depth` to `out[slot]` and adds it
   * to `seen`.
   */
  writeNew(node: TrieNode, seen: Uint32Array, depth: number, out: Float64Array): void {
    const bits = this.#bits;
    const w = this.#words;
    const o = node * 2 * w;
    for (let i = 0; i < w; i++) {
      let fresh = bits[o + i]! & ~seen[i]!;
      if (fresh === 0) continue;
      seen[i]! |= fresh;
      while (fresh !== 0) {
        const low = fresh & -fresh;
        out[(i << 5) + 31 - Math.clz32(low)] = depth;
        fresh ^= low;
      }
    }
  }

  /** u32 words a node's bit set of slots takes. */
  get words(): number {
    return this.#words;
  }

  #setBit(word: number, slot: number, on: boolean): void {
    const bit = 1 << (slot & 31);
    if (on) this.#bits[word]! |= bit;
    else this.#bits[word]! &= ~bit;
  }

  /** Whether the prompt `seq32` holds the last block of `node`'s edge (so, chained hashes, all of its path). */
  holdsLast(node: TrieNode, seq32: Uint32Array): boolean {
    const r = this.rec;
    const o = node * STRIDE;
    const b = (r[o + END]! - 1) << 1;
    return seq32[b] === r[o + LAST_LO] && seq32[b + 1] === r[o + LAST_HI];
  }

  /** Moves the edge's first block to `start` (a split's lower half, a merge's child): its first hash follows. */
  setStart(node: TrieNode, start: number): void {
    const r = this.rec;
    const o = node * STRIDE;
    const rep32 = this.#rep[node]!;
    r[o + START] = start;
    if (r[o + END]! > start) {
      r[o + FIRST_LO] = rep32[start << 1]!;
      r[o + FIRST_HI] = rep32[(start << 1) + 1]!;
    }
  }

  /**
   * The child of `node` whose first block is block `at` of the prompt `seq32`, or 0. Compares the hashes
   * each candidate's record holds: no prompt array is loaded.
   */
  childAt(node: TrieNode, seq32: Uint32Array, at: number): TrieNode {
    const lo = seq32[at << 1]!;
    const hi = seq32[(at << 1) + 1]!;
    const r = this.rec;
    let c = this.#firstCandidate(node, lo & SMI_BITS);
    while (c !== 0) {
      const o = c * STRIDE;
      if (r[o + FIRST_LO] === lo && r[o + FIRST_HI] === hi) return c;
      c = r[o + NEXT]!;
    }
    return 0;
  }

  /**
   * The first block in [start + 1, min(end, n)) where the prompt `seq32` of `n` blocks leaves the edge of
   * `child` (whose first block it matches), or that bound. Chained hashes that agree on the edge's last block
   * agree on all of it: a whole-edge match, the usual case on a deep path, costs one comparison and no load
   * of the edge's prompt.
   */
  edgeMatch(seq32: Uint32Array, n: number, child: TrieNode): number {
    const r = this.rec;
    const o = child * STRIDE;
    const end = r[o + END]!;
    if (end <= n) {
      const b = (end - 1) << 1;
      if (seq32[b] === r[o + LAST_LO] && seq32[b + 1] === r[o + LAST_HI]) return end;
    }
    return firstDifference(seq32, this.#rep[child]!, r[o + START]! + 1, end < n ? end : n);
  }

  /** Files `child` (its record complete) among `parent`'s children. */
  addChild(parent: TrieNode, child: TrieNode): void {
    const r = this.rec;
    const po = parent * STRIDE;
    const co = child * STRIDE;
    const kids = ++r[po + KIDS]!;
    const map = this.#maps[parent];
    if (map === undefined && kids <= LIST_MAX) {
      // After the first child, which a walk meets first: the eldest, the one a split kept (the longer path).
      const head = r[po + KID]!;
      if (head === 0) r[po + KID] = child;
      else {
        r[co + NEXT] = r[head * STRIDE + NEXT]!;
        r[head * STRIDE + NEXT] = child;
      }
      return;
    }
    let m = map;
    if (m === undefined) {
      // The list outgrew itself: file its children in a map.
      m = new Map();
      this.#maps[parent] = m;
      r[po + MAPPED] = 1;
      let c = r[po + KID]!;
      r[po + KID] = 0;
      while (c !== 0) {
        const after = r[c * STRIDE + NEXT]!;
        const key = r[c * STRIDE + FIRST_LO]! & SMI_BITS;
        r[c * STRIDE + NEXT] = m.get(key) ?? 0;
        m.set(key, c);
        c = after;
      }
    }
    const key = r[co + FIRST_LO]! & SMI_BITS;
    r[co + NEXT] = m.get(key) ?? 0;
    m.set(key, child);
  }

  /** Puts `by` where `old` is among `parent`'s children (both begin with the same block). */
  replaceChild(parent: TrieNode, old: TrieNode, by: TrieNode): void {
    const r = this.rec;
    const oo = old * STRIDE;
    r[by * STRIDE + NEXT] = r[oo + NEXT]!;
    r[oo + NEXT] = 0;
    const key = r[oo + FIRST_LO]! & SMI_BITS;
    let c = this.#firstCandidate(parent, key);
    if (c === old) {
      this.#setHead(parent, key, by);
      return;
    }
    while (r[c * STRIDE + NEXT] !== old) c = r[c * STRIDE + NEXT]!;
    r[c * STRIDE + NEXT] = by;
  }

  /** Takes `child` out of `parent`'s children (a map emptied is dropped). */
  dropChild(parent: TrieNode, child: TrieNode): void {
    const r = this.rec;
    const co = child * STRIDE;
    const key = r[co + FIRST_LO]! & SMI_BITS;
    const kids = --r[parent * STRIDE + KIDS]!;
    let c = this.#firstCandidate(parent, key);
    if (c === child) {
      this.#setHead(parent, key, r[co + NEXT]!);
    } else {
      while (r[c * STRIDE + NEXT] !== child) c = r[c * STRIDE + NEXT]!;
      r[c * STRIDE + NEXT] = r[co + NEXT]!;
    }
    r[co + NEXT] = 0;
    if (kids === 0) {
      this.#maps[parent] = undefined;
      r[parent * STRIDE + MAPPED] = 0;
    }
  }

  /** The only child of a node with one. */
  onlyChild(node: TrieNode): TrieNode {
    const map = this.#maps[node];
    return map !== undefined ? map.values().next().value! : this.rec[node * STRIDE + KID]!;
  }

  /** The first of the children of `node` that may begin with a block of `key` (a list's head, or the map's chain). */
  #firstCandidate(node: TrieNode, key: number): TrieNode {
    const o = node * STRIDE;
    return this.rec[o + MAPPED] === 0 ? this.rec[o + KID]! : (this.#maps[node]!.get(key) ?? 0);
  }

  /** Makes `by` (0: none) the head of the list or chain filed under `key`. */
  #setHead(parent: TrieNode, key: number, by: TrieNode): void {
    const map = this.#maps[parent];
    if (map === undefined) this.rec[parent * STRIDE + KID] = by;
    else if (by === 0) map.delete(key);
    else map.set(key, by);
  }
}

/** First index in [from, to) where the chained hash sequences differ, or `to` (they agree on [0, from)). */
function firstDifference(a: Uint32Array, b: Uint32Array, from: number, to: number): number {
  let lo = from;
  let hi = to;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const k = mid << 1;
    if (a[k] === b[k] && a[k + 1] === b[k + 1]) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
