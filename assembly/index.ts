// kvgate.wasm: the module's whole export surface. Only numbers and linear-memory
// offsets cross the boundary; 64-bit inputs are read from memory or split into
// u32 halves so the hot path creates no BigInt. See docs/architecture.md.
import { xxh3 } from './xxh3';
import { hashBlocks, chainHashes } from './hashing';
import { hashPromptSimd } from './hash_simd';
import {
  Index, indexNew, indexFree, ensureSlot, applyStored, applyRemoved, clearSlot,
  findMatches, indexBytes, exportSlot, importSlot, slotBlocks, evictTo,
} from './prefix_index';
import { failAllocation } from './block_records';

/** Bumped whenever an export's contract changes; the host checks it at load. */
export const ABI_VERSION: u32 = 5;

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

/** Test hook: the prefix index's `after`-th allocation from now fails as an exhausted memory does; 0 disarms. */
export function testFailAllocation(after: u32): void { failAllocation(after); }
