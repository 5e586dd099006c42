// The global prefix index, flat: one open-addressing table keyed by sequence
// hash (the chained hash that names a whole prefix), each entry holding a
// bitset of the slots ((worker, dp_rank) pairs, dense ids given by the host)
// that hold that block; and one table keyed by (slot, engine block hash) that
// maps each engine's opaque block ids to our sequence hashes, so `removed`
// events and `parent_hash` references resolve per slot.
//
// Both tables use linear probing with backward-shift deletion (no tombstones)
// and grow by doubling; the bitset widens when a slot id outgrows it. Nothing
// is ever dropped for lack of room.
import { xxh3Pair } from './xxh3';
import { BLOCK_SEED } from './hashing';

const FIB: u64 = 0x9E3779B97F4A7C15;
const SLOT_MIX: u64 = 0xC2B2AE3D27D4EB4F;
const MIN_CAP_LOG2: u32 = 10;

// Engine-map entry: engine hash u64 | seq hash u64 | slot + 1 u32 (0 = empty) | pad u32.
const ENG_ENTRY: usize = 24;

export const STORE_OK: i32 = 0;
export const STORE_PARENT_NOT_FOUND: i32 = 1;
export const STORE_INVALID_SEQUENCE: i32 = 2;

@unmanaged
export class Index {
  blocks: usize = 0;      // block table: key u64 | refs u32 | pad u32 | masks u64[maskWords]
  blocksLog2: u32 = 0;
  blocksCount: u32 = 0;
  maskWords: u32 = 0;
  eng: usize = 0;
  engLog2: u32 = 0;
  engCount: u32 = 0;
  slotCounts: usize = 0;  // u32 per slot: blocks held
  slotCap: u32 = 0;
  scratch: usize = 0;     // match masks and the duplicate-check set
  scratchBytes: usize = 0;
}

// @ts-ignore: decorator
@inline function blockEntrySize(ix: Index): usize { return 16 + (<usize>ix.maskWords << 3); }
// @ts-ignore: decorator
@inline function home(key: u64, log2: u32): usize { return <usize>((key * FIB) >> (64 - <u64>log2)); }
// @ts-ignore: decorator
@inline function engKey(eng: u64, slot: u32): u64 { return eng ^ ((<u64>slot + 1) * SLOT_MIX); }

function zalloc(bytes: usize): usize {
  const p = heap.alloc(bytes);
  memory.fill(p, 0, bytes);
  return p;
}

function scratch(ix: Index, bytes: usize): usize {
  if (bytes > ix.scratchBytes) {
    if (ix.scratch != 0) heap.free(ix.scratch);
    ix.scratchBytes = max<usize>(bytes, 4096);
    ix.scratch = heap.alloc(ix.scratchBytes);
  }
  return ix.scratch;
}

export function indexNew(): Index {
  const ix = changetype<Index>(heap.alloc(offsetof<Index>()));
  ix.maskWords = 1;
  ix.blocksLog2 = MIN_CAP_LOG2;
  ix.blocksCount = 0;
  ix.blocks = zalloc((<usize>1 << MIN_CAP_LOG2) * blockEntrySize(ix));
  ix.engLog2 = MIN_CAP_LOG2;
  ix.engCount = 0;
  ix.eng = zalloc((<usize>1 << MIN_CAP_LOG2) * ENG_ENTRY);
  ix.slotCap = 64;
  ix.slotCounts = zalloc(64 << 2);
  ix.scratch = 0;
  ix.scratchBytes = 0;
  return ix;
}

export function indexFree(ix: Index): void {
  heap.free(ix.blocks);
  heap.free(ix.eng);
  heap.free(ix.slotCounts);
  if (ix.scratch != 0) heap.free(ix.scratch);
  heap.free(changetype<usize>(ix));
}

// ---- block table -------------------------------------------------------

function blockFind(ix: Index, key: u64): usize {
  const es = blockEntrySize(ix);
  const m = (<usize>1 << ix.blocksLog2) - 1;
  let i = home(key, ix.blocksLog2);
  while (true) {
    const e = ix.blocks + i * es;
    if (load<u32>(e, 8) == 0) return 0;
    if (load<u64>(e) == key) return e;
    i = (i + 1) & m;
  }
  return 0;
}

/** Rebuilds the block table with `log2` capacity and `words` mask words. */
function blockRehash(ix: Index, log2: u32, words: u32): void {
  const oldEs = blockEntrySize(ix);
  const oldCap = <usize>1 << ix.blocksLog2;
  const oldTable = ix.blocks;
  const oldWords = ix.maskWords;
  ix.maskWords = words;
  ix.blocksLog2 = log2;
  const es = blockEntrySize(ix);
  ix.blocks = zalloc((<usize>1 << log2) * es);
  const m = (<usize>1 << log2) - 1;
  for (let j: usize = 0; j < oldCap; j++) {
    const src = oldTable + j * oldEs;
    if (load<u32>(src, 8) == 0) continue;
    let i = home(load<u64>(src), log2);
    while (load<u32>(ix.blocks + i * es, 8) != 0) i = (i + 1) & m;
    const dst = ix.blocks + i * es;
    memory.copy(dst, src, 16 + (<usize>oldWords << 3));
  }
  heap.free(oldTable);
}

/** Finds or creates the entry for `key`; a new entry has refs 0 and an empty mask. */
function blockUpsert(ix: Index, key: u64): usize {
  if (((<u64>ix.blocksCount + 1) << 3) > ((<u64>1 << ix.blocksLog2) * 5)) {
    blockRehash(ix, ix.blocksLog2 + 1, ix.maskWords);
  }
  const es = blockEntrySize(ix);
  const m = (<usize>1 << ix.blocksLog2) - 1;
  let i = home(key, ix.blocksLog2);
  while (true) {
    const e = ix.blocks + i * es;
    if (load<u32>(e, 8) == 0) {
      store<u64>(e, key);
      memory.fill(e + 16, 0, <usize>ix.maskWords << 3);
      return e;
    }
    if (load<u64>(e) == key) return e;
    i = (i + 1) & m;
  }
  return 0;
}

function blockDelete(ix: Index, e: usize): void {
  const es = blockEntrySize(ix);
  const m = (<usize>1 << ix.blocksLog2) - 1;
  let hole = (e - ix.blocks) / es;
  let j = hole;
  while (true) {
    j = (j + 1) & m;
    const ej = ix.blocks + j * es;
    if (load<u32>(ej, 8) == 0) break;
    const k = home(load<u64>(ej), ix.blocksLog2);
    // Move ej into the hole unless its home lies cyclically in (hole, j].
    const inRange = hole <= j ? (k > hole && k <= j) : (k > hole || k <= j);
    if (!inRange) {
      memory.copy(ix.blocks + hole * es, ej, es);
      hole = j;
    }
  }
  store<u32>(ix.blocks + hole * es, 0, 8);
  ix.blocksCount--;
}

function addBit(ix: Index, seq: u64, slot: u32): void {
  const e = blockUpsert(ix, seq);
  const w = e + 16 + (<usize>(slot >> 6) << 3);
  const bit: u64 = <u64>1 << (<u64>slot & 63);
  const cur = load<u64>(w);
  if ((cur & bit) == 0) {
    store<u64>(w, cur | bit);
    const refs = load<u32>(e, 8);
    if (refs == 0) ix.blocksCount++;
    store<u32>(e, refs + 1, 8);
  }
}

function dropBit(ix: Index, seq: u64, slot: u32): void {
  const e = blockFind(ix, seq);
  if (e == 0) return;
  const w = e + 16 + (<usize>(slot >> 6) << 3);
  const bit: u64 = <u64>1 << (<u64>slot & 63);
  const cur = load<u64>(w);
  if ((cur & bit) == 0) return;
  store<u64>(w, cur & ~bit);
  const refs = load<u32>(e, 8) - 1;
  if (refs == 0) blockDelete(ix, e);
  else store<u32>(e, refs, 8);
}

// ---- engine map ------------------------------------------------------------

function engFind(ix: Index, eng: u64, slot: u32): usize {
  const m = (<usize>1 << ix.engLog2) - 1;
  let i = home(engKey(eng, slot), ix.engLog2);
  while (true) {
    const e = ix.eng + i * ENG_ENTRY;
    const s = load<u32>(e, 16);
    if (s == 0) return 0;
    if (s == slot + 1 && load<u64>(e) == eng) return e;
    i = (i + 1) & m;
  }
  return 0;
}

function engGrow(ix: Index): void {
  const oldCap = <usize>1 << ix.engLog2;
  const old = ix.eng;
  ix.engLog2++;
  const m = (<usize>1 << ix.engLog2) - 1;
  ix.eng = zalloc((m + 1) * ENG_ENTRY);
  for (let j: usize = 0; j < oldCap; j++) {
    const src = old + j * ENG_ENTRY;
    const s = load<u32>(src, 16);
    if (s == 0) continue;
    let i = home(engKey(load<u64>(src), s - 1), ix.engLog2);
    while (load<u32>(ix.eng + i * ENG_ENTRY, 16) != 0) i = (i + 1) & m;
    memory.copy(ix.eng + i * ENG_ENTRY, src, ENG_ENTRY);
  }
  heap.free(old);
}

function engInsert(ix: Index, eng: u64, slot: u32, seq: u64): void {
  if (((<u64>ix.engCount + 1) << 3) > ((<u64>1 << ix.engLog2) * 5)) engGrow(ix);
  const m = (<usize>1 << ix.engLog2) - 1;
  let i = home(engKey(eng, slot), ix.engLog2);
  while (load<u32>(ix.eng + i * ENG_ENTRY, 16) != 0) i = (i + 1) & m;
  const e = ix.eng + i * ENG_ENTRY;
  store<u64>(e, eng);
  store<u64>(e, seq, 8);
  store<u32>(e, slot + 1, 16);
  ix.engCount++;
}

function engDelete(ix: Index, e: usize): void {
  const m = (<usize>1 << ix.engLog2) - 1;
  let hole = (e - ix.eng) / ENG_ENTRY;
  let j = hole;
  while (true) {
    j = (j + 1) & m;
    const ej = ix.eng + j * ENG_ENTRY;
    const s = load<u32>(ej, 16);
    if (s == 0) break;
    const k = home(engKey(load<u64>(ej), s - 1), ix.engLog2);
    const inRange = hole <= j ? (k > hole && k <= j) : (k > hole || k <= j);
    if (!inRange) {
      memory.copy(ix.eng + hole * ENG_ENTRY, ej, ENG_ENTRY);
      hole = j;
    }
  }
  store<u32>(ix.eng + hole * ENG_ENTRY, 0, 16);
  ix.engCount--;
}

// ---- slots -----------------------------------------------------------------

/** Makes room for slot id `slot` (mask width and per-slot counters). */
export function ensureSlot(ix: Index, slot: u32): void {
  const words = (slot >> 6) + 1;
  if (words > ix.maskWords) blockRehash(ix, ix.blocksLog2, words);
  if (slot >= ix.slotCap) {
    let cap = ix.slotCap;
    while (cap <= slot) cap <<= 1;
    const p = zalloc(<usize>cap << 2);
    memory.copy(p, ix.slotCounts, <usize>ix.slotCap << 2);
    heap.free(ix.slotCounts);
    ix.slotCounts = p;
    ix.slotCap = cap;
  }
}

// @ts-ignore: decorator
@inline function slotCountAdd(ix: Index, slot: u32, d: i32): void {
  const p = ix.slotCounts + (<usize>slot << 2);
  store<u32>(p, <u32>(<i32>load<u32>(p) + d));
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
    const p = engFind(ix, parent, slot);
    if (p == 0) return STORE_PARENT_NOT_FOUND;
    prev = load<u64>(p, 8);
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

/** Maps the slot's engine hash `eng` to `seq` and marks the block held; returns 1 when the slot did not hold `eng`. */
function mapBlock(ix: Index, slot: u32, eng: u64, seq: u64): u32 {
  const e = engFind(ix, eng, slot);
  if (e != 0) {
    const old = load<u64>(e, 8);
    if (old == seq) return 0;
    // The engine reused an id for other content: move it.
    store<u64>(e, seq, 8);
    dropBit(ix, old, slot);
    addBit(ix, seq, slot);
    return 0;
  }
  engInsert(ix, eng, slot, seq);
  slotCountAdd(ix, slot, 1);
  addBit(ix, seq, slot);
  return 1;
}

/** Applies a `removed` event; returns how many of the hashes were unknown for this slot. */
export function applyRemoved(ix: Index, slot: u32, n: u32, engHashes: usize): u32 {
  if (slot >= ix.slotCap) return n;
  let missing: u32 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const e = engFind(ix, load<u64>(engHashes + (<usize>i << 3)), slot);
    if (e == 0) { missing++; continue; }
    const seq = load<u64>(e, 8);
    engDelete(ix, e);
    slotCountAdd(ix, slot, -1);
    dropBit(ix, seq, slot);
  }
  return missing;
}

/** Removes every block of `slot` (a `cleared` event, or the slot's removal). Returns blocks removed. */
export function clearSlot(ix: Index, slot: u32): u32 {
  if (slot >= ix.slotCap) return 0;
  let removed: u32 = 0;
  const cap = <usize>1 << ix.engLog2;
  let i: usize = 0;
  // Backward-shift deletion only moves entries from later positions into the
  // hole being examined, so re-examining position i after a delete visits all.
  while (i < cap && load<u32>(ix.slotCounts + (<usize>slot << 2)) > 0) {
    const e = ix.eng + i * ENG_ENTRY;
    if (load<u32>(e, 16) == slot + 1) {
      const seq = load<u64>(e, 8);
      engDelete(ix, e);
      slotCountAdd(ix, slot, -1);
      dropBit(ix, seq, slot);
      removed++;
      continue;
    }
    i++;
  }
  return removed;
}

/**
 * Copies up to `max` of `slot`'s (engine hash, sequence hash) pairs to `out`,
 * interleaved u64s, scanning the engine table from position `from`. Writes the
 * position to resume from to `nextOut` (u32; the table capacity when done) and
 * returns the pairs written. A snapshot's pages must be taken with no change in between.
 */
export function exportSlot(ix: Index, slot: u32, from: u32, max: u32, out: usize, nextOut: usize): u32 {
  const cap = <u32>(1 << ix.engLog2);
  let n: u32 = 0;
  let i = from;
  for (; i < cap && n < max; i++) {
    const e = ix.eng + <usize>i * ENG_ENTRY;
    if (load<u32>(e, 16) != slot + 1) continue;
    const o = out + (<usize>n << 4);
    store<u64>(o, load<u64>(e));
    store<u64>(o, load<u64>(e, 8), 8);
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

/**
 * For each slot holding the request's first block, the number of leading
 * request blocks it holds. `hashes` are sequence hashes, or local hashes when
 * `fromLocal` (chained here as seq[i] = XXH3(seq[i-1] || local[i], 1337)).
 * Writes (slot, depth) pairs to outSlots/outDepths (u32 each); returns the count.
 */
export function findMatches(ix: Index, hashes: usize, n: u32, fromLocal: bool, outSlots: usize, outDepths: usize): u32 {
  if (n == 0) return 0;
  // With local hashes the chain is computed lazily, so a miss or an early
  // divergence costs only the blocks actually walked.
  let prev = load<u64>(hashes);
  const first = blockFind(ix, prev);
  if (first == 0) return 0;
  const W = <usize>ix.maskWords;
  const active = scratch(ix, W << 3);
  memory.copy(active, first + 16, W << 3);
  let out: u32 = 0;
  for (let d: u32 = 1; d < n; d++) {
    const h = load<u64>(hashes + (<usize>d << 3));
    prev = fromLocal ? xxh3Pair(prev, h, BLOCK_SEED) : h;
    const e = blockFind(ix, prev);
    let any = false;
    for (let w: usize = 0; w < W; w++) {
      const a = load<u64>(active + (w << 3));
      if (a == 0) continue;
      const m: u64 = e != 0 ? load<u64>(e + 16 + (w << 3)) : 0;
      let dropped = a & ~m;
      while (dropped != 0) {
        const b = <u32>ctz<u64>(dropped);
        store<u32>(outSlots + (<usize>out << 2), <u32>(w << 6) + b);
        store<u32>(outDepths + (<usize>out << 2), d);
        out++;
        dropped &= dropped - 1;
      }
      const kept = a & m;
      store<u64>(active + (w << 3), kept);
      if (kept != 0) any = true;
    }
    if (!any) return out;
  }
  for (let w: usize = 0; w < W; w++) {
    let a = load<u64>(active + (w << 3));
    while (a != 0) {
      const b = <u32>ctz<u64>(a);
      store<u32>(outSlots + (<usize>out << 2), <u32>(w << 6) + b);
      store<u32>(outDepths + (<usize>out << 2), n);
      out++;
      a &= a - 1;
    }
  }
  return out;
}

/** Bytes held by the index's tables. */
export function indexBytes(ix: Index): usize {
  return (<usize>1 << ix.blocksLog2) * blockEntrySize(ix) + (<usize>1 << ix.engLog2) * ENG_ENTRY
    + (<usize>ix.slotCap << 2) + ix.scratchBytes + offsetof<Index>();
}
