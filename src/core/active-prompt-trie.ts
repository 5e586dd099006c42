/**
 * The prompts of in-flight requests as a compressed trie (a radix tree over
 * chained block hashes), with per-slot request counts: Dynamo's per-worker
 * prompt-membership trie, shared by every slot.
 *
 * Chained sequence hashes make a prompt's blocks prefix-closed: two prompts
 * that agree on block i agree on every block before it. So an edge is a run
 * of blocks [start, end) that every prompt below it shares, stored as a
 * reference to one such prompt (`rep`), and comparing a prompt with an edge is
 * a binary search for the first differing block. A node's `slots`/`counts`
 * hold, per slot, the requests in its subtree: slot s holds blocks [0, end) of
 * a node iff s is among its `slots`.
 *
 *   root ─ h0 ─ [0, 4) {s1: 3, s2: 1}  ─ h4 ─ [4, 9)  {s1: 2}        (ends 2)
 *                                      └ h4' ─ [4, 6) {s1: 1, s2: 1}   (ends 2)
 *
 * Costs, with p = branch points on a prompt's path (small in practice):
 * `insert` and `remove` O(p × log blocks) plus an O(1) split or merge; the
 * per-slot depth query O(p × log blocks + slots on the path). Nothing is
 * O(blocks): booking an 8,192-token prompt costs the same as a short one.
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
  ) {}
  /** Children by `childKey` of their first block; children sharing one are chained through `next`. */
  children: Map<number, Node> | null = null;
  /** The next sibling with the same `childKey` (a chain of hash prefixes that collide; almost always none). */
  next: Node | undefined = undefined;
  /**
   * Slots with requests in this subtree, and how many (parallel arrays). Plain
   * SMI arrays: `indexOf` is a fast builtin and a split copies them with
   * `slice`, where a Map would cost a hash insert per slot.
   */
  slots: number[] = [];
  counts: number[] = [];
  /** Requests in this subtree. */
  total = 0;
  /** Requests whose prompt ends exactly at `end`. */
  ends = 0;
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
 * A child's key in its parent's map: 30 bits of the hash of its first block (block `at` of `h32`). A small
 * integer, so a lookup neither allocates a BigInt nor hashes one; the full 64 bits are compared in
 * `childAt`.
 */
function childKey(h32: Uint32Array, at: number): number {
  return h32[at << 1]! & 0x3fffffff;
}

/** The child of `node` whose first block is block `at` of the prompt `seq32`, if any. */
function childAt(node: Node, seq32: Uint32Array, at: number): Node | undefined {
  let c = node.children?.get(childKey(seq32, at));
  const lo = seq32[at << 1];
  const hi = seq32[(at << 1) + 1];
  while (c !== undefined) {
    const k = c.start << 1;
    if (c.rep32[k] === lo && c.rep32[k + 1] === hi) return c;
    c = c.next;
  }
  return undefined;
}

function addChild(parent: Node, child: Node): void {
  const map = (parent.children ??= new Map());
  const key = childKey(child.rep32, child.start);
  child.next = map.get(key);
  map.set(key, child);
}

/** Puts `by` where `old` is among `parent`'s children (both begin with the same block). */
function replaceChild(parent: Node, old: Node, by: Node): void {
  const map = parent.children!;
  const key = childKey(old.rep32, old.start);
  by.next = old.next;
  old.next = undefined;
  let c = map.get(key)!;
  if (c === old) {
    map.set(key, by);
    return;
  }
  while (c.next !== old) c = c.next!;
  c.next = by;
}

function dropChild(parent: Node, child: Node): void {
  const map = parent.children!;
  const key = childKey(child.rep32, child.start);
  let c = map.get(key)!;
  if (c === child) {
    if (child.next === undefined) map.delete(key);
    else map.set(key, child.next);
  } else {
    while (c.next !== child) c = c.next!;
    c.next = child.next;
  }
  child.next = undefined;
}

/** u32-pair view of a hash array (no copy). */
export function pairView(seq: BigUint64Array): Uint32Array {
  return new Uint32Array(seq.buffer, seq.byteOffset, seq.length * 2);
}

export class ActivePromptTrie {
  readonly #root = new Node(0, 0, new BigUint64Array(0), new Uint32Array(0), null);

  /**
   * Adds a request's prompt on `slot`. Returns how many of its leading blocks
   * the slot already held (so `seq.length - result` blocks are new there).
   */
  insert(seq: BigUint64Array, seq32: Uint32Array, slot: number): number {
    const n = seq.length;
    let node = this.#root;
    let held = 0;
    for (;;) {
      if (node !== this.#root) {
        const i = node.slots.indexOf(slot);
        if (i >= 0) {
          held = node.end;
          node.counts[i]!++;
        } else {
          node.slots.push(slot);
          node.counts.push(1);
        }
      }
      node.total++;
      if (node.end === n) {
        node.ends++;
        return held;
      }
      let child = childAt(node, seq32, node.end);
      if (child === undefined) {
        const leaf = new Node(node.end, n, seq, seq32, node);
        leaf.slots.push(slot);
        leaf.counts.push(1);
        leaf.total = 1;
        leaf.ends = 1;
        addChild(node, leaf);
        return held;
      }
      const limit = child.end < n ? child.end : n;
      const k = firstDifference(seq32, child.rep32, child.start + 1, limit);
      if (k < child.end) child = this.#split(child, k);
      node = child;
    }
  }

  /**
   * Removes a request's prompt from `slot` (it must have been inserted there).
   * Returns how many of its leading blocks the slot still holds through other
   * requests (so `seq.length - result` blocks left the slot).
   */
  remove(seq: BigUint64Array, slot: number): number {
    const n = seq.length;
    const seq32 = pairView(seq);
    const path: Node[] = [];
    let node = this.#root;
    for (;;) {
      path.push(node);
      if (node.end === n) break;
      node = childAt(node, seq32, node.end)!;
    }
    let kept = 0;
    for (const p of path) {
      p.total--;
      if (p === this.#root) continue;
      const i = p.slots.indexOf(slot);
      const c = p.counts[i]! - 1;
      if (c > 0) {
        p.counts[i] = c;
        kept = p.end;
      } else {
        const last = p.slots.length - 1;
        p.slots[i] = p.slots[last]!;
        p.counts[i] = p.counts[last]!;
        p.slots.pop();
        p.counts.pop();
      }
    }
    node.ends--;
    // Drop the empty tail of the path, then re-compress the deepest survivor.
    let i = path.length - 1;
    while (i > 0 && path[i]!.total === 0) {
      const dead = path[i]!;
      dropChild(dead.parent!, dead);
      i--;
    }
    this.#mergeIfUnary(path[i]!);
    return kept;
  }

  /** Blocks of the prompt held on `slot` by requests other than one of its own copies. */
  heldByOthers(seq: BigUint64Array, slot: number): number {
    const n = seq.length;
    const seq32 = pairView(seq);
    let node = this.#root;
    let held = 0;
    while (node.end !== n) {
      node = childAt(node, seq32, node.end)!;
      const i = node.slots.indexOf(slot);
      if (i >= 0 && node.counts[i]! > 1) held = node.end;
    }
    return held;
  }

  /**
   * For every slot holding a prefix of `seq`, writes the prefix length to
   * `out[slot]` (other entries untouched).
   */
  depthsInto(seq: BigUint64Array, out: Float64Array): void {
    const n = seq.length;
    if (n === 0 || this.#root.children === null) return;
    const seq32 = pairView(seq);
    let node = this.#root;
    while (node.end < n && node.children !== null) {
      const child = childAt(node, seq32, node.end);
      if (child === undefined) return;
      const limit = child.end < n ? child.end : n;
      const k = firstDifference(seq32, child.rep32, child.start + 1, limit);
      const slots = child.slots;
      for (let i = 0; i < slots.length; i++) out[slots[i]!] = k;
      if (k < child.end) return;
      node = child;
    }
  }

  /** Requests in the trie. */
  get size(): number {
    return this.#root.total;
  }

  /** Splits `child` at block `k` (start < k < end): returns the new upper node. */
  #split(child: Node, k: number): Node {
    const parent = child.parent!;
    const upper = new Node(child.start, k, child.rep, child.rep32, parent);
    upper.slots = child.slots.slice();
    upper.counts = child.counts.slice();
    upper.total = child.total;
    replaceChild(parent, child, upper);
    child.parent = upper;
    child.start = k;
    addChild(upper, child);
    return upper;
  }

  /** A non-root node with no request ending on it and one child is folded into the child. */
  #mergeIfUnary(node: Node): void {
    if (node === this.#root || node.ends !== 0 || node.children === null || node.children.size !== 1) return;
    const child = node.children.values().next().value!;
    if (child.next !== undefined) return;
    replaceChild(node.parent!, node, child);
    child.start = node.start;
    child.parent = node.parent;
  }
}
