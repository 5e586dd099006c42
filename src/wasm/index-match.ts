/**
 * A prefix index's matches: the module calls and the reading of their answers, for `PrefixIndex`
 * (which guards them: a trap discards the index). Two forms:
 * - `matchHashes`: the request's hashes copied in, (slot, depth) pairs copied out (`findMatches`);
 * - `matchStage`: a routing decision's whole match stage in one call. The prompt's sequence hashes are
 *   put once in the in-flight trie's query region, the module matches the index and queries the trie's
 *   depths from there, and both answers are scattered straight into the scheduler's per-slot arrays.
 *   It replaces a match and a `depthsInto` (two copies of the hashes in, two calls, the answers' views)
 *   on the path every decision runs cold.
 */
import type { ActivePromptTrie } from './active-prompt-trie.js';
import type { WasmModule } from './instance.js';

/** The overlap of one request with every slot that holds its first block. */
export interface OverlapScores {
  /** Number of slots with a non-zero depth. */
  readonly count: number;
  /** Slot ids (see `PrefixIndex.slotOf`), `count` valid entries. */
  readonly slots: Uint32Array;
  /** Leading blocks held, parallel to `slots`. */
  readonly depths: Uint32Array;
}

/**
 * Matches `hashes` (sequence hashes with `bySequence`, else local ones) on index `ix` of a module whose
 * slot ids are below `slotCap`. The arrays are the caller's.
 */
export function matchHashes(
  m: WasmModule,
  ix: number,
  slotCap: number,
  hashes: BigUint64Array,
  bySequence: boolean,
): OverlapScores {
  const n = hashes.length;
  const io = m.reserve(n * 8 + slotCap * 8 + 16);
  const v = m.views();
  v.u64.set(hashes, io >>> 3);
  const outSlots = io + n * 8;
  const outDepths = outSlots + slotCap * 4;
  const count = m.exports.idxFindMatches(ix, io, n, bySequence ? 0 : 1, outSlots, outDepths);
  // The call may grow WASM memory (chaining scratch), detaching `v`: read the results through fresh views.
  const out = m.views().u32;
  // One copy out for both columns: the depths are moved up to just after the slots first (a memmove
  // inside WASM memory), so a match allocates one buffer, not two.
  const at = outSlots >>> 2;
  out.copyWithin(at + count, outDepths >>> 2, (outDepths >>> 2) + count);
  const both = out.slice(at, at + 2 * count);
  return { count, slots: both.subarray(0, count), depths: both.subarray(count) };
}

/**
 * The match stage on index `ix` (0: none, matches nothing) and `trie`, whose query region holds the
 * prompt's `n` sequence hashes (`trie.hold`): `dev[slot]` gets the index's depth for every slot below
 * `dev.length` that holds the prompt's first block, `depth[slot]` the trie's for every slot with the
 * prompt's prefix in flight. Other entries are left as they are. The trie keeps the walk for an insert.
 */
export function matchStage(
  m: WasmModule,
  ix: number,
  slotCap: number,
  trie: ActivePromptTrie,
  n: number,
  dev: Float64Array,
  depth: Float64Array,
): void {
  const io = m.reserve(slotCap * 8 + 8);
  const outSlots = io + 8;
  const outDepths = outSlots + slotCap * 4;
  const count = m.exports.matchStage(ix, trie.address, n, outSlots, outDepths, io);
  const u32 = m.views().u32;
  const cap = dev.length;
  for (let i = outSlots >>> 2, d = outDepths >>> 2, end = i + count; i < end; i++, d++) {
    const s = u32[i]!;
    if (s < cap) dev[s] = u32[d]!;
  }
  trie.scatterDepths(u32[io >>> 2]!, depth);
}
