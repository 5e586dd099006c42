/**
 * A node of the in-flight prompt trie (`active-prompt-trie.ts`) and the
 * primitives its walks are made of: finding the child a prompt continues into,
 * matching an edge, and filing a node's children, in a list while they are few
 * (the usual fan-out: a walk then reads no Map) and in a map beyond, keyed by
 * 30 bits of their first block's hash (a small integer: a lookup neither
 * allocates a BigInt nor hashes one), the full 64 bits compared on the way,
 * siblings that share those bits chained.
 *
 * What a walk compares on a node is held in the node itself as small integers
 * (its first block's key, its last block's hash): through whole edges a walk
 * loads the nodes alone, not the prompt arrays they refer to.
 */

export class TrieNode {
  constructor(
    /** First block of the edge (the block its parent files it under). */
    public start: number,
    /** One past the last block of the edge: a request through this node holds blocks [0, end). */
    public end: number,
    /** A prompt whose blocks [0, end) are this node's path, as u64 hashes and as u32 pairs. */
    public rep: BigUint64Array,
    public rep32: Uint32Array,
    public parent: TrieNode | null,
  ) {
    this.key = end > start ? childKey(rep32, start) : 0;
    if (end > 0) {
      const b = (end - 1) << 1;
      this.lastA = rep32[b]! & SMI_BITS;
      this.lastB = rep32[b + 1]! & SMI_BITS;
      this.lastC = topBits(rep32[b]!, rep32[b + 1]!);
    }
  }
  /**
   * The hash of the edge's last block (`end - 1`, which never changes for a node) as three small integers
   * (30 + 30 + 4 bits): a walk compares it without loading `rep32`, another object and another cache line.
   */
  lastA = 0;
  lastB = 0;
  lastC = 0;
  /** `childKey` of the first block (block `start`): kept in step with `start` by `setStart`. */
  key = 0;
  /** How many children. */
  kids = 0;
  /** Up to `LIST_MAX` children: the first of them, the others chained through `next` (a walk reads no Map). */
  kid: TrieNode | undefined = undefined;
  /** Beyond `LIST_MAX`: children by `key`, those sharing one chained through `next`; `kid` is then unused. */
  children: Map<number, TrieNode> | null = null;
  /** The next sibling: in the parent's list, or with the same `key` in its map (almost always none). */
  next: TrieNode | undefined = undefined;

  setStart(start: number): void {
    this.start = start;
    this.key = childKey(this.rep32, start);
  }
  /**
   * Slots with requests in this subtree and how many, as pairs (slot, count) in one plain SMI array: one
   * object to load per node on a walk, a lookup a short loop, a split one `slice`, where a Map would cost
   * a hash insert per slot.
   */
  members: number[] = [];
  /** How many slots `members` holds (its pairs), read without loading the array. */
  width = 0;
  /** Requests in this subtree. */
  total = 0;
  /** Requests whose prompt ends exactly at `end`. */
  ends = 0;
}

/** The low 30 bits of a u32: what a small integer (an unboxed field) holds. */
const SMI_BITS = 0x3fffffff;

/** The top two bits of each word of a u32 pair, as one small integer. */
function topBits(lo: number, hi: number): number {
  return (lo >>> 30) | ((hi >>> 30) << 2);
}

/** Whether block `at` of the prompt `seq32` is the last block of `node`'s edge. */
function holdsLast(node: TrieNode, seq32: Uint32Array, at: number): boolean {
  const lo = seq32[at << 1]!;
  const hi = seq32[(at << 1) + 1]!;
  return (lo & SMI_BITS) === node.lastA && (hi & SMI_BITS) === node.lastB && topBits(lo, hi) === node.lastC;
}

/** Where in `members` the slot's pair starts, or -1 (a loop: on a node's few slots it beats a builtin's call). */
export function memberIndex(members: number[], slot: number): number {
  for (let i = 0; i < members.length; i += 2) if (members[i] === slot) return i;
  return -1;
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

/**
 * The first block in [child.start + 1, min(child.end, n)) where the prompt `seq32` of `n` blocks leaves the
 * edge of `child` (whose first block it matches), or that bound. Chained hashes that agree on the edge's last
 * block agree on all of it: a whole-edge match, the usual case on a deep path, costs one comparison.
 */
export function edgeMatch(seq32: Uint32Array, n: number, child: TrieNode): number {
  const end = child.end;
  if (end <= n && holdsLast(child, seq32, end - 1)) return end;
  return firstDifference(seq32, child.rep32, child.start + 1, end < n ? end : n);
}

/**
 * A child's key in its parent's map: 30 bits of the hash of its first block (block `at` of `h32`). A small
 * integer, so a lookup neither allocates a BigInt nor hashes one; the full 64 bits are compared in
 * `childAt`.
 */
function childKey(h32: Uint32Array, at: number): number {
  return h32[at << 1]! & SMI_BITS;
}

/** A node keeps its children in a list up to this many (the usual fan-out), in a map beyond. */
const LIST_MAX = 8;

/** The first of the children of `node` that may begin with block `key` (a list's head, or the map's chain). */
function firstCandidate(node: TrieNode, key: number): TrieNode | undefined {
  return node.children !== null ? node.children.get(key) : node.kid;
}

/**
 * The child of `node` whose first block is block `at` of the prompt `seq32`, if any. A candidate whose last
 * block the prompt also holds is that child (chained hashes), found without loading its `rep32`.
 */
export function childAt(node: TrieNode, seq32: Uint32Array, at: number): TrieNode | undefined {
  const key = childKey(seq32, at);
  const n = seq32.length >> 1;
  const lo = seq32[at << 1];
  const hi = seq32[(at << 1) + 1];
  for (let c = firstCandidate(node, key); c !== undefined; c = c.next) {
    if (c.key !== key) continue;
    if (c.end <= n && holdsLast(c, seq32, c.end - 1)) return c;
    const k = c.start << 1;
    if (c.rep32[k] === lo && c.rep32[k + 1] === hi) return c;
  }
  return undefined;
}

export function addChild(parent: TrieNode, child: TrieNode): void {
  parent.kids++;
  if (parent.children === null && parent.kids <= LIST_MAX) {
    // After the first child, which a walk meets first: the eldest, the one a split kept (the longer path).
    const head = parent.kid;
    if (head === undefined) parent.kid = child;
    else {
      child.next = head.next;
      head.next = child;
    }
    return;
  }
  if (parent.children === null) {
    // The list outgrew itself: file its children in a map.
    const map = (parent.children = new Map());
    let c = parent.kid;
    parent.kid = undefined;
    while (c !== undefined) {
      const after = c.next;
      c.next = map.get(c.key);
      map.set(c.key, c);
      c = after;
    }
  }
  const map = parent.children;
  child.next = map.get(child.key);
  map.set(child.key, child);
}

/** Makes `by` the head of the list or chain `old` heads (`by` begins with the same block). */
function setHead(parent: TrieNode, old: TrieNode, by: TrieNode | undefined): void {
  if (parent.children === null) parent.kid = by;
  else if (by === undefined) parent.children.delete(old.key);
  else parent.children.set(old.key, by);
}

/** Puts `by` where `old` is among `parent`'s children (both begin with the same block). */
export function replaceChild(parent: TrieNode, old: TrieNode, by: TrieNode): void {
  by.next = old.next;
  old.next = undefined;
  let c = firstCandidate(parent, old.key)!;
  if (c === old) {
    setHead(parent, old, by);
    return;
  }
  while (c.next !== old) c = c.next!;
  c.next = by;
}

export function dropChild(parent: TrieNode, child: TrieNode): void {
  parent.kids--;
  let c = firstCandidate(parent, child.key)!;
  if (c === child) {
    setHead(parent, child, child.next);
  } else {
    while (c.next !== child) c = c.next!;
    c.next = child.next;
  }
  child.next = undefined;
  if (parent.kids === 0) parent.children = null;
}
