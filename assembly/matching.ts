// findMatches: for each slot holding a request's first block, how many of the
// request's leading blocks it holds. The slots still matching are kept as a
// bitset while the blocks walked hold theirs as bitsets (blocks most slots
// hold), and as a sorted list once a block holds few: each step costs the
// smaller of the two, so a wide fleet pays for the slots that match, not for
// every slot. Along a run of consecutive records (a prefix stored in one
// event) a record flagged SAME or DROP1 (block_records.ts) is passed without
// reading its bitset.
import { xxh3Pair } from './xxh3';
import { BLOCK_SEED } from './hashing';
import {
  Records, rec, blockFind, holds, holdersTo, MODE_LIST, MODE_BITS, SAME, DROP_SHIFT, REC, CHUNK_MASK,
} from './block_records';

/** The address of record `p`'s holder bitset (its u64 words), or 0 when its holders are a pair or a list. */
// @ts-ignore: decorator
@inline function bitsAt(words: u32, p: usize): usize {
  if (load<u32>(p, 8) <= 2) return 0;
  if (words == 1) return p + 16;
  return load<u32>(p, 20) != MODE_LIST ? <usize>load<u32>(p, 16) + 8 : 0;
}

// @ts-ignore: decorator
@inline function bitsWords(words: u32, bits: usize): u32 { return words == 1 ? 1 : load<u32>(bits - 8); }

// @ts-ignore: decorator
@inline function emit(outSlots: usize, outDepths: usize, out: u32, slot: u32, depth: u32): void {
  store<u32>(outSlots + (<usize>out << 2), slot);
  store<u32>(outDepths + (<usize>out << 2), depth);
}

/**
 * Word `w` of the candidates (`dense`) keeps the slots block bitset `bits` (`words` wide) holds; those it
 * drops are emitted with depth `d`. Returns the new count of (slot, depth) pairs written.
 */
// @ts-ignore: decorator
@inline function dropWord(
  dense: usize, bits: usize, words: u32, w: u32, d: u32, outSlots: usize, outDepths: usize, out: u32,
): u32 {
  const a = load<u64>(dense + (<usize>w << 3));
  const m: u64 = w < words ? load<u64>(bits + (<usize>w << 3)) : 0;
  let dropped = a & ~m;
  if (dropped == 0) return out;
  while (dropped != 0) {
    emit(outSlots, outDepths, out++, (w << 6) + <u32>ctz<u64>(dropped), d);
    dropped &= dropped - 1;
  }
  store<u64>(dense + (<usize>w << 3), a & m);
  return out;
}

/**
 * The candidates (`dense`, words [lo, hi)) keep the slots block bitset `bits` (`bitsN` words) holds; those it
 * drops are emitted with depth `d`. One pass over word pairs (WASM SIMD) marks each word that drops a slot in
 * a mask, then only the marked words are visited: a block that drops one or two slots, the usual one once
 * blocks with unchanged holders are skipped, costs no data-dependent branch per word. Returns the new count
 * of (slot, depth) pairs written.
 */
// @ts-ignore: decorator
@inline function intersect(
  dense: usize, lo: u32, hi: u32, bits: usize, bitsN: u32, d: u32, outSlots: usize, outDepths: usize, out: u32,
): u32 {
  const both = min<u32>(hi, bitsN);
  const zero = i64x2.splat(0);
  let w = lo;
  while (w + 1 < both) {
    // Up to 32 words a mask (one bit each).
    const from = w;
    const end = min<u32>(both, w + 32);
    let mask: u32 = 0;
    for (; w + 1 < end; w += 2) {
      const at = <usize>w << 3;
      const x = v128.andnot(v128.load(dense + at), v128.load(bits + at));
      mask |= <u32>i64x2.bitmask(i64x2.ne(x, zero)) << (w - from);
    }
    while (mask != 0) {
      out = dropWord(dense, bits, bitsN, from + <u32>ctz<u32>(mask), d, outSlots, outDepths, out);
      mask &= mask - 1;
    }
  }
  for (; w < hi; w++) out = dropWord(dense, bits, bitsN, w, d, outSlots, outDepths, out);
  return out;
}

/** The slots of bitset `dense` (words [lo, hi)) written ascending to `list`; returns their count. */
function denseToList(dense: usize, lo: u32, hi: u32, list: usize): u32 {
  let n: u32 = 0;
  for (let w = lo; w < hi; w++) {
    let bits = load<u64>(dense + (<usize>w << 3));
    while (bits != 0) {
      store<u32>(list + (<usize>n << 2), (w << 6) + <u32>ctz<u64>(bits));
      n++;
      bits &= bits - 1;
    }
  }
  return n;
}

/**
 * The record `after` (the one after the last block's, record `prevP`) when it is block `key`'s, or 0. Tried
 * before the id table: a prefix stored in one event got consecutive ids, so a request walking it finds its
 * records in a row, each next to the last (in the same chunk, `prevP + REC`: no chunk-table load). A record
 * is `key`'s when it holds that key and is live (keys are unique among live records; a freed one keeps its
 * stale key, refs 0). `high` is `r.high`, fixed while matching (a match adds no record).
 */
// @ts-ignore: decorator
@inline function guessBlock(r: Records, high: u32, after: u32, prevP: usize, key: u64): usize {
  if (after >= high) return 0;
  const q = (after & CHUNK_MASK) != 0 ? prevP + REC : rec(r, after);
  return load<u64>(q) == key && load<u32>(q, 8) != 0 ? q : 0;
}

/**
 * Matches `n` request blocks (`hashes`: sequence hashes, or local hashes when
 * `fromLocal`, chained here as seq[i] = XXH3(seq[i-1] || local[i], 1337)).
 * Stamps every block walked with `clock` (its last match). `scratch` holds
 * `words` u64s then one u32 per slot. Writes (slot, depth) pairs to
 * outSlots/outDepths (u32 each); returns the count.
 */
export function matchBlocks(
  r: Records, clock: u32, scratch: usize, hashes: usize, n: u32, fromLocal: bool, outSlots: usize, outDepths: usize,
): u32 {
  if (n == 0) return 0;
  let prev = load<u64>(hashes);
  let id = blockFind(r, prev);
  if (id < 0) return 0;
  let p = rec(r, <u32>id);
  store<u32>(p, clock, 12);
  const words = r.words;
  const high = r.high;
  const dense = scratch;
  const list = scratch + (<usize>words << 3);
  let lo: u32 = 0;
  let hi: u32 = 0;
  let count: u32 = 0;
  const bits0 = bitsAt(words, p);
  let isDense = bits0 != 0 && load<u32>(p, 8) >= words;
  if (isDense) {
    hi = bitsWords(words, bits0);
    memory.copy(dense, bits0, <usize>hi << 3);
  } else {
    count = holdersTo(r, p, list);
  }
  let out: u32 = 0;
  for (let d: u32 = 1; d < n; d++) {
    const h = load<u64>(hashes + (<usize>d << 3));
    prev = fromLocal ? xxh3Pair(prev, h, BLOCK_SEED) : h;
    // The walk goes on only from a found block (a missing one ends it below), so `p` is a record here.
    const after = <u32>id + 1;
    p = guessBlock(r, high, after, p, prev);
    if (p != 0) {
      id = <i32>after;
    } else {
      id = blockFind(r, prev);
      p = id < 0 ? 0 : rec(r, <u32>id);
    }
    if (p != 0) store<u32>(p, clock, 12);
    if (isDense) {
      const bits = p != 0 ? bitsAt(words, p) : 0;
      if (bits != 0) {
        // The record after the last one, with the same holders (flagged SAME in the record: its bitset is not
        // read): every candidate (a subset of the last record's holders) stays. With them less one slot
        // (DROP1): all but that slot stay. Past one word only (one word's bitset is inline in the record).
        const mode = load<u32>(p, 20);
        if (words > 1 && mode != MODE_BITS && <u32>id == after) {
          if (mode == (MODE_BITS | SAME)) continue;
          const slot = mode >> DROP_SHIFT;
          // Candidates' words past `hi` are not kept (those before `lo` are zero): none there.
          if ((slot >> 6) >= hi) continue;
          const at = dense + (<usize>(slot >> 6) << 3);
          const cand = load<u64>(at);
          const bit = <u64>1 << (<u64>slot & 63);
          if ((cand & bit) == 0) continue;
          emit(outSlots, outDepths, out++, slot, d);
          store<u64>(at, cand & ~bit);
        } else {
          out = intersect(dense, lo, hi, bits, bitsWords(words, bits), d, outSlots, outDepths, out);
        }
        while (lo < hi && load<u64>(dense + (<usize>lo << 3)) == 0) lo++;
        while (hi > lo && load<u64>(dense + (<usize>(hi - 1) << 3)) == 0) hi--;
        if (lo == hi) return out;
        continue;
      }
      count = denseToList(dense, lo, hi, list);
      isDense = false;
    }
    let kept: u32 = 0;
    for (let i: u32 = 0; i < count; i++) {
      const slot = load<u32>(list + (<usize>i << 2));
      if (p != 0 && holds(r, p, slot)) { store<u32>(list + (<usize>kept << 2), slot); kept++; }
      else emit(outSlots, outDepths, out++, slot, d);
    }
    count = kept;
    if (count == 0) return out;
  }
  if (isDense) count = denseToList(dense, lo, hi, list);
  for (let i: u32 = 0; i < count; i++) emit(outSlots, outDepths, out++, load<u32>(list + (<usize>i << 2)), n);
  return out;
}
