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
 * matches, then books) resumes that walk, and a free climbs from the node its
 * prompt ends on (`removeAt`). Nothing is O(blocks): booking an
 * 8,192-token prompt costs the same as a short one.
 *
 * Nodes and the walk's primitives (children in a list or a map, edge
 * matching) are in `trie-node.ts`.
 *
 * Prompts are kept by reference: callers must not mutate a prompt's hash
 * array while it is in the trie.
 */
import { addChild, childAt, dropChild, edgeMatch, memberIndex, replaceChild, TrieNode } from './trie-node.js';

/** u32-pair view of a hash array (no copy). */
export function pairView(seq: BigUint64Array): Uint32Array {
  return new Uint32Array(seq.buffer, seq.byteOffset, seq.length * 2);
}

export class ActivePromptTrie {
  readonly #root = new TrieNode(0, 0, new BigUint64Array(0), new Uint32Array(0), null);
  /**
   * The last walk (`depthsInto`, `insert`, `remove`): the nodes below the root whose whole edge the prompt
   * `#walkSeq` matched, shallowest first, `#walkLen` of them; every change of the trie forgets it. The
   * router matches a prompt, then books it: `insert` resumes from this walk instead of repeating it.
   * Entries past `#walkLen` are older walks' nodes, all in the trie: `remove` empties the array.
   */
  readonly #walk: TrieNode[] = [];
  #walkLen = 0;
  #walkSeq: BigUint64Array | null = null;
  #walkSeq32: Uint32Array = new Uint32Array(0);
  #lastEnd: TrieNode = this.#root;
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
        child = new TrieNode(node.end, n, seq, seq32, node);
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
    this.#lastEnd = node;
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
   * requests (so `seq.length - result` blocks left the slot).
   */
  remove(seq: BigUint64Array, slot: number): number {
    const n = seq.length;
    const seq32 = pairView(seq);
    let node = this.#root;
    while (node.end !== n) node = childAt(node, seq32, node.end)!;
    return this.removeAt(node, slot);
  }

  /**
   * `remove` given the node the prompt ends on (`lastEnd` after its `insert`), without a walk from the
   * root: a node some prompt ends on is never split away from its end or merged while that prompt is in.
   */
  removeAt(end: TrieNode, slot: number): number {
    const walk = this.#walk;
    let len = 0;
    for (let x = end; x !== this.#root; x = x.parent!) walk[len++] = x;
    this.#walkLen = 0;
    this.#walkSeq = null;
    this.#root.total--;
    end.ends--;
    // Deepest first: the first node the slot stays on is the deepest, its end what the slot keeps.
    let kept = 0;
    for (let i = 0; i < len; i++) {
      const p = walk[i]!;
      p.total--;
      const m = p.members;
      const j = memberIndex(m, slot);
      const c = m[j + 1]! - 1;
      if (c > 0) {
        m[j + 1] = c;
        if (kept === 0) kept = p.end;
      } else {
        const last = m.length - 2;
        m[j] = m[last]!;
        m[j + 1] = m[last + 1]!;
        m.length = last;
        p.width--;
      }
    }
    // Drop the empty tail of the path, then re-compress the deepest survivor.
    let d = 0;
    while (d < len && walk[d]!.total === 0) {
      dropChild(walk[d]!.parent!, walk[d]!);
      d++;
    }
    this.#mergeIfUnary(d < len ? walk[d]! : this.#root);
    // Only a remove takes nodes out: forget every walk, so none keeps a dropped node (and its prompt) alive.
    walk.length = 0;
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
    let partial: TrieNode | null = null;
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
  #writeDepths(out: Float64Array, partial: TrieNode | null, k: number, len: number): void {
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
  #split(child: TrieNode, k: number): TrieNode {
    const parent = child.parent!;
    const upper = new TrieNode(child.start, k, child.rep, child.rep32, parent);
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
  #mergeIfUnary(node: TrieNode): void {
    if (node === this.#root || node.ends !== 0 || node.kids !== 1) return;
    const child = node.children !== null ? node.children.values().next().value! : node.kid!;
    replaceChild(node.parent!, node, child);
    child.setStart(node.start);
    child.parent = node.parent;
  }
}
