// Block records of the prefix index: one 24-byte record per distinct block
// (a prefix, named by its sequence hash), with a dense id, in chunks of 4,096
// so growth never copies them and slack stays under one chunk; a hash table
// from sequence hash to id; and each record's set of holding slots, sized by
// its holders, not by the fleet:
//   - up to 2 slots inline in the record,
//   - then a sorted u32 list (one allocation),
//   - then, once the list would outgrow a bitset of every slot, a bitset.
// A block most slots hold (a system prompt) costs a bitset; a private block
// costs one record. Memory follows the (block, slot) entries.
//
// Record: key u64 @0 | refs u32 @8 | stamp u32 @12 | a u32 @16 | b u32 @20.
//   refs <= 2: a, b are the slots, ascending. refs > 2: while every slot id
//   is below 64 (`words` 1), a and b are the holders' bitset, one u64 in the
//   record; past that, a = the set's allocation, b = MODE_LIST, or MODE_BITS with, when the record before
//   (id - 1) is live with a bitset of the same width, the flag SAME if it has the same slots, or DROP1 and
//   that slot (b >> DROP_SHIFT) if it has one slot more: a match that walks from that record into this one
//   keeps every candidate, or all but that slot, without reading the bitset (the common cases along a
//   shared document, whose holders change at few blocks, one slot's prefix ending). Kept by `refreshSame`.
//   A free record: refs 0, a = next free id + 1.
// List allocation: cap u32 @0, slots u32[cap] @4. Bitset: words u32 @0, u64[words] @8.

export const REC: usize = 24;
const CHUNK_LOG2: u32 = 12;
export const CHUNK_MASK: u32 = (1 << CHUNK_LOG2) - 1;
export const MODE_LIST: u32 = 0;
export const MODE_BITS: u32 = 1;
export const SAME: u32 = 2;
export const DROP1: u32 = 4;
export const DROP_SHIFT: u32 = 3;
const FIB: u64 = 0x9E3779B97F4A7C15;
const MIN_TAB: u32 = 1024;

@unmanaged
export class Records {
  chunks: usize = 0;      // usize[chunkCap]: each chunk holds 4,096 records
  chunkCount: u32 = 0;
  chunkCap: u32 = 0;
  high: u32 = 0;          // ids handed out so far (free ones included)
  freeHead: u32 = 0;      // first free id + 1; 0 = none
  live: u32 = 0;          // distinct blocks held
  tab: usize = 0;         // u64 buckets: id + 1 (low u32) | the key's mix, `mixOf` (high u32)
  tabCap: u32 = 0;        // buckets (any count: see `bucketOf`)
  words: u32 = 1;         // bitset width of the widest slot id (64 slots a word)
  setBytes: usize = 0;    // bytes held by the lists and bitsets
  failed: bool = false;   // an allocation failed: the index must be rebuilt
}

/** The heap's footprint of an allocation of `n` bytes (TLSF: a 4-byte header, 16-byte granules). */
// @ts-ignore: decorator
@inline export function heapSize(n: usize): usize { return (n + 4 + 15) & ~<usize>15; }
// @ts-ignore: decorator
@inline export function home(key: u64, log2: u32): usize { return <usize>((key * FIB) >> (64 - <u64>log2)); }

/** A key's 32-bit mix: its home in any table (`mixHome`), and the id table's tag. */
// @ts-ignore: decorator
@inline function mixOf(key: u64): u32 { return <u32>((key * FIB) >> 32); }

/**
 * The home bucket of a key of mix `mix` in a table of `cap` buckets, any count (the mix scaled to [0, cap)):
 * tables grow by a quarter, not by doubling, so a table is 64 to 80 % full, never 40 %. Homes keep the mixes'
 * order, so a table rehashed in bucket order is written nearly in order.
 */
// @ts-ignore: decorator
@inline function mixHome(mix: u32, cap: usize): usize { return <usize>((<u64>mix * <u64>cap) >> 32); }

/** The home bucket of `key` in a table of `cap` buckets. */
// @ts-ignore: decorator
@inline export function bucketOf(key: u64, cap: usize): usize { return mixHome(mixOf(key), cap); }

/** The capacity a table of `cap` buckets grows to: a quarter more, in whole 16-bucket steps. */
// @ts-ignore: decorator
@inline export function grownCap(cap: usize): usize { return (cap + (cap >> 2) + 15) & ~<usize>15; }

/** True when a table of `cap` buckets holding `count` must grow before one more goes in (over 80 % full). */
// @ts-ignore: decorator
@inline export function overLoad(count: usize, cap: usize): bool { return (<u64>count + 1) * 5 > (<u64>cap << 2); }

// Test hook (src/wasm/README.md): while > 0, counts the index's (and the prompt trie's) allocations down; the one that
// takes it to 0 fails exactly as an exhausted memory does (TLSF's failed memory.grow: `unreachable`).
// 0, its value unless the host arms it, costs one compare per allocation.
let failAllocIn: u32 = 0;

/** Makes the index's `after`-th allocation from now fail as an exhausted memory does (0 disarms). */
export function failAllocation(after: u32): void { failAllocIn = after; }

/** Every allocation of the prefix index and the prompt trie: the heap's, behind the test hook. */
export function alloc(bytes: usize): usize {
  if (failAllocIn != 0) {
    failAllocIn--;
    if (failAllocIn == 0) unreachable();
  }
  return heap.alloc(bytes);
}

export function zalloc(bytes: usize): usize {
  const p = alloc(bytes);
  memory.fill(p, 0, bytes);
  return p;
}

export function recordsNew(): Records {
  const r = changetype<Records>(zalloc(offsetof<Records>()));
  r.words = 1;
  r.tabCap = MIN_TAB;
  r.tab = zalloc(<usize>MIN_TAB << 3);
  r.chunkCap = 16;
  r.chunks = zalloc(16 * sizeof<usize>());
  return r;
}

export function recordsFree(r: Records): void {
  for (let id: u32 = 0; id < r.high; id++) {
    const p = rec(r, id);
    if (load<u32>(p, 8) > 2 && r.words > 1) heap.free(<usize>load<u32>(p, 16));
  }
  for (let c: u32 = 0; c < r.chunkCount; c++) heap.free(load<usize>(r.chunks + (<usize>c << 2)));
  heap.free(r.chunks);
  heap.free(r.tab);
  heap.free(changetype<usize>(r));
}

export function recordsBytes(r: Records): usize {
  return <usize>r.chunkCount * heapSize(REC << CHUNK_LOG2)
    + heapSize(<usize>r.chunkCap << 2) + heapSize(<usize>r.tabCap << 3) + r.setBytes + heapSize(offsetof<Records>());
}

// @ts-ignore: decorator
@inline export function rec(r: Records, id: u32): usize {
  return load<usize>(r.chunks + (<usize>(id >> CHUNK_LOG2) << 2)) + <usize>(id & CHUNK_MASK) * REC;
}

// ---- id table ---------------------------------------------------------------

/** The id of the block `key`, or -1. */
export function blockFind(r: Records, key: u64): i32 {
  const cap = <usize>r.tabCap;
  const tag = mixOf(key);
  let i = mixHome(tag, cap);
  while (true) {
    const b = load<u64>(r.tab + (i << 3));
    if (b == 0) return -1;
    if (<u32>(b >> 32) == tag) {
      const id = <u32>b - 1;
      if (load<u64>(rec(r, id)) == key) return <i32>id;
    }
    i = i + 1 == cap ? 0 : i + 1;
  }
  return -1;
}

/** Places bucket `b` (id + 1 | mix << 32) in its home or the first free bucket after it. */
function tabPlace(r: Records, b: u64): void {
  const cap = <usize>r.tabCap;
  let i = mixHome(<u32>(b >> 32), cap);
  while (load<u64>(r.tab + (i << 3)) != 0) i = i + 1 == cap ? 0 : i + 1;
  store<u64>(r.tab + (i << 3), b);
}

function tabGrow(r: Records): void {
  const old = r.tab;
  const oldCap = <usize>r.tabCap;
  const cap = grownCap(oldCap);
  r.tab = zalloc(cap << 3);
  r.tabCap = <u32>cap;
  for (let j: usize = 0; j < oldCap; j++) {
    const b = load<u64>(old + (j << 3));
    if (b != 0) tabPlace(r, b);
  }
  heap.free(old);
}

function newId(r: Records): u32 {
  if (r.freeHead != 0) {
    const id = r.freeHead - 1;
    r.freeHead = load<u32>(rec(r, id), 16);
    return id;
  }
  if ((r.high & CHUNK_MASK) == 0) {
    if (r.chunkCount == r.chunkCap) {
      const p = zalloc(<usize>r.chunkCap << 3);
      memory.copy(p, r.chunks, <usize>r.chunkCap << 2);
      heap.free(r.chunks);
      r.chunks = p;
      r.chunkCap <<= 1;
    }
    store<usize>(r.chunks + (<usize>r.chunkCount << 2), alloc(REC << CHUNK_LOG2));
    r.chunkCount++;
  }
  return r.high++;
}

/** The id of block `key`, created with no holders (stamped `stamp`) if absent. */
export function blockUpsert(r: Records, key: u64, stamp: u32): u32 {
  const found = blockFind(r, key);
  if (found >= 0) return <u32>found;
  if (overLoad(r.live, r.tabCap)) tabGrow(r);
  const id = newId(r);
  const p = rec(r, id);
  store<u64>(p, key);
  store<u32>(p, 0, 8);
  store<u32>(p, stamp, 12);
  store<u64>(p, 0, 16);
  tabPlace(r, (<u64>mixOf(key) << 32) | <u64>(id + 1));
  r.live++;
  return id;
}

/** Deletes block `id` (no holders left) from the id table and frees its record. */
export function blockDelete(r: Records, id: u32): void {
  const key = load<u64>(rec(r, id));
  const cap = <usize>r.tabCap;
  let hole = bucketOf(key, cap);
  while (<u32>load<u64>(r.tab + (hole << 3)) != id + 1) hole = hole + 1 == cap ? 0 : hole + 1;
  let j = hole;
  while (true) {
    j = j + 1 == cap ? 0 : j + 1;
    const b = load<u64>(r.tab + (j << 3));
    if (b == 0) break;
    const k = mixHome(<u32>(b >> 32), cap);
    // Move bucket j into the hole unless its home lies cyclically in (hole, j].
    const inRange = hole <= j ? (k > hole && k <= j) : (k > hole || k <= j);
    if (!inRange) {
      store<u64>(r.tab + (hole << 3), b);
      hole = j;
    }
  }
  store<u64>(r.tab + (hole << 3), 0);
  const p = rec(r, id);
  store<u32>(p, 0, 8);
  store<u32>(p, r.freeHead, 16);
  r.freeHead = id + 1;
  r.live--;
}

// ---- a record's holders ---------------------------------------------------------

// @ts-ignore: decorator
@inline function listBytes(cap: u32): usize { return heapSize(4 + (<usize>cap << 2)); }
// @ts-ignore: decorator
@inline function bitsBytes(words: u32): usize { return heapSize(8 + (<usize>words << 3)); }

function listAlloc(r: Records, cap: u32): usize {
  const l = alloc(4 + (<usize>cap << 2));
  store<u32>(l, cap);
  r.setBytes += listBytes(cap);
  return l;
}

function listFree(r: Records, l: usize): void {
  r.setBytes -= listBytes(load<u32>(l));
  heap.free(l);
}

function bitsAlloc(r: Records, words: u32): usize {
  const b = zalloc(8 + (<usize>words << 3));
  store<u32>(b, words);
  r.setBytes += bitsBytes(words);
  return b;
}

function bitsFree(r: Records, b: usize): void {
  r.setBytes -= bitsBytes(load<u32>(b));
  heap.free(b);
}

/** Index of the first list element >= slot (binary search over `n` sorted u32s at `l + 4`). */
function lowerBound(l: usize, n: u32, slot: u32): u32 {
  let lo: u32 = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (load<u32>(l + 4 + (<usize>mid << 2)) < slot) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** True when record `p` lists `slot` among its holders. */
export function holds(r: Records, p: usize, slot: u32): bool {
  const refs = load<u32>(p, 8);
  if (refs <= 2) return (refs > 0 && load<u32>(p, 16) == slot) || (refs == 2 && load<u32>(p, 20) == slot);
  if (r.words == 1) return slot < 64 && (load<u64>(p, 16) & (<u64>1 << <u64>slot)) != 0;
  const s = <usize>load<u32>(p, 16);
  if (load<u32>(p, 20) != MODE_LIST) {
    if ((slot >> 6) >= load<u32>(s)) return false;
    return (load<u64>(s + 8 + (<usize>(slot >> 6) << 3)) & (<u64>1 << (<u64>slot & 63))) != 0;
  }
  const i = lowerBound(s, refs, slot);
  return i < refs && load<u32>(s + 4 + (<usize>i << 2)) == slot;
}

function listToBits(r: Records, l: usize, n: u32, slot: u32): usize {
  const words = max<u32>(r.words, (slot >> 6) + 1);
  const b = bitsAlloc(r, words);
  for (let i: u32 = 0; i < n; i++) {
    const s = load<u32>(l + 4 + (<usize>i << 2));
    const w = b + 8 + (<usize>(s >> 6) << 3);
    store<u64>(w, load<u64>(w) | (<u64>1 << (<u64>s & 63)));
  }
  listFree(r, l);
  return b;
}

function addToList(r: Records, p: usize, refs: u32, slot: u32): void {
  let l = <usize>load<u32>(p, 16);
  const i = lowerBound(l, refs, slot);
  if (refs + 1 > (r.words << 1)) {
    // The list would outgrow a bitset of every slot: widen.
    const b = listToBits(r, l, refs, slot);
    store<u32>(p, <u32>b, 16);
    store<u32>(p, MODE_BITS, 20);
    addToBits(r, p, slot);
    return;
  }
  const cap = load<u32>(l);
  if (refs == cap) {
    const nl = listAlloc(r, cap << 1);
    memory.copy(nl + 4, l + 4, <usize>refs << 2);
    listFree(r, l);
    l = nl;
    store<u32>(p, <u32>l, 16);
  }
  const at = l + 4 + (<usize>i << 2);
  memory.copy(at + 4, at, <usize>(refs - i) << 2);
  store<u32>(at, slot);
}

function addToBits(r: Records, p: usize, slot: u32): void {
  let b = <usize>load<u32>(p, 16);
  const words = load<u32>(b);
  if ((slot >> 6) >= words) {
    const nb = bitsAlloc(r, max<u32>(r.words, (slot >> 6) + 1));
    memory.copy(nb + 8, b + 8, <usize>words << 3);
    bitsFree(r, b);
    b = nb;
    store<u32>(p, <u32>b, 16);
  }
  const w = b + 8 + (<usize>(slot >> 6) << 3);
  store<u64>(w, load<u64>(w) | (<u64>1 << (<u64>slot & 63)));
}

/** Adds `slot` to block `id`'s holders; false when it already held it. */
export function holderAdd(r: Records, id: u32, slot: u32): bool {
  const p = rec(r, id);
  if (holds(r, p, slot)) return false;
  const refs = load<u32>(p, 8);
  if (r.words == 1 && refs >= 2) {
    const mask = refs == 2 ? (<u64>1 << <u64>load<u32>(p, 16)) | (<u64>1 << <u64>load<u32>(p, 20)) : load<u64>(p, 16);
    store<u64>(p, mask | (<u64>1 << <u64>slot), 16);
  } else if (refs == 0) {
    store<u32>(p, slot, 16);
  } else if (refs == 1) {
    const a = load<u32>(p, 16);
    store<u32>(p, min<u32>(a, slot), 16);
    store<u32>(p, max<u32>(a, slot), 20);
  } else if (refs == 2) {
    const l = listAlloc(r, 4);
    store<u32>(l + 4, load<u32>(p, 16));
    store<u32>(l + 8, load<u32>(p, 20));
    store<u32>(p, <u32>l, 16);
    store<u32>(p, MODE_LIST, 20);
    addToList(r, p, 2, slot);
  } else if (load<u32>(p, 20) == MODE_LIST) {
    addToList(r, p, refs, slot);
  } else {
    addToBits(r, p, slot);
  }
  store<u32>(p, refs + 1, 8);
  refreshSame(r, id);
  return true;
}

/** Record `p`'s holder bitset allocation, or 0 when its holders are a pair, a list or the inline word. */
// @ts-ignore: decorator
@inline function bitsOf(r: Records, p: usize): usize {
  return r.words > 1 && load<u32>(p, 8) > 2 && load<u32>(p, 20) != MODE_LIST ? <usize>load<u32>(p, 16) : 0;
}

/**
 * How record `id`'s holders (a bitset) follow the previous record's (its mode word, see the layout above):
 * SAME when equal, DROP1 with the slot when they are the previous record's less one slot, else neither.
 */
function sameAsBefore(r: Records, id: u32): void {
  if (id == 0 || id >= r.high) return;
  const p = rec(r, id);
  const b = bitsOf(r, p);
  if (b == 0) return;
  const q = rec(r, id - 1);
  const a = bitsOf(r, q);
  const words = load<u32>(b);
  const refs = load<u32>(p, 8);
  const before = load<u32>(q, 8);
  let mode = MODE_BITS;
  // The counts tell which relation is possible: most changes make neither, and skip the words.
  if (a != 0 && load<u32>(a) == words && (before == refs || before == refs + 1)) {
    let ok = true;
    let dropped: u32 = 0;
    for (let w: u32 = 0; ok && w < words; w++) {
      const x = load<u64>(a + 8 + (<usize>w << 3));
      const y = load<u64>(b + 8 + (<usize>w << 3));
      ok = (y & ~x) == 0; // this record's holders are among the previous one's
      if (x != y) dropped = (w << 6) + <u32>ctz<u64>(x ^ y);
    }
    // Equal counts and a subset: equal. One fewer and a subset: exactly `dropped` is missing.
    if (ok) mode = before == refs ? MODE_BITS | SAME : MODE_BITS | DROP1 | (dropped << DROP_SHIFT);
  }
  store<u32>(p, mode, 20);
}

/** Block `id`'s holders changed: refreshes the `same` flags that compare with them (its own and the next record's). */
function refreshSame(r: Records, id: u32): void {
  if (r.words == 1) return;
  sameAsBefore(r, id);
  sameAsBefore(r, id + 1);
}

/** Writes record `p`'s holders, ascending, to `out` (u32s); returns their count. */
export function holdersTo(r: Records, p: usize, out: usize): u32 {
  const refs = load<u32>(p, 8);
  if (refs <= 2) {
    if (refs > 0) store<u32>(out, load<u32>(p, 16));
    if (refs > 1) store<u32>(out, load<u32>(p, 20), 4);
    return refs;
  }
  if (r.words == 1) return bitsTo(load<u64>(p, 16), 0, out, 0);
  const s = <usize>load<u32>(p, 16);
  if (load<u32>(p, 20) == MODE_LIST) {
    memory.copy(out, s + 4, <usize>refs << 2);
    return refs;
  }
  const words = load<u32>(s);
  let n: u32 = 0;
  for (let w: u32 = 0; w < words; w++) n = bitsTo(load<u64>(s + 8 + (<usize>w << 3)), w, out, n);
  return n;
}

/** Appends the slots of word `w` of a bitset to `out` from position `n`; returns the new count. */
function bitsTo(word: u64, w: u32, out: usize, n: u32): u32 {
  let bits = word;
  while (bits != 0) {
    store<u32>(out + (<usize>n << 2), (w << 6) + <u32>ctz<u64>(bits));
    n++;
    bits &= bits - 1;
  }
  return n;
}

/**
 * Slot ids reach 64: every record's one-word inline bitset moves to an
 * allocation (a list, or a bitset of `words` when most slots hold it). Once per index.
 */
export function widenRecords(r: Records, words: u32): void {
  if (r.words > 1 || words == 1) { r.words = max<u32>(r.words, words); return; }
  const tmp = memory.data(256);
  for (let id: u32 = 0; id < r.high; id++) {
    const p = rec(r, id);
    const refs = load<u32>(p, 8);
    if (refs <= 2) continue;
    const n = bitsTo(load<u64>(p, 16), 0, tmp, 0);
    if (refs > (words << 1)) {
      const b = bitsAlloc(r, words);
      store<u64>(b + 8, load<u64>(p, 16));
      store<u32>(p, <u32>b, 16);
      store<u32>(p, MODE_BITS, 20);
    } else {
      const l = listAlloc(r, refs + (refs >> 1) + 1);
      memory.copy(l + 4, tmp, <usize>n << 2);
      store<u32>(p, <u32>l, 16);
      store<u32>(p, MODE_LIST, 20);
    }
  }
  r.words = words;
  for (let id: u32 = 1; id < r.high; id++) sameAsBefore(r, id);
}

/** Narrows a set of more than two holders to a list or inline pair once it is small. */
function narrow(r: Records, p: usize, refs: u32): void {
  const s = <usize>load<u32>(p, 16);
  const isBits = load<u32>(p, 20) != MODE_LIST;
  if (refs == 2) {
    const tmp = memory.data(8);
    if (isBits) holdersTo(r, p, tmp);
    else memory.copy(tmp, s + 4, 8);
    store<u32>(p, load<u32>(tmp), 16);
    store<u32>(p, load<u32>(tmp, 4), 20);
    if (isBits) bitsFree(r, s);
    else listFree(r, s);
  } else if (isBits && refs < r.words) {
    const l = listAlloc(r, refs + (refs >> 1) + 1);
    holdersTo(r, p, l + 4);
    bitsFree(r, s);
    store<u32>(p, <u32>l, 16);
    store<u32>(p, MODE_LIST, 20);
  }
  store<u32>(p, refs, 8);
}

/**
 * Removes `slot` from block `id`'s holders (deleting the block when none is
 * left); false when it did not hold it.
 */
export function holderDrop(r: Records, id: u32, slot: u32): bool {
  const p = rec(r, id);
  if (!holds(r, p, slot)) return false;
  const refs = load<u32>(p, 8) - 1;
  if (refs < 2) {
    if (refs == 1 && load<u32>(p, 16) == slot) store<u32>(p, load<u32>(p, 20), 16);
    store<u32>(p, refs, 8);
    if (refs == 0) blockDelete(r, id);
    refreshSame(r, id);
    return true;
  }
  if (r.words == 1) {
    const mask = load<u64>(p, 16) & ~(<u64>1 << <u64>slot);
    if (refs == 2) {
      store<u32>(p, <u32>ctz<u64>(mask), 16);
      store<u32>(p, 63 - <u32>clz<u64>(mask), 20);
    } else {
      store<u64>(p, mask, 16);
    }
    store<u32>(p, refs, 8);
    return true;
  }
  const s = <usize>load<u32>(p, 16);
  if (load<u32>(p, 20) != MODE_LIST) {
    const w = s + 8 + (<usize>(slot >> 6) << 3);
    store<u64>(w, load<u64>(w) & ~(<u64>1 << (<u64>slot & 63)));
  } else {
    const i = lowerBound(s, refs + 1, slot);
    const at = s + 4 + (<usize>i << 2);
    memory.copy(at, at + 4, <usize>(refs - i) << 2);
  }
  narrow(r, p, refs);
  refreshSame(r, id);
  return true;
}

/**
 * The stamp at or below which about `want` live blocks lie (a 256-bucket
 * histogram of the stamps from the oldest to `now`): the cutoff of one eviction round.
 */
export function stampCutoff(r: Records, want: u32, now: u32): u32 {
  let oldest: u32 = now;
  for (let id: u32 = 0; id < r.high; id++) {
    const p = rec(r, id);
    if (load<u32>(p, 8) != 0) oldest = min<u32>(oldest, load<u32>(p, 12));
  }
  const width = ((now - oldest) >> 8) + 1;
  const hist = memory.data(256 * 4);
  memory.fill(hist, 0, 256 * 4);
  for (let id: u32 = 0; id < r.high; id++) {
    const p = rec(r, id);
    if (load<u32>(p, 8) == 0) continue;
    const b = <usize>((load<u32>(p, 12) - oldest) / width);
    store<u32>(hist + (b << 2), load<u32>(hist + (b << 2)) + 1);
  }
  let seen: u32 = 0;
  for (let b: u32 = 0; b < 256; b++) {
    seen += load<u32>(hist + (<usize>b << 2));
    if (seen >= want) return oldest + (b + 1) * width - 1;
  }
  return now;
}

/** Halves every live block's stamp and returns `now` halved. */
export function halveStamps(r: Records, now: u32): u32 {
  for (let id: u32 = 0; id < r.high; id++) {
    const p = rec(r, id);
    if (load<u32>(p, 8) != 0) store<u32>(p, load<u32>(p, 12) >> 1, 12);
  }
  return now >> 1;
}
