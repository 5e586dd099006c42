// kvgate.wasm: the module's whole export surface. Only numbers and linear-memory
// offsets cross the boundary; 64-bit inputs are read from memory or split into
// u32 halves so the hot path creates no BigInt. See docs/architecture.md.
import { xxh3 } from './xxh3';
import { hashBlocks, chainHashes } from './hashing';
import { hashPromptSimd } from './hash_simd';
import {
  Index, indexNew, indexFree, ensureSlot, applyStored, applyRemoved, clearSlot,
  findMatches, indexBytes, exportSlot, importSlot, slotBlocks, evictTo, holdsBlocks, STORE_OK,
} from './prefix_index';
import { failAllocation } from './block_records';
import { Trie, trieNew as newTrie, trieFree as freeTrie, trieQuery as queryRegion, ROOT, TOTAL } from './prompt_trie';
import {
  trieDepths as depths, trieInsert as insert, trieRemoveAt as removeAt, trieRemove as remove,
  trieHeldByOthers as heldByOthers,
} from './trie_ops';
export { readIdArray, idArrayEnd } from './json_ids';

/** Bumped whenever an export's contract changes; the host checks it at load. */
export const ABI_VERSION: u32 = 10;

// One growable I/O region the host lays its per-call inputs and outputs into.
let io: usize = 0;
let ioCap: usize = 0;

/** Returns an I/O region of at least `bytes` bytes (its address may change between calls). */
export function ioReserve(bytes: usize): usize {
  if (bytes > ioCap) {
    // Forgotten before the allocation: one that fails must leave no freed region to hand out again.
    if (io != 0) heap.free(io);
    io = 0;
    ioCap = 0;
    const cap = max<usize>(bytes, 65536);
    io = heap.alloc(cap);
    ioCap = cap;
  }
  return io;
}

// @ts-ignore: decorator
@inline function seed64(lo: u32, hi: u32): u64 { return (<u64>hi << 32) | <u64>lo; }

export function xxh3_64(ptr: usize, len: usize, seedLo: u32, seedHi: u32): u64 {
  return xxh3(ptr, len, seed64(seedLo, seedHi));
}

/**
 * Hashes a prompt: local block hashes to `outLocal`, and when `outSeq != 0`
 * their chained sequence hashes to `outSeq`. Returns the block count.
 * flags bit 0: eagle windows (block + next token).
 */
export function hashPrompt(
  tokens: usize, nTokens: u32, blockSize: u32, flags: u32, seedLo: u32, seedHi: u32,
  mmOffsets: usize, mmValues: usize, outLocal: usize, outSeq: usize,
): u32 {
  const eagle = (flags & 1) != 0;
  if (mmOffsets == 0) {
    const fast = hashPromptSimd(tokens, nTokens, blockSize, eagle, seed64(seedLo, seedHi), outLocal, outSeq);
    if (fast >= 0) return <u32>fast;
  }
  const n = hashBlocks(tokens, nTokens, blockSize, eagle, seed64(seedLo, seedHi), mmOffsets, mmValues, outLocal);
  if (outSeq != 0) chainHashes(outLocal, n, outSeq);
  return n;
}

export function chainSequence(local: usize, n: u32, outSeq: usize): void {
  chainHashes(local, n, outSeq);
}

export function idxNew(): usize { return changetype<usize>(indexNew()); }
export function idxFree(ix: usize): void { indexFree(changetype<Index>(ix)); }
export function idxEnsureSlot(ix: usize, slot: u32): void { ensureSlot(changetype<Index>(ix), slot); }

/** `parentPtr` points at the parent's engine hash (u64), or is 0 for root. Returns a STORE_* status. */
export function idxStored(ix: usize, slot: u32, parentPtr: usize, n: u32, engHashes: usize, localHashes: usize): i32 {
  const hasParent = parentPtr != 0;
  return applyStored(changetype<Index>(ix), slot, hasParent, hasParent ? load<u64>(parentPtr) : 0, n, engHashes, localHashes);
}

export function idxRemoved(ix: usize, slot: u32, n: u32, engHashes: usize): u32 {
  return applyRemoved(changetype<Index>(ix), slot, n, engHashes);
}

export function idxClearSlot(ix: usize, slot: u32): u32 { return clearSlot(changetype<Index>(ix), slot); }

/** Which of `n` engine hashes (u64) the slot holds: a byte per hash to `out` (1 held, 0 not); returns how many it holds. */
export function idxHolds(ix: usize, slot: u32, n: u32, engHashes: usize, out: usize): u32 {
  return holdsBlocks(changetype<Index>(ix), slot, n, engHashes, out);
}

/** Matches by sequence hashes, or by local hashes when `fromLocal != 0`. Writes (slot, depth) pairs; returns their count. */
export function idxFindMatches(ix: usize, hashes: usize, n: u32, fromLocal: u32, outSlots: usize, outDepths: usize): u32 {
  return findMatches(changetype<Index>(ix), hashes, n, fromLocal != 0, outSlots, outDepths);
}

/** One page of a slot's (engine hash, sequence hash) pairs; the position to resume from goes to `nextOut` (u32). */
export function idxExportSlot(ix: usize, slot: u32, from: u32, max: u32, out: usize, nextOut: usize): u32 {
  return exportSlot(changetype<Index>(ix), slot, from, max, out, nextOut);
}

/** Adds `n` (engine hash, sequence hash) pairs to a slot (a snapshot's); returns the pairs new to it. */
export function idxImportSlot(ix: usize, slot: u32, n: u32, pairs: usize): u32 {
  return importSlot(changetype<Index>(ix), slot, n, pairs);
}

export function idxEntries(ix: usize): u32 { return changetype<Index>(ix).entries; }
export function idxDistinctBlocks(ix: usize): u32 { return changetype<Index>(ix).recs.live; }
export function idxBytes(ix: usize): usize { return indexBytes(changetype<Index>(ix)); }
export function idxSlotBlocks(ix: usize, slot: u32): u32 { return slotBlocks(changetype<Index>(ix), slot); }

/** Evicts the least recently matched blocks until the index holds at most `target` bytes; returns the entries evicted. */
export function idxEvict(ix: usize, target: usize): u32 { return evictTo(changetype<Index>(ix), target); }

// Event kinds in the packed layout (src/events/packed-batch.ts: KIND_STORED, KIND_REMOVED, KIND_CLEARED).
const KIND_REMOVED: u32 = 1;
const KIND_CLEARED: u32 = 2;
// Outcome codes of idxApplyPacked, one byte per event (src/wasm/packed-run.ts's PackedOutcome; src/events maps them
// to statuses).
const PACKED_STORED: u8 = 0; // + the STORE_* status (0 ok, 1 parent not found, 2 invalid sequence)
const PACKED_TRUNCATED: u8 = 3;
const PACKED_BLOCK_SIZE_MISMATCH: u8 = 4;
const PACKED_REMOVED: u8 = 8;
const PACKED_NOT_FOUND: u8 = 9;
// Why idxApplyPacked stopped (written to `state`, u32, with the byte offset of the next event at `state + 4`).
const STOP_DONE: u32 = 0;
const STOP_HOST: u32 = 1;
const STOP_RANGE: u32 = 2;
const STOP_BUDGET: u32 = 3;
const NO_LOCALS: u32 = 0xffffffff;

/**
 * Applies up to `maxEvents` events of one slot, read in place from a batch an ingestion thread packed
 * (src/events/batch-codec.ts's layout, copied into [words, wordsEnd)), one outcome byte per event to
 * `outcomes`. The events it takes are the common ones: a device-tier `removed` of `group`, and a device-tier
 * `stored` of `group` with no rare field and its tokens hashes packed (a block size other than
 * `blockSize` is refused, as one event at a time). It stops before any other event (STOP_HOST: the host
 * applies that one), before an event that does not end inside the range (STOP_RANGE), and after a stored
 * event that leaves the index over `budget` bytes (0: none) or under `low` (STOP_BUDGET: the host evicts,
 * or ends its eviction episode, as after each stored event applied alone). Returns the events applied;
 * why it stopped goes to `state` and the byte offset of the next event from `words` to `state + 4`.
 */
export function idxApplyPacked(
  ix: usize, slot: u32, words: usize, wordsEnd: usize, maxEvents: u32, group: f64, blockSize: u32,
  budget: usize, low: usize, outcomes: usize, state: usize,
): u32 {
  const index = changetype<Index>(ix);
  let at = words;
  let stop = STOP_DONE;
  let i: u32 = 0;
  for (; i < maxEvents; i++) {
    if (at + 8 > wordsEnd) { stop = STOP_RANGE; break; }
    const head = load<u32>(at);
    const kind = head & 0xff;
    if (kind == KIND_CLEARED) { stop = STOP_HOST; break; }
    if (at + 24 > wordsEnd) { stop = STOP_RANGE; break; }
    if (((head >> 8) & 0xff) != 0 || load<f64>(at, 8) != group) { stop = STOP_HOST; break; }
    const n = load<u32>(at, 16);
    if (kind == KIND_REMOVED) {
      const end = at + 24 + (<usize>n << 3);
      if (end > wordsEnd) { stop = STOP_RANGE; break; }
      const missing = applyRemoved(index, slot, n, at + 24);
      store<u8>(outcomes + i, missing == 0 ? PACKED_REMOVED : PACKED_NOT_FOUND);
      at = end;
      continue;
    }
    if (at + 48 > wordsEnd) { stop = STOP_RANGE; break; }
    const locals = load<u32>(at, 20);
    if (load<u32>(at, 36) != 0 || (n != 0 && locals != n)) { stop = STOP_HOST; break; }
    const tokens = load<u32>(at, 24);
    const end = at + 48 + (<usize>(n + (locals == NO_LOCALS ? 0 : locals)) << 3) + (<usize>((tokens + 1) >> 1) << 3);
    if (end > wordsEnd) { stop = STOP_RANGE; break; }
    const truncated = load<u32>(at, 32) != 0;
    let outcome: u8;
    let budgetCrossed = false;
    if (load<u32>(at, 28) != blockSize) outcome = PACKED_BLOCK_SIZE_MISMATCH;
    else if (n == 0) outcome = truncated ? PACKED_TRUNCATED : PACKED_STORED;
    else {
      const eng = at + 48;
      const status = applyStored(index, slot, ((head >> 16) & 1) != 0, load<u64>(at, 40), n, eng, eng + (<usize>n << 3));
      outcome = status == STORE_OK && truncated ? PACKED_TRUNCATED : PACKED_STORED + <u8>status;
      if (status == STORE_OK && budget != 0) {
        const bytes = indexBytes(index);
        budgetCrossed = bytes > budget || bytes < low;
      }
    }
    store<u8>(outcomes + i, outcome);
    at = end;
    if (budgetCrossed) { i++; stop = STOP_BUDGET; break; }
  }
  store<u32>(state, stop);
  store<u32>(state, <u32>(at - words), 4);
  return i;
}

// ---- the in-flight prompt trie (prompt_trie.ts, trie_ops.ts) ------------------------------------------------
// A call taking a prompt reads its `n` hashes from the trie's query region (`trieQuery`).

export function trieNew(): usize { return changetype<usize>(newTrie()); }
export function trieFree(t: usize): void { freeTrie(changetype<Trie>(t)); }
/** The trie's query region with room for `n` hashes (u64): its address, also at offset 0 of the trie. */
export function trieQuery(t: usize, n: u32): usize { return queryRegion(changetype<Trie>(t), n); }
/** Writes (slot, depth) u32 pairs to the region whose address is at offset 8 of the trie; returns their count. */
export function trieDepths(t: usize, n: u32): u32 { return depths(changetype<Trie>(t), n); }
/**
 * A routing decision's match stage in one call, over the prompt the trie's query region holds (`n` sequence
 * hashes): the prefix index's match (`ix` 0: none) as `idxFindMatches` writes it, then the trie's depth query
 * as `trieDepths` writes it, its pair count to `outTrieCount` (u32). The hashes cross once for both, and the
 * walk is kept for an insert of the same prompt. Returns the index's pair count.
 */
export function matchStage(ix: usize, t: usize, n: u32, outSlots: usize, outDepths: usize, outTrieCount: usize): u32 {
  const trie = changetype<Trie>(t);
  const count = ix != 0 ? findMatches(changetype<Index>(ix), trie.q, n, false, outSlots, outDepths) : 0;
  store<u32>(outTrieCount, depths(trie, n));
  return count;
}
/** Returns the blocks `slot` held before; the prompt's end node goes to offset 12 of the trie. */
export function trieInsert(t: usize, n: u32, slot: u32): u32 { return insert(changetype<Trie>(t), n, slot); }
export function trieRemoveAt(t: usize, end: u32, slot: u32): u32 { return removeAt(changetype<Trie>(t), end, slot); }
export function trieRemove(t: usize, n: u32, slot: u32): u32 { return remove(changetype<Trie>(t), n, slot); }
export function trieHeldByOthers(t: usize, n: u32, slot: u32): u32 { return heldByOthers(changetype<Trie>(t), n, slot); }
/** Requests in the trie. */
export function trieSize(t: usize): u32 { return load<u32>(changetype<Trie>(t).recs + ROOT + TOTAL); }
/** Nodes in use, the root included. */
export function trieNodeCount(t: usize): u32 { return changetype<Trie>(t).live; }

/** Test hook: the prefix index's (or prompt trie's) `after`-th allocation from now fails as an exhausted memory does; 0 disarms. */
export function testFailAllocation(after: u32): void { failAllocation(after); }
