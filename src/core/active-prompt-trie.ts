/**
 * The prompts of in-flight requests as a compressed trie (a radix tree over
 * chained block hashes), with per-slot request counts: Dynamo's per-worker
 * prompt-membership trie, shared by every slot.
 *
 * Chained sequence hashes make a prompt's blocks prefix-closed: two prompts
 * that agree on block i agree on every block before it. So an edge is a run
 * of blocks [start, end) that every prompt below it shares, stored as a
 * reference to one such prompt (`rep`), and comparing a prompt with an edge is
 * a binary search for the first differing block. A node's `members` hold, per
 * slot, the requests in its subtree: slot s holds blocks [0, end) of a node iff
 * s is among its `members`.
 *
 *   root ─ h0 ─ [0, 4) {s1: 3, s2: 1}  ─ h4 ─ [4, 9)  {s1: 2}        (ends 2)
 *                                      └ h4' ─ [4, 6) {s1: 1, s2: 1}   (ends 2)
 *
 * Costs, with p = branch points on a prompt's path (a hundred when many
 * prompts leave one long document at different points): a walk is one child
 * lookup and one comparison per node (a whole edge matches iff its last block
 * does), plus a binary search in the edge the prompt leaves. `insert` and
 * `remove` add one slot lookup per node and an O(1) split or merge; the
 * per-slot depth query writes each slot once, deepest node first, reading a
 * node's slots only where the set grows (slot sets only grow towards the
 * root). An `insert` right after `depthsInto` of the same array (the router
 * matches, then books) resumes that walk. Nothing is O(blocks): booking an
 * 8,192-token prompt costs the same as a short one.
 *
 * Children are filed under 30 bits of their first block's hash (a small
 * integer: a lookup neither allocates a BigInt nor hashes one, which was
 * most of a walk's time), the full 64 bits compared on the way; siblings
 * that share those bits are chained.
 *
 * Prompts are kept by reference: callers must not mutate a prompt's hash
 * array while it is in the trie.
 */

class Node {
  constructor(
    /** First block of the edge (the block its parent files it under). */
    public start: number,
    /** One past the last block of the edge: a request through this node holds blocks [0, end). */
    public end: number,
    /** A prompt whose blocks [0, end) are this node's path, as u64 hashes and as u32 pairs. */
    public rep: BigUint64Array,
    public rep32: Uint32Array,
    public parent: Node | null,
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
  kid: Node | undefined = undefined;
  /** Beyond `LIST_MAX`: children by `key`, those sharing one chained through `next`; `kid` is then unused. */
  children: Map<number, Node> | null = null;
  /** The next sibling: in the parent's list, or with the same `key` in its map (almost always none). */
  next: Node | undefined = undefined;

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
function holdsLast(node: Node, seq32: Uint32Array, at: number): boolean {
  const lo = seq32[at << 1]!;
  const hi = seq32[(at << 1) + 1]!;
  return (lo & SMI_BITS) === node.lastA && (hi & SMI_BITS) === node.lastB && topBits(lo, hi) === node.lastC;
}

/** Where in `members` the slot's pair starts, or -1 (a loop: on a node's few slots it beats a builtin's call). */
function memberIndex(members: number[], slot: number): number {
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
function edgeMatch(seq32: Uint32Array, n: number, child: Node): number {
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
function firstCandidate(node: Node, key: number): Node | undefined {
  return node.children !== null ? node.children.get(key) : node.kid;
}

/**
 * The child of `node` whose first block is block `at` of the prompt `seq32`, if any. A candidate whose last
 * block the prompt also holds is that child (chained hashes), found without loading its `rep32`.
 */
function childAt(node: Node, seq32: Uint32Array, at: number): Node | undefined {
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

function addChild(parent: Node, child: Node): void {
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
function setHead(parent: Node, old: Node, by: Node | undefined): void {
  if (parent.children === null) parent.kid = by;
  else if (by === undefined) parent.children.delete(old.key);
  else parent.children.set(old.key, by);
}

/** Puts `by` where `old` is among `parent`'s children (both begin with the same block). */
function replaceChild(parent: Node, old: Node, by: Node): void {
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

function dropChild(parent: Node, child: Node): void {
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

/** u32-pair view of a hash array (no copy). */
export function pairView(seq: BigUint64Array): Uint32Array {
  return new Uint32Array(seq.buffer, seq.byteOffset, seq.length * 2);
}

export class ActivePromptTrie {
  readonly #root = new Node(0, 0, new BigUint64Array(0), new Uint32Array(0), null);
  /**
   * The last walk (`depthsInto`, `insert`, `remove`): the nodes below the root whose whole edge the prompt
   * `#walkSeq` matched, shallowest first, `#walkLen` of them; every change of the trie forgets it. The
   * router matches a prompt, then books it: `insert` resumes from this walk instead of repeating it.
   */
  readonly #walk: Node[] = [];
  #walkLen = 0;
  #walkSeq: BigUint64Array | null = null;
  #walkSeq32: Uint32Array = new Uint32Array(0);
  /** Per slot, the epoch of the `depthsInto` call that last wrote it (each slot is written once a call). */
  #stamp: Int32Array = new Int32Array(64);
  #epoch = 0;

  /**
   * Adds a request's prompt on `slot` (`seq32`: its `pairView`). Returns how many of its leading blocks
   * the slot already held (so `seq.length - result` blocks are new there).
   */
  insert(seq: BigUint64Array, seq32: Uint32Array, slot: number): number {
    const n = seq.length;
    const walk = this.#walk;
    let len = this.#cachedWalk(seq, seq32);
    let node = len > 0 ? walk[len - 1]! : this.#root;
    while (node.end !== n) {
      let child = childAt(node, seq32, node.end);
      if (child === undefined) {
        child = new Node(node.end, n, seq, seq32, node);
        addChild(node, child);
      } else {
        const k = edgeMatch(seq32, n, child);
        if (k < child.end) child = this.#split(child, k);
      }
      walk[len++] = child;
      node = child;
    }
    this.#walkLen = 0;
    this.#walkSeq = null;
    this.#root.total++;
    node.ends++;
    // A slot's nodes on a path are a prefix of it (a request through a node passes through its parent):
    // once the slot is missing from one, it is missing from every deeper one.
    let held = 0;
    let missing = false;
    for (let i = 0; i < len; i++) {
      const p = walk[i]!;
      p.total++;
      if (!missing) {
        const j = memberIndex(p.members, slot);
        if (j >= 0) {
          held = p.end;
          p.members[j + 1]!++;
          continue;
        }
        missing = true;
      }
      p.members.push(slot, 1);
      p.width++;
    }
    return held;
  }

  /**
   * Removes a request's prompt from `slot` (it must have been inserted there).
   * Returns how many of its leading blocks the slot still holds through other
   * requests (so `seq.length - result` blocks left the slot). `seq32`: its `pairView`, if the caller kept one.
   */
  remove(seq: BigUint64Array, slot: number, seq32: Uint32Array = pairView(seq)): number {
    const n = seq.length;
    const walk = this.#walk;
    let len = 0;
    let node = this.#root;
    while (node.end !== n) {
      node = childAt(node, seq32, node.end)!;
      walk[len++] = node;
    }
    this.#walkLen = 0;
    this.#walkSeq = null;
    this.#root.total--;
    node.ends--;
    let kept = 0;
    for (let i = 0; i < len; i++) {
      const p = walk[i]!;
      p.total--;
      const m = p.members;
      const j = memberIndex(m, slot);
      const c = m[j + 1]! - 1;
      if (c > 0) {
        m[j + 1] = c;
        kept = p.end;
      } else {
        const last = m.length - 2;
        m[j] = m[last]!;
        m[j + 1] = m[last + 1]!;
        m.length = last;
        p.width--;
      }
    }
    // Drop the empty tail of the path, then re-compress the deepest survivor.
    while (len > 0 && walk[len - 1]!.total === 0) {
      const dead = walk[--len]!;
      dropChild(dead.parent!, dead);
    }
    this.#mergeIfUnary(len > 0 ? walk[len - 1]! : this.#root);
    return kept;
  }

  /** `pairView(seq)`: the one the last `depthsInto` made when it was of this array. */
  pairsOf(seq: BigUint64Array): Uint32Array {
    return seq === this.#walkSeq ? this.#walkSeq32 : pairView(seq);
  }

  /** Blocks of the prompt held on `slot` by requests other than one of its own copies. */
  heldByOthers(seq: BigUint64Array, slot: number): number {
    const n = seq.length;
    const seq32 = pairView(seq);
    let node = this.#root;
    let held = 0;
    while (node.end !== n) {
      node = childAt(node, seq32, node.end)!;
      const i = memberIndex(node.members, slot);
      if (i >= 0 && node.members[i + 1]! > 1) held = node.end;
    }
    return held;
  }

  /**
   * For every slot holding a prefix of `seq`, writes the prefix length to
   * `out[slot]` (other entries untouched). The walk is kept for an `insert`
   * of the same array that follows with the trie unchanged.
   */
  depthsInto(seq: BigUint64Array, out: Float64Array): void {
    const n = seq.length;
    this.#walkLen = 0;
    this.#walkSeq = null;
    if (n === 0 || this.#root.kids === 0) return;
    const seq32 = pairView(seq);
    const walk = this.#walk;
    let len = 0;
    let node = this.#root;
    // The node the prompt leaves inside its edge (at block `k`), if any.
    let partial: Node | null = null;
    let k = 0;
    while (node.end < n && node.kids > 0) {
      const child = childAt(node, seq32, node.end);
      if (child === undefined) break;
      k = edgeMatch(seq32, n, child);
      if (k < child.end) {
        partial = child;
        break;
      }
      walk[len++] = child;
      node = child;
    }
    this.#walkLen = len;
    this.#walkSeq = seq;
    this.#walkSeq32 = seq32;
    this.#writeDepths(out, partial, k, len);
  }

  /**
   * Writes each slot's depth once, deepest node first: a slot's depth is the end of the deepest node on the
   * walk holding it (`k` inside `partial`). Slot sets only grow towards the root, so a node with as many
   * slots as the one below it holds the same ones and is skipped.
   */
  #writeDepths(out: Float64Array, partial: Node | null, k: number, len: number): void {
    const epoch = this.#nextEpoch();
    let stamp = this.#stamp;
    let below = 0;
    for (let i = len; i >= 0; i--) {
      const p = i === len ? partial : this.#walk[i]!;
      if (p === null) continue;
      if (p.width === below) continue;
      below = p.width;
      const m = p.members;
      const depth = i === len ? k : p.end;
      for (let j = 0; j < m.length; j += 2) {
        const s = m[j]!;
        if (s >= stamp.length) stamp = this.#growStamp(s);
        if (stamp[s] === epoch) continue;
        stamp[s] = epoch;
        out[s] = depth;
      }
    }
  }

  #nextEpoch(): number {
    if (this.#epoch === 0x7fffffff) {
      this.#stamp.fill(0);
      this.#epoch = 0;
    }
    return ++this.#epoch;
  }

  #growStamp(slot: number): Int32Array {
    const grown = new Int32Array(Math.max(slot + 1, this.#stamp.length * 2));
    grown.set(this.#stamp);
    return (this.#stamp = grown);
  }

  /**
   * How many nodes of the last walk `insert` can start from: all of them when it was a walk of this very
   * prompt with the trie unchanged since, else none. The hashes are checked at the walk's deepest block
   * too: chained hashes agreeing there agree on every block before it.
   */
  #cachedWalk(seq: BigUint64Array, seq32: Uint32Array): number {
    const len = this.#walkLen;
    if (this.#walkSeq !== seq || len === 0) return 0;
    const last = this.#walk[len - 1]!;
    const b = (last.end - 1) << 1;
    if (last.end > seq.length || seq32[b] !== last.rep32[b] || seq32[b + 1] !== last.rep32[b + 1]) return 0;
    return len;
  }

  /** Requests in the trie. */
  get size(): number {
    return this.#root.total;
  }

  /** Splits `child` at block `k` (start < k < end): returns the new upper node. */
  #split(child: Node, k: number): Node {
    const parent = child.parent!;
    const upper = new Node(child.start, k, child.rep, child.rep32, parent);
    upper.members = child.members.slice();
    upper.width = child.width;
    upper.total = child.total;
    replaceChild(parent, child, upper);
    child.parent = upper;
    child.setStart(k);
    addChild(upper, child);
    return upper;
  }

  /** A non-root node with no request ending on it and one child is folded into the child. */
  #mergeIfUnary(node: Node): void {
    if (node === this.#root || node.ends !== 0 || node.kids !== 1) return;
    const child = node.children !== null ? node.children.values().next().value! : node.kid!;
    replaceChild(node.parent!, node, child);
    child.setStart(node.start);
    child.parent = node.parent;
  }
}
