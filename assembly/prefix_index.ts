// The global prefix index: block records (block_records.ts: one record per
// distinct block, keyed by our chained sequence hash, each with the set of
// slots (dense (worker, dp_rank) ids given by the host) that hold it), and
// per slot a table from the engine's opaque block hash to the record's id,
// so `removed` events and `parent_hash` references resolve per slot and a
// slot's blocks are found without scanning the others'.
//
// Memory follows the (block, slot) entries: 12 bytes per entry in its slot's
// table 64 to 80 % full (it grows by a quarter), plus the record and holder set of each distinct block.
import { xxh3Pair } from './xxh3';
import { BLOCK_SEED } from './hashing';
import {
  Records, recordsNew, recordsFree, recordsBytes, rec, blockUpsert, holderAdd, holderDrop, heapSize, home, zalloc,
  widenRecords, stampCutoff, halveStamps, alloc, bucketOf, grownCap, overLoad,
} from './block_records';
import { matchBlocks } from './matching';

const SLOT_MIX: u64 = 0xC2B2AE3D27D4EB4F;
const ENG: usize = 12;           // engine table bucket: engine hash u64 | block id + 1 u32 (0 = empty)
const SLOT: usize = 16;          // per slot: table u32 | cap u32 (buckets) | count u32 | pad u32
const MIN_ENG: u32 = 16;

export const STORE_OK: i32 = 0;
export const STORE_PARENT_NOT_FOUND: i32 = 1;
export const STORE_INVALID_SEQUENCE: i32 = 2;

@unmanaged
export class Index {
  recs: Records = changetype<Records>(0);
  slots: usize = 0;
  slotCap: u32 = 0;
  entries: u32 = 0;
  engBytes: usize = 0;    // heap bytes of the slots' engine tables
  clock: u32 = 0;         // advanced by each match; a record's stamp is its last match
  scratch: usize = 0;
  scratchBytes: usize = 0;
}

// @ts-ignore: decorator
@inline function engHome(eng: u64, cap: usize): usize { return bucketOf(eng ^ SLOT_MIX, cap); }
// @ts-ignore: decorator
@inline function slotAt(ix: Index, slot: u32): usize { return ix.slots + <usize>slot * SLOT; }

function scratch(ix: Index, bytes: usize): usize {
  if (bytes > ix.scratchBytes) {
    // Forgotten before the allocation: one that fails must leave no freed block behind to free again.
    if (ix.scratch != 0) heap.free(ix.scratch);
    ix.scratch = 0;
    ix.scratchBytes = 0;
    const bytesNow = max<usize>(bytes, 4096);
    ix.scratch = alloc(bytesNow);
    ix.scratchBytes = bytesNow;
  }
  return ix.scratch;
}

export function indexNew(): Index {
  const ix = changetype<Index>(zalloc(offsetof<Index>()));
  ix.recs = recordsNew();
  ix.slotCap = 64;
  ix.slots = zalloc(64 * SLOT);
  return ix;
}

export function indexFree(ix: Index): void {
  for (let s: u32 = 0; s < ix.slotCap; s++) {
    const t = load<u32>(slotAt(ix, s));
    if (t != 0) heap.free(<usize>t);
  }
  heap.free(ix.slots);
  recordsFree(ix.recs);
  if (ix.scratch != 0) heap.free(ix.scratch);
  heap.free(changetype<usize>(ix));
}

// ---- per-slot engine tables ------------------------------------------------------

/** The bucket of `eng` in slot table `st`, or 0. */
function engFind(st: usize, eng: u64): usize {
  const t = <usize>load<u32>(st);
  if (t == 0) return 0;
  const cap = <usize>load<u32>(st, 4);
  let i = engHome(eng, cap);
  while (true) {
    const e = t + i * ENG;
    const id1 = load<u32>(e, 8);
    if (id1 == 0) return 0;
    if (load<u64>(e) == eng) return e;
    i = i + 1 == cap ? 0 : i + 1;
  }
  return 0;
}

function engPlace(t: usize, cap: usize, eng: u64, id1: u32): void {
  let i = engHome(eng, cap);
  while (load<u32>(t + i * ENG, 8) != 0) i = i + 1 == cap ? 0 : i + 1;
  store<u64>(t + i * ENG, eng);
  store<u32>(t + i * ENG, id1, 8);
}

function engResize(ix: Index, st: usize, cap: usize): void {
  const old = <usize>load<u32>(st);
  const oldCap = <usize>load<u32>(st, 4);
  const t = zalloc(cap * ENG);
  if (old != 0) {
    for (let j: usize = 0; j < oldCap; j++) {
      const e = old + j * ENG;
      const id1 = load<u32>(e, 8);
      if (id1 != 0) engPlace(t, cap, load<u64>(e), id1);
    }
    heap.free(old);
    ix.engBytes -= heapSize(oldCap * ENG);
  }
  ix.engBytes += heapSize(cap * ENG);
  store<u32>(st, <u32>t);
  store<u32>(st, <u32>cap, 4);
}

function engInsert(ix: Index, st: usize, eng: u64, id: u32): void {
  const count = load<u32>(st, 8);
  if (load<u32>(st) == 0) engResize(ix, st, MIN_ENG);
  else if (overLoad(count, load<u32>(st, 4))) engResize(ix, st, grownCap(load<u32>(st, 4)));
  engPlace(<usize>load<u32>(st), load<u32>(st, 4), eng, id + 1);
  store<u32>(st, count + 1, 8);
  ix.entries++;
}

function engDelete(ix: Index, st: usize, e: usize): void {
  const t = <usize>load<u32>(st);
  const cap = <usize>load<u32>(st, 4);
  let hole = (e - t) / ENG;
  let j = hole;
  while (true) {
    j = j + 1 == cap ? 0 : j + 1;
    const ej = t + j * ENG;
    if (load<u32>(ej, 8) == 0) break;
    const k = engHome(load<u64>(ej), cap);
    const inRange = hole <= j ? (k > hole && k <= j) : (k > hole || k <= j);
    if (!inRange) {
      memory.copy(t + hole * ENG, ej, ENG);
      hole = j;
    }
  }
  store<u32>(t + hole * ENG, 0, 8);
  store<u32>(st, load<u32>(st, 8) - 1, 8);
  ix.entries--;
}

// ---- slots -----------------------------------------------------------------

/** Makes room for slot id `slot` (its table entry, and bitset width for new holder sets). */
export function ensureSlot(ix: Index, slot: u32): void {
  if (slot >= ix.slotCap) {
    let cap = ix.slotCap;
    while (cap <= slot) cap <<= 1;
    const p = zalloc(<usize>cap * SLOT);
    memory.copy(p, ix.slots, <usize>ix.slotCap * SLOT);
    heap.free(ix.slots);
    ix.slots = p;
    ix.slotCap = cap;
  }
  widenRecords(ix.recs, (slot >> 6) + 1);
}

/** Blocks held by `slot`. */
export function slotBlocks(ix: Index, slot: u32): u32 {
  return slot < ix.slotCap ? load<u32>(slotAt(ix, slot), 8) : 0;
}

/** True when `keys[0..n)` (and `parent`, if given) repeat a value. O(n) with a scratch set. */
function hasDuplicates(ix: Index, keys: usize, n: u32, hasParent: bool, parent: u64): bool {
  const total = n + (hasParent ? 1 : 0);
  if (total < 2) return false;
  let log2: u32 = 4;
  while ((<u32>1 << log2) < total * 2) log2++;
  const cap = <usize>1 << log2;
  const set = scratch(ix, cap * 16);
  memory.fill(set, 0, cap * 16);
  const m = cap - 1;
  for (let k: u32 = 0; k < total; k++) {
    const v = k < n ? load<u64>(keys + (<usize>k << 3)) : parent;
    let i = home(v, log2);
    while (true) {
      const e = set + i * 16;
      if (load<u32>(e, 8) == 0) { store<u64>(e, v); store<u32>(e, 1, 8); break; }
      if (load<u64>(e) == v) return true;
      i = (i + 1) & m;
    }
  }
  return false;
}

/**
 * Applies a `stored` event for `slot`: `n` consecutive blocks under `parent`
 * (engine hash; root when `hasParent` is false). Atomic: on any error nothing changes.
 */
export function applyStored(ix: Index, slot: u32, hasParent: bool, parent: u64, n: u32, engHashes: usize, localHashes: usize): i32 {
  ensureSlot(ix, slot);
  let prev: u64 = 0;
  if (hasParent) {
    const p = engFind(slotAt(ix, slot), parent);
    if (p == 0) return STORE_PARENT_NOT_FOUND;
    prev = load<u64>(rec(ix.recs, load<u32>(p, 8) - 1));
  }
  if (hasDuplicates(ix, engHashes, n, hasParent, parent)) return STORE_INVALID_SEQUENCE;
  for (let i: u32 = 0; i < n; i++) {
    const local = load<u64>(localHashes + (<usize>i << 3));
    const eng = load<u64>(engHashes + (<usize>i << 3));
    const seq = (i == 0 && !hasParent) ? local : xxh3Pair(prev, local, BLOCK_SEED);
    prev = seq;
    mapBlock(ix, slot, eng, seq);
  }
  return STORE_OK;
}

/** Maps the slot's engine hash `eng` to block `seq` and marks it held; returns 1 when the slot did not hold `eng`. */
function mapBlock(ix: Index, slot: u32, eng: u64, seq: u64): u32 {
  const st = slotAt(ix, slot);
  const e = engFind(st, eng);
  if (e != 0) {
    const oldId = load<u32>(e, 8) - 1;
    if (load<u64>(rec(ix.recs, oldId)) == seq) return 0;
    // The engine reused an id for other content: move it.
    const id = blockUpsert(ix.recs, seq, ix.clock);
    holderAdd(ix.recs, id, slot);
    store<u32>(engFind(st, eng), id + 1, 8);
    holderDrop(ix.recs, oldId, slot);
    return 0;
  }
  const id = blockUpsert(ix.recs, seq, ix.clock);
  holderAdd(ix.recs, id, slot);
  engInsert(ix, st, eng, id);
  return 1;
}

/** Applies a `removed` event; returns how many of the hashes were unknown for this slot. */
export function applyRemoved(ix: Index, slot: u32, n: u32, engHashes: usize): u32 {
  if (slot >= ix.slotCap) return n;
  const st = slotAt(ix, slot);
  let missing: u32 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const e = engFind(st, load<u64>(engHashes + (<usize>i << 3)));
    if (e == 0) { missing++; continue; }
    const id = load<u32>(e, 8) - 1;
    engDelete(ix, st, e);
    holderDrop(ix.recs, id, slot);
  }
  return missing;
}

/**
 * Which of `n` engine hashes `slot` holds: a byte per hash to `out`, 1 held, 0 not. Returns how many it holds.
 * Reads only (src/events asks the other storage tiers of a slot after a removal from one: salt-memory.ts).
 */
export function holdsBlocks(ix: Index, slot: u32, n: u32, engHashes: usize, out: usize): u32 {
  if (slot >= ix.slotCap) { memory.fill(out, 0, n); return 0; }
  const st = slotAt(ix, slot);
  let held: u32 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const h: u32 = engFind(st, load<u64>(engHashes + (<usize>i << 3))) != 0 ? 1 : 0;
    store<u8>(out + i, <u8>h);
    held += h;
  }
  return held;
}

/** Removes every block of `slot` (a `cleared` event, or the slot's removal). Returns blocks removed. */
export function clearSlot(ix: Index, slot: u32): u32 {
  if (slot >= ix.slotCap) return 0;
  const st = slotAt(ix, slot);
  const t = <usize>load<u32>(st);
  if (t == 0) return 0;
  const removed = load<u32>(st, 8);
  const cap = <usize>load<u32>(st, 4);
  for (let j: usize = 0; j < cap; j++) {
    const id1 = load<u32>(t + j * ENG, 8);
    if (id1 != 0) holderDrop(ix.recs, id1 - 1, slot);
  }
  heap.free(t);
  ix.engBytes -= heapSize(cap * ENG);
  store<u64>(st, 0);
  store<u32>(st, 0, 8);
  ix.entries -= removed;
  return removed;
}

/**
 * Copies up to `max` of `slot`'s (engine hash, sequence hash) pairs to `out`,
 * interleaved u64s, scanning the slot's table from position `from`. Writes the
 * position to resume from to `nextOut` (u32; the table capacity when done) and
 * returns the pairs written. A snapshot's pages must be taken with no change in between.
 */
export function exportSlot(ix: Index, slot: u32, from: u32, max: u32, out: usize, nextOut: usize): u32 {
  const st = slot < ix.slotCap ? slotAt(ix, slot) : 0;
  const t = st != 0 ? <usize>load<u32>(st) : 0;
  const cap: u32 = t != 0 ? load<u32>(st, 4) : 0;
  let n: u32 = 0;
  let i = from;
  for (; i < cap && n < max; i++) {
    const e = t + <usize>i * ENG;
    const id1 = load<u32>(e, 8);
    if (id1 == 0) continue;
    const o = out + (<usize>n << 4);
    store<u64>(o, load<u64>(e));
    store<u64>(o, load<u64>(rec(ix.recs, id1 - 1)), 8);
    n++;
  }
  store<u32>(nextOut, i);
  return n;
}

/**
 * Adds `n` (engine hash, sequence hash) pairs (interleaved u64s at `pairs`) to
 * `slot`, as a snapshot of another index holds them; an engine hash the slot
 * already maps is moved to the new sequence hash. Returns the pairs new to the slot.
 */
export function importSlot(ix: Index, slot: u32, n: u32, pairs: usize): u32 {
  ensureSlot(ix, slot);
  let added: u32 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const p = pairs + (<usize>i << 4);
    added += mapBlock(ix, slot, load<u64>(p), load<u64>(p, 8));
  }
  return added;
}

/** Bytes of WASM heap held by the index. */
export function indexBytes(ix: Index): usize {
  return recordsBytes(ix.recs) + ix.engBytes + heapSize(<usize>ix.slotCap * SLOT) + heapSize(ix.scratchBytes)
    + heapSize(offsetof<Index>());
}

/**
 * For each slot holding the request's first block, the number of leading
 * request blocks it holds (see matching.ts). Returns the (slot, depth) count.
 */
export function findMatches(ix: Index, hashes: usize, n: u32, fromLocal: bool, outSlots: usize, outDepths: usize): u32 {
  // Before the u32 clock wraps, halve it and every stamp: their order, all eviction needs, is kept.
  if (ix.clock == 0xFFFFFFFF) ix.clock = halveStamps(ix.recs, ix.clock);
  ix.clock++;
  const buf = scratch(ix, (<usize>ix.recs.words << 3) + (<usize>ix.slotCap << 2));
  return matchBlocks(ix.recs, ix.clock, buf, hashes, n, fromLocal, outSlots, outDepths);
}

// ---- memory budget -----------------------------------------------------------------

/** Evicts from every slot the blocks stamped at or before `cutoff`; returns the entries removed. */
function evictStamped(ix: Index, cutoff: u32): u32 {
  let removed: u32 = 0;
  for (let s: u32 = 0; s < ix.slotCap; s++) {
    const st = slotAt(ix, s);
    const t = <usize>load<u32>(st);
    if (t == 0) continue;
    const cap = <usize>load<u32>(st, 4);
    let i: usize = 0;
    // Backward-shift deletion moves only later entries into the hole at i, so re-examining i visits all.
    while (i < cap) {
      const e = t + i * ENG;
      const id1 = load<u32>(e, 8);
      if (id1 != 0 && load<u32>(rec(ix.recs, id1 - 1), 12) <= cutoff) {
        engDelete(ix, st, e);
        holderDrop(ix.recs, id1 - 1, s);
        removed++;
        continue;
      }
      i++;
    }
    // Give back what the evicted entries held: at most half full afterwards.
    const count = load<u32>(st, 8);
    if (count == 0) {
      heap.free(t);
      ix.engBytes -= heapSize(cap * ENG);
      store<u64>(st, 0);
    } else {
      const half = max<usize>(MIN_ENG, (<usize>count * 2 + 15) & ~<usize>15);
      if (half < cap) engResize(ix, st, half);
    }
  }
  return removed;
}

/**
 * Evicts the least recently matched blocks (a block's stamp is the clock of
 * its last match, or of its creation) until the index holds at most `target`
 * bytes, or nothing is left. Returns the (block, slot) entries evicted.
 */
export function evictTo(ix: Index, target: usize): u32 {
  let evicted: u32 = 0;
  for (let round = 0; round < 16 && indexBytes(ix) > target && ix.recs.live > 0; round++) {
    const bytes = indexBytes(ix);
    const live = ix.recs.live;
    // Blocks to evict this round: the excess over the mean bytes per block, doubled each round.
    const want = min<u64>(live, ((<u64>(bytes - target) * live) / bytes + 1) << round);
    evicted += evictStamped(ix, stampCutoff(ix.recs, <u32>want, ix.clock));
  }
  return evicted;
}
