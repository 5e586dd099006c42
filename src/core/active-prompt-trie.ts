/**
 * The prompts of in-flight requests as a compressed trie (a radix tree over
 * chained block hashes), with the slots holding each node: Dynamo's per-worker
 * prompt-membership trie, shared by every slot.
 *
 * Chained sequence hashes make a prompt's blocks prefix-closed: two prompts
 * that agree on block i agree on every block before it. So an edge is a run
 * of blocks [start, end) that every prompt below it shares, stored as a
 * reference to one such prompt (`rep`), and comparing a prompt with an edge is
 * a binary search for the first differing block. Slot s holds blocks [0, end)
 * of a node iff a request of s passes through it; the node keeps the slots
 * holding it as a bit set (`holds`). A slot's sources at a node are its
 * requests ending there and the node's children it holds: a node held through
 * one source has only the bit, through two or more also a `multi` bit and the
 * count in a (node, slot) table (`pair-counts.ts`).
 *
 *   root ─ h0 ─ [0, 4) {s1×2, s2} ─ h4 ─ [4, 9)  {s1×2}     (ends: s1, s1)
 *                                 └ h4' ─ [4, 6) {s1, s2}   (ends: s1, s2)
 *
 * A booking adds a source at the node its prompt ends on and climbs only while
 * nodes newly hold the slot, counting one source more at the first that held it
 * (whose end is what the slot held before); a free climbs back while nodes lose
 * their last source. So a booking writes the slot's bit where it is new and one
 * count, never a per-slot count on every node of its path (with the CPU caches
 * cold, each a cache line), and the blocks another request of the slot holds
 * end at the deepest node of the path with a `multi` bit.
 *
 * Costs, with p = branch points on a prompt's path (a hundred when many
 * prompts leave one long document at different points): a walk is one child
 * lookup and one comparison per node (a whole edge matches iff its last block
 * does), plus a binary search in the edge the prompt leaves. `insert` and
 * `remove` add a request count per node, the slot's bit where it comes or goes,
 * one table count and an O(1) split or merge; the per-slot depth query writes
 * each slot once, deepest node first, reading a node's bit set only where the
 * set grows (slot sets only grow towards the root). An `insert` right after
 * `depthsInto` of the same array (the router matches, then books) resumes that
 * walk, and a free climbs from the node its prompt ends on (`removeAt`).
 * Nothing is O(blocks): booking an 8,192-token prompt costs the same as a short
 * one.
 *
 * Nodes and the walk's primitives (children in a list or a map, edge
 * matching) are in `trie-node.ts`: nodes are numbers, records packed in one
 * typed array, so a walk with the CPU caches cold loads one cache line per
 * branch point rather than objects scattered over the heap.
 *
 * Prompts are kept by reference: callers must not mutate a prompt's hash
 * array while it is in the trie.
 */
import { PairCounts } from './pair-counts.js';
import { ROOT, TrieNodes, type TrieNode } from './trie-node.js';

/** u32-pair view of a hash array (no copy). */
export function pairView(seq: BigUint64Array): Uint32Array {
  return new Uint32Array(seq.buffer, seq.byteOffset, seq.length * 2);
}

export class ActivePromptTrie {
  readonly #nodes = new TrieNodes();
  /**
   * The last walk (`depthsInto`, `insert`, `remove`): the nodes below the root whose whole edge the prompt
   * `#walkSeq` matched, shallowest first, `#walkLen` of them; every change of the trie forgets it. The
   * router matches a prompt, then books it: `insert` resumes from this walk instead of repeating it.
   */
  readonly #walk: TrieNode[] = [];
  #walkLen = 0;
  #walkSeq: BigUint64Array | null = null;
  #walkSeq32: Uint32Array = new Uint32Array(0);
  #lastEnd: TrieNode = ROOT;
  /** The slots `depthsInto` has written (a bit set of `words` u32): each slot is written once a call. */
  #seen = new Uint32Array(1);
  /** Per (node, slot) holding it through two or more sources, how many (one source is the `holds` bit alone). */
  readonly #counts = new PairCounts();

  /**
   * Adds a request's prompt on `slot` (`seq32`: its `pairView`). Returns how many of its leading blocks
   * the slot already held (so `seq.length - result` blocks are new there).
   */
  insert(seq: BigUint64Array, seq32: Uint32Array, slot: number): number {
    const t = this.#nodes;
    t.ensureSlots(slot + 1);
    const n = seq.length;
    const walk = this.#walk;
    let len = this.#cachedWalk(seq, seq32);
    let node = len > 0 ? walk[len - 1]! : ROOT;
    while (t.end(node) !== n) {
      const at = t.end(node);
      let child = t.childAt(node, seq32, at);
      if (child === 0) {
        child = t.alloc(at, n, seq32, node);
        t.addChild(node, child);
      } else {
        const k = t.edgeMatch(seq32, n, child);
        if (k < t.end(child)) child = this.#split(child, k);
      }
      walk[len++] = child;
      node = child;
    }
    this.#walkLen = 0;
    this.#walkSeq = null;
    t.addTotal(ROOT, 1);
    for (let i = 0; i < len; i++) t.addTotal(walk[i]!, 1);
    t.addEnds(node, 1);
    this.#lastEnd = node;
    return this.#addSource(node, slot);
  }

  /**
   * One more source of `slot` at `node` (a request ending there, or a child that came to hold it): climbs
   * while nodes newly hold the slot, and counts one more source at the first that held it already. Returns
   * that node's end (0: none held it), the blocks the slot held before.
   */
  #addSource(node: TrieNode, slot: number): number {
    const t = this.#nodes;
    let x = node;
    while (!t.holds(x, slot)) {
      t.setHolds(x, slot, true);
      t.addWidth(x, 1);
      if (x === ROOT) return 0;
      x = t.parent(x);
    }
    if (t.multi(x, slot)) this.#counts.set(x, slot, this.#counts.get(x, slot) + 1);
    else {
      t.setMulti(x, slot, true);
      this.#counts.set(x, slot, 2);
    }
    return t.end(x);
  }

  /**
   * One source of `slot` less at `node`: climbs while nodes lose the slot. Returns the end of the first
   * node that keeps it (0: none), the blocks the slot still holds.
   */
  #dropSource(node: TrieNode, slot: number): number {
    const t = this.#nodes;
    let x = node;
    while (!t.multi(x, slot)) {
      t.setHolds(x, slot, false);
      t.addWidth(x, -1);
      if (x === ROOT) return 0;
      x = t.parent(x);
    }
    const c = this.#counts.get(x, slot) - 1;
    if (c === 1) t.setMulti(x, slot, false);
    this.#counts.set(x, slot, c === 1 ? 0 : c);
    return t.end(x);
  }

  /**
   * Removes a request's prompt from `slot` (it must have been inserted there).
   * Returns how many of its leading blocks the slot still holds through other
   * requests (so `seq.length - result` blocks left the slot).
   */
  remove(seq: BigUint64Array, slot: number): number {
    const t = this.#nodes;
    const n = seq.length;
    const seq32 = pairView(seq);
    let node = ROOT;
    while (t.end(node) !== n) node = t.childAt(node, seq32, t.end(node));
    return this.removeAt(node, slot);
  }

  /**
   * `remove` given the node the prompt ends on (`lastEnd` after its `insert`), without a walk from the
   * root: a node some prompt ends on is never split away from its end or merged while that prompt is in.
   */
  removeAt(end: TrieNode, slot: number): number {
    const t = this.#nodes;
    const walk = this.#walk;
    let len = 0;
    for (let x = end; x !== ROOT; x = t.parent(x)) walk[len++] = x;
    this.#walkLen = 0;
    this.#walkSeq = null;
    t.addTotal(ROOT, -1);
    for (let i = 0; i < len; i++) t.addTotal(walk[i]!, -1);
    t.addEnds(end, -1);
    const kept = this.#dropSource(end, slot);
    // Drop the empty tail of the path (deepest first: each childless by then), then re-compress the deepest survivor.
    let d = 0;
    while (d < len && t.total(walk[d]!) === 0) {
      const p = walk[d]!;
      t.dropChild(t.parent(p), p);
      t.release(p);
      d++;
    }
    this.#mergeIfUnary(d < len ? walk[d]! : ROOT);
    return kept;
  }

  /** The node the last `insert` ended its prompt on: the handle `removeAt` takes. */
  get lastEnd(): TrieNode {
    return this.#lastEnd;
  }

  /** `pairView(seq)`: the one the last `depthsInto` made when it was of this array. */
  pairsOf(seq: BigUint64Array): Uint32Array {
    return seq === this.#walkSeq ? this.#walkSeq32 : pairView(seq);
  }

  /** Blocks of the prompt held on `slot` by requests other than one of its own copies. */
  heldByOthers(seq: BigUint64Array, slot: number): number {
    const t = this.#nodes;
    // A slot beyond the bit sets has never booked a prompt here.
    if (slot >= 32 * t.words) return 0;
    const n = seq.length;
    const seq32 = pairView(seq);
    let node = ROOT;
    let held = 0;
    // The deepest node of its path that another request of the slot passes through: one with two sources.
    while (t.end(node) !== n) {
      node = t.childAt(node, seq32, t.end(node));
      if (t.multi(node, slot)) held = t.end(node);
    }
    return held;
  }

  /**
   * For every slot holding a prefix of `seq`, writes the prefix length to
   * `out[slot]` (other entries untouched). The walk is kept for an `insert`
   * of the same array that follows with the trie unchanged.
   */
  depthsInto(seq: BigUint64Array, out: Float64Array): void {
    const t = this.#nodes;
    const n = seq.length;
    this.#walkLen = 0;
    this.#walkSeq = null;
    if (n === 0 || t.kids(ROOT) === 0) return;
    const seq32 = pairView(seq);
    const walk = this.#walk;
    let len = 0;
    let node = ROOT;
    // The node the prompt leaves inside its edge (at block `k`), if any (0: none).
    let partial: TrieNode = 0;
    let k = 0;
    let at = 0;
    while (at < n && t.kids(node) > 0) {
      const child = t.childAt(node, seq32, at);
      if (child === 0) break;
      k = t.edgeMatch(seq32, n, child);
      if (k < t.end(child)) {
        partial = child;
        break;
      }
      walk[len++] = child;
      node = child;
      at = k;
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
  #writeDepths(out: Float64Array, partial: TrieNode, k: number, len: number): void {
    const t = this.#nodes;
    let seen = this.#seen;
    if (seen.length < t.words) seen = this.#seen = new Uint32Array(t.words);
    else seen.fill(0);
    let below = 0;
    for (let i = len; i >= 0; i--) {
      const p = i === len ? partial : this.#walk[i]!;
      if (p === 0) continue;
      const width = t.width(p);
      if (width === below) continue;
      below = width;
      t.writeNew(p, seen, i === len ? k : t.end(p), out);
    }
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
    if (this.#nodes.end(last) > seq.length || !this.#nodes.holdsLast(last, seq32)) return 0;
    return len;
  }

  /** Requests in the trie. */
  get size(): number {
    return this.#nodes.total(ROOT);
  }

  /** Splits `child` at block `k` (start < k < end): returns the new upper node. */
  #split(child: TrieNode, k: number): TrieNode {
    const t = this.#nodes;
    const parent = t.parent(child);
    const upper = t.alloc(t.start(child), k, t.rep(child), parent);
    // Its one source of every slot is `child`: it holds what the child holds, once.
    t.copyHolds(child, upper);
    t.addWidth(upper, t.width(child));
    t.addTotal(upper, t.total(child));
    t.replaceChild(parent, child, upper);
    t.setParent(child, upper);
    t.setStart(child, k);
    t.addChild(upper, child);
    return upper;
  }

  /** A non-root node with no request ending on it and one child is folded into the child. */
  #mergeIfUnary(node: TrieNode): void {
    const t = this.#nodes;
    if (node === ROOT || t.ends(node) !== 0 || t.kids(node) !== 1) return;
    const child = t.onlyChild(node);
    const parent = t.parent(node);
    t.replaceChild(parent, node, child);
    t.setStart(child, t.start(node));
    t.setParent(child, parent);
    t.release(node);
  }

  /** Nodes in use, the root included (what the trie's memory grows with). */
  get nodeCount(): number {
    return this.#nodes.live;
  }
}
