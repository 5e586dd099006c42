/**
 * The prompts of in-flight requests as a compressed trie (a radix tree over
 * chained block hashes), with the slots holding each node: Dynamo's per-worker
 * prompt-membership trie, shared by every slot. The trie lives in the WASM
 * module (`assembly/prompt_trie.ts` for its layout, `trie_ops.ts` for the
 * operations); this is its host side, and each operation is one call.
 *
 * Chained sequence hashes make a prompt's blocks prefix-closed: two prompts
 * that agree on block i agree on every block before it. So an edge is a run
 * of blocks [start, end) that every prompt below it shares, kept as a
 * reference to one such prompt's copy in module memory (refcounted, freed
 * when no node refers to it), and comparing a prompt with an edge is one
 * comparison of the edge's last block or a binary search for the first
 * differing block. Slot s holds blocks [0, end) of a node iff a request of s
 * passes through it (the node's `holds` bit set); a slot holding a node
 * through two or more sources (its requests ending there, the node's children
 * it holds) also has a `multi` bit and a count in a (node, slot) table.
 *
 *   root ─ h0 ─ [0, 4) {s1×2, s2} ─ h4 ─ [4, 9)  {s1×2}     (ends: s1, s1)
 *                                 └ h4' ─ [4, 6) {s1, s2}   (ends: s1, s2)
 *
 * A booking adds a source at the node its prompt ends on and climbs only while
 * nodes newly hold the slot; a free climbs back while nodes lose their last
 * source. Nothing is O(blocks) but copying a prompt's hashes in: booking an
 * 8,192-token prompt walks as a short one does, one step per branch point.
 *
 * Why in WASM: the routing decision runs cold (one a millisecond between other
 * work), and most of a cold decision's time is fetching machine code; the
 * module's code for a whole operation is a few kilobytes, where the same trie
 * in JavaScript was dozens of separately compiled functions.
 *
 * Crossing: a prompt's hashes are copied into the trie's own query region,
 * unless it already holds them (the same array as the last call's, its last
 * hash unchanged: chained hashes that agree there agree everywhere). So
 * `insert` right after `depthsInto` of the same array (the router matches,
 * then books) copies nothing and resumes that walk. Depths come back as
 * (slot, depth) pairs the module wrote, copied into the caller's array.
 *
 * Memory: an insert allocates everything it may need before it changes
 * anything, so a failed allocation (an exhausted memory traps) leaves the trie
 * as it was and is thrown as a `KvgateError` (`KVG_ERR_WASM`, `detail.op`);
 * removing never allocates.
 */
import { KvgateError } from '../errors/index.js';
import { isWasmTrap, wasm, type WasmModule } from './instance.js';

/** A node of the trie: the handle `lastEnd` gives and `removeAt` takes, valid while its prompt is in. */
export type TrieNode = number;

// The trie's fields the host reads (assembly/prompt_trie.ts, class Trie), in u32 words from its address.
const Q = 0;
const Q_CAP = 1;
const OUT = 2;
const LAST_END = 3;
/** Slot ids must be below this (a bit set of slots costs 2^17 bytes a node at most). */
const MAX_SLOTS = 1 << 20;
/** What `trieRemove` answers for a prompt that is not in the trie. */
const NOT_IN = 0xffffffff;

const registry = new FinalizationRegistry<{ m: WasmModule; t: number }>(({ m, t }) => m.exports.trieFree(t));

export class ActivePromptTrie {
  readonly #m: WasmModule;
  /** The trie's address in module memory, and its fields' index in u32 words. */
  readonly #t: number;
  readonly #f: number;
  /** The array whose hashes the query region holds (null: none). */
  #q: BigUint64Array | null = null;

  constructor() {
    this.#m = wasm();
    try {
      this.#t = this.#m.exports.trieNew();
    } catch (err) {
      throw this.#failure('creation', err);
    }
    this.#f = this.#t >>> 2;
    registry.register(this, { m: this.#m, t: this.#t });
  }

  /**
   * Adds a request's prompt on `slot`. Returns how many of its leading blocks the slot already held (so
   * `seq.length - result` blocks are new there); its end node is `lastEnd` afterwards.
   * @throws KvgateError KVG_ERR_WASM when the module's memory is exhausted (nothing changed).
   */
  insert(seq: BigUint64Array, slot: number): number {
    if (!(Number.isInteger(slot) && slot >= 0 && slot < MAX_SLOTS))
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `trie slot must be an integer in [0, ${MAX_SLOTS}), got ${slot}`,
      );
    const n = this.#load(seq);
    try {
      return this.#m.exports.trieInsert(this.#t, n, slot);
    } catch (err) {
      throw this.#failure('insert', err);
    }
  }

  /**
   * Removes a request's prompt from `slot` (it must have been inserted there). Returns how many of its
   * leading blocks the slot still holds through other requests (so `seq.length - result` left the slot).
   */
  remove(seq: BigUint64Array, slot: number): number {
    const n = this.#load(seq);
    let kept: number;
    try {
      kept = this.#m.exports.trieRemove(this.#t, n, slot) >>> 0;
    } catch (err) {
      throw this.#failure('remove', err);
    }
    if (kept === NOT_IN) throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'the prompt removed is not in the trie');
    return kept;
  }

  /**
   * `remove` given the node the prompt ends on (`lastEnd` after its `insert`), without a walk from the
   * root: a node some prompt ends on is never split away from its end or merged while that prompt is in.
   */
  removeAt(end: TrieNode, slot: number): number {
    try {
      return this.#m.exports.trieRemoveAt(this.#t, end, slot);
    } catch (err) {
      throw this.#failure('remove', err);
    }
  }

  /** The node the last `insert` ended its prompt on: the handle `removeAt` takes. */
  get lastEnd(): TrieNode {
    return this.#m.views().u32[this.#f + LAST_END]!;
  }

  /** Blocks of the prompt (one in the trie) held on `slot` by requests other than one of its own copies. */
  heldByOthers(seq: BigUint64Array, slot: number): number {
    const n = this.#load(seq);
    try {
      return this.#m.exports.trieHeldByOthers(this.#t, n, slot);
    } catch (err) {
      throw this.#failure('lookup', err);
    }
  }

  /**
   * For every slot holding a prefix of `seq`, writes the prefix length to `out[slot]` (other entries
   * untouched). The walk is kept for an `insert` of the same prompt that follows with the trie unchanged.
   */
  depthsInto(seq: BigUint64Array, out: Float64Array): void {
    const n = this.#load(seq);
    let count: number;
    try {
      count = this.#m.exports.trieDepths(this.#t, n);
    } catch (err) {
      throw this.#failure('depth query', err);
    }
    this.scatterDepths(count, out);
  }

  /**
   * Puts `seq`'s hashes in the trie's query region (unless it holds them already) for a module call that
   * reads them there (`PrefixIndex.matchStage`); returns their count. The address is `address`'s query field.
   * @throws KvgateError KVG_ERR_WASM when the module's memory is exhausted.
   */
  hold(seq: BigUint64Array): number {
    return this.#load(seq);
  }

  /** The trie's address in module memory (what the module's trie calls take). */
  get address(): number {
    return this.#t;
  }

  /** Writes the `count` (slot, depth) pairs the module's last depth query left to `out[slot]` (as `depthsInto`). */
  scatterDepths(count: number, out: Float64Array): void {
    if (count === 0) return;
    const u32 = this.#m.views().u32;
    for (let o = u32[this.#f + OUT]! >>> 2, end = o + 2 * count; o < end; o += 2) out[u32[o]!] = u32[o + 1]!;
  }

  /** Requests in the trie. */
  get size(): number {
    return this.#m.exports.trieSize(this.#t);
  }

  /** Nodes in use, the root included (what the trie's memory grows with). */
  get nodeCount(): number {
    return this.#m.exports.trieNodeCount(this.#t);
  }

  /** Puts `seq`'s hashes in the query region, unless it holds them already. Returns their count. */
  #load(seq: BigUint64Array): number {
    const n = seq.length;
    let v = this.#m.views();
    if (n > v.u32[this.#f + Q_CAP]!) {
      this.#q = null;
      try {
        this.#m.exports.trieQuery(this.#t, n);
      } catch (err) {
        throw this.#failure('query', err);
      }
      v = this.#m.views();
    }
    const at = v.u32[this.#f + Q]! >>> 3;
    if (seq !== this.#q || (n > 0 && v.u64[at + n - 1] !== seq[n - 1])) {
      v.u64.set(seq, at);
      this.#q = seq;
    }
    return n;
  }

  /** A trap of the module as the typed error it stands for (anything else as it is). */
  #failure(op: string, err: unknown): unknown {
    if (!isWasmTrap(err)) return err;
    this.#q = null;
    return new KvgateError(
      'KVG_ERR_WASM',
      `kvgate.wasm could not allocate memory for the in-flight prompt trie's ${op}: nothing was changed`,
      { op },
      { cause: err },
    );
  }
}
