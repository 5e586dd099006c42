// The prompts of in-flight requests as a compressed trie over chained block hashes, with the slots holding
// each node: the router's load bookkeeping (src/wasm/active-prompt-trie.ts is its host side, and says what it
// answers). Here: the layout, and how each operation is one call.
//
// Chained sequence hashes make a prompt's blocks prefix-closed: two prompts that agree on block i agree on
// every block before it. So an edge is a run of blocks [start, end) every prompt below it shares, kept as a
// reference to one such prompt (`rep`: a refcounted copy of its hashes, shared by every node that refers to
// it), and comparing a prompt with an edge is one comparison of its last block (a whole edge matches iff that
// does) or a binary search for the first differing block. Slot s holds blocks [0, end) of a node iff a
// request of s passes through it: the node's `holds` bit set. A slot's sources at a node are its requests
// ending there and the node's children it holds; two or more sources set a `multi` bit and count in the
// (node, slot) table. A booking adds a source at its end node and climbs only while nodes newly hold the
// slot; a free climbs back while nodes lose their last source.
//
// Layout: node n is record n (`STRIDE` bytes) of one pool, which also holds the walk (a node id per node),
// every node's bit sets (`2 * words` u32), the depth query's seen set and its (slot, depth) output:
//   pool: | records[cap] | walk[cap] | bits[cap][2 * words] | seen[words] | out[32 * words][2] |
// Node 0 is the root; 0 as a child, sibling or parent means none. A node's children are a doubly linked
// list (`KID`, `NEXT`, `PREV`); past LIST_MAX of them they are also filed in the children table, keyed by
// (parent, first block's hash), until they drop to LIST_MAX / 2. Freed nodes are reused (a free list
// through `NEXT`).
//
// Memory: every allocation is made before anything changes (`reserve`), through block_records' `alloc` (the
// test hook's), so one that fails (an exhausted memory traps) leaves the trie as it was; the host turns the
// trap into a typed error. Removing never allocates.
import { alloc } from './block_records';
import {
  Table, tableNew, tableFree, tableFind, tablePut, tableDelete, tableReserve, tableBytes, entryValue, setEntryValue,
} from './trie_tables';

// Byte offsets in a record (64 bytes, one cache line; what a walk reads is in its first 40).
export const START: usize = 0;
export const END: usize = 4;
/** The edge's last block's hash (`end - 1`, which never changes for a node). */
export const LAST: usize = 8;
/** The edge's first block's hash, kept in step with `start`. */
export const FIRST: usize = 16;
export const KIDS: usize = 24;
export const KID: usize = 28;
/** The next sibling; a free node's next free one. */
const NEXT: usize = 32;
export const MAPPED: usize = 36;
/** How many slots hold the node (its `holds` set's size). */
export const WIDTH: usize = 40;
/** Requests in this subtree. */
export const TOTAL: usize = 44;
/** Requests whose prompt ends exactly at `end`. */
export const ENDS: usize = 48;
const PREV: usize = 52;
export const PARENT: usize = 56;
/** The prompt copy (`rep`): refs u32 @0, hashes u64[] @8. */
export const REP: usize = 60;
const STRIDE_LOG2: u32 = 6;

export const ROOT: u32 = 0;
/** A node keeps its children in its list alone up to this many, in the children table too beyond. */
export const LIST_MAX: u32 = 8;

// The fields before `recs` are read by the host (src/wasm/active-prompt-trie.ts: Q, OUT, LAST_END): keep them.
@unmanaged
export class Trie {
  q: usize = 0;           // the query's hashes, u64[qCap]: what every call taking a prompt reads
  qCap: u32 = 0;
  out: usize = 0;         // (slot, depth) u32 pairs the depth query writes
  lastEnd: u32 = 0;       // the node the last insert ended its prompt on
  recs: usize = 0;        // the pool (see above)
  walk: usize = 0;
  bits: usize = 0;
  seen: usize = 0;
  cap: u32 = 0;           // records in the pool
  words: u32 = 0;         // u32 words a bit set of slots takes
  used: u32 = 0;          // records ever handed out, the root included
  free: u32 = 0;          // first free record (0: none)
  freeCount: u32 = 0;
  live: u32 = 0;          // nodes in use, the root included
  walkLen: u32 = 0;       // nodes of the last walk (every change forgets it)
  kids: Table = changetype<Table>(0);
  counts: Table = changetype<Table>(0);
  spare: usize = 0;       // a prompt copy reserved for the insert in progress
  spareCap: u32 = 0;
}

// ---- records -----------------------------------------------------------------

// @ts-ignore: decorator
@inline export function rp(t: Trie, node: u32): usize { return t.recs + (<usize>node << STRIDE_LOG2); }
// @ts-ignore: decorator
@inline export function get(t: Trie, node: u32, f: usize): u32 { return load<u32>(rp(t, node) + f); }
// @ts-ignore: decorator
@inline export function put(t: Trie, node: u32, f: usize, v: u32): void { store<u32>(rp(t, node) + f, v); }
// @ts-ignore: decorator
@inline export function add(t: Trie, node: u32, f: usize, by: i32): void {
  const p = rp(t, node) + f;
  store<u32>(p, load<u32>(p) + by);
}
// @ts-ignore: decorator
@inline export function hashAt(base: usize, i: u32): u64 { return load<u64>(base + (<usize>i << 3)); }
// @ts-ignore: decorator
@inline export function repHashes(t: Trie, node: u32): usize { return <usize>get(t, node, REP) + 8; }
// @ts-ignore: decorator
@inline export function walkAt(t: Trie, i: u32): u32 { return load<u32>(t.walk + (<usize>i << 2)); }
// @ts-ignore: decorator
@inline export function setWalk(t: Trie, i: u32, node: u32): void { store<u32>(t.walk + (<usize>i << 2), node); }

// ---- bit sets of slots ---------------------------------------------------------------

// @ts-ignore: decorator
@inline function bitWord(t: Trie, node: u32, multi: bool, slot: u32): usize {
  return t.bits + ((<usize>node * 2 * t.words + (multi ? <usize>t.words : 0) + (slot >> 5)) << 2);
}
// @ts-ignore: decorator
@inline export function bit(t: Trie, node: u32, multi: bool, slot: u32): bool {
  return (load<u32>(bitWord(t, node, multi, slot)) & (1 << (slot & 31))) != 0;
}
export function setBit(t: Trie, node: u32, multi: bool, slot: u32, on: bool): void {
  const w = bitWord(t, node, multi, slot);
  const b: u32 = 1 << (slot & 31);
  store<u32>(w, on ? load<u32>(w) | b : load<u32>(w) & ~b);
}

// ---- the pool ----------------------------------------------------------------

function poolBytes(cap: u32, words: u32): usize {
  return (<usize>cap << STRIDE_LOG2) + (<usize>cap << 2) + ((<usize>cap * 2 * words) << 2) + (<usize>words << 2)
    + (<usize>words << 8);
}

/** Re-lays the pool out for `cap` records and bit sets of `words`: allocates first, so a failure changes nothing. */
function relayout(t: Trie, cap: u32, words: u32): void {
  const bytes = poolBytes(cap, words);
  const p = alloc(bytes);
  memory.fill(p, 0, bytes);
  const old = t.recs;
  const recs = p;
  const walk = recs + (<usize>cap << STRIDE_LOG2);
  const bits = walk + (<usize>cap << 2);
  const seen = bits + ((<usize>cap * 2 * words) << 2);
  if (old != 0) {
    memory.copy(recs, old, <usize>t.cap << STRIDE_LOG2);
    memory.copy(walk, t.walk, <usize>t.cap << 2);
    const ow = <usize>t.words << 2;
    for (let n: u32 = 0; n < t.used; n++) {
      const from = t.bits + <usize>n * 2 * ow;
      const to = bits + ((<usize>n * 2 * words) << 2);
      memory.copy(to, from, ow);
      memory.copy(to + (<usize>words << 2), from + ow, ow);
    }
  }
  t.recs = recs;
  t.walk = walk;
  t.bits = bits;
  t.seen = seen;
  t.out = seen + (<usize>words << 2);
  t.cap = cap;
  t.words = words;
  if (old != 0) heap.free(old);
}

export function trieNew(): Trie {
  const t = changetype<Trie>(alloc(offsetof<Trie>()));
  memory.fill(changetype<usize>(t), 0, offsetof<Trie>());
  t.kids = tableNew(16);
  t.counts = tableNew(64);
  relayout(t, 64, 1);
  t.used = 1;
  t.live = 1;
  return t;
}

export function trieFree(t: Trie): void {
  for (let n: u32 = 1; n < t.used; n++) {
    const rep = <usize>get(t, n, REP);
    if (rep != 0) dropRep(rep);
  }
  heap.free(t.recs);
  tableFree(t.kids);
  tableFree(t.counts);
  if (t.q != 0) heap.free(t.q);
  if (t.spare != 0) heap.free(t.spare);
  heap.free(changetype<usize>(t));
}

/** Heap bytes the trie holds, its prompt copies aside. */
export function trieBytes(t: Trie): usize {
  return poolBytes(t.cap, t.words) + tableBytes(t.kids) + tableBytes(t.counts) + (<usize>t.qCap << 3);
}

/** The query region, room for `n` hashes: its address (it moves when it grows; what it held is lost). */
export function trieQuery(t: Trie, n: u32): usize {
  if (n > t.qCap) {
    // Forgotten before the allocation: one that fails must leave no freed region to free again.
    if (t.q != 0) heap.free(t.q);
    t.q = 0;
    t.qCap = 0;
    const cap = max<u32>(n, 512);
    t.q = alloc(<usize>cap << 3);
    t.qCap = cap;
  }
  return t.q;
}

function dropRep(rep: usize): void {
  const refs = load<u32>(rep) - 1;
  if (refs == 0) heap.free(rep);
  else store<u32>(rep, refs);
}

/**
 * Everything an insert of `n` blocks on `slot` may allocate: two records, the slot's bits, room in both tables,
 * and (`copy`) the prompt's copy, `spare`. Nothing else changes.
 */
export function reserve(t: Trie, slot: u32, n: u32, copy: bool): void {
  const words = slot >= 32 * t.words ? max<u32>(t.words * 2, (slot >> 5) + 1) : t.words;
  const room = t.freeCount + (t.cap - t.used);
  if (room < 2 || words != t.words) relayout(t, room < 2 ? t.cap * 2 : t.cap, words);
  tableReserve(t.kids, LIST_MAX + 1);
  tableReserve(t.counts, 1);
  if (copy && n > t.spareCap) {
    if (t.spare != 0) heap.free(t.spare);
    t.spare = 0;
    t.spareCap = 0;
    t.spare = alloc(8 + (<usize>n << 3));
    t.spareCap = n;
  }
}

/** A new node for the edge [start, end) of the prompt copy `rep` under `parent`, not yet filed there. */
export function newNode(t: Trie, start: u32, end: u32, rep: usize, parent: u32): u32 {
  let node = t.free;
  if (node != 0) {
    t.free = get(t, node, NEXT);
    t.freeCount--;
  } else {
    node = t.used++;
  }
  t.live++;
  const p = rp(t, node);
  memory.fill(p, 0, 1 << STRIDE_LOG2);
  store<u32>(p + END, end);
  store<u32>(p + PARENT, parent);
  store<u32>(p + REP, <u32>rep);
  store<u32>(rep, load<u32>(rep) + 1);
  if (end > 0) store<u64>(p + LAST, hashAt(rep + 8, end - 1));
  setStart(t, node, start);
  return node;
}

/** Returns a node (dropped from its parent, childless or merged away) to the free list; its prompt copy too. */
export function release(t: Trie, node: u32): void {
  const w = <usize>t.words << 3;
  memory.fill(t.bits + <usize>node * w, 0, w);
  dropRep(<usize>get(t, node, REP));
  put(t, node, REP, 0);
  put(t, node, NEXT, t.free);
  t.free = node;
  t.freeCount++;
  t.live--;
}

export function setStart(t: Trie, node: u32, start: u32): void {
  put(t, node, START, start);
  if (get(t, node, END) > start) store<u64>(rp(t, node) + FIRST, hashAt(repHashes(t, node), start));
}

// ---- children ------------------------------------------------------------------

/** The child of `node` whose first block's hash is `h`, or 0. */
export function childAt(t: Trie, node: u32, h: u64): u32 {
  if (get(t, node, MAPPED) != 0) {
    const e = tableFind(t.kids, node, <u32>h, <u32>(h >> 32));
    return e == 0 ? 0 : entryValue(e);
  }
  let c = get(t, node, KID);
  while (c != 0) {
    if (load<u64>(rp(t, c) + FIRST) == h) return c;
    c = get(t, c, NEXT);
  }
  return 0;
}

function fileChild(t: Trie, parent: u32, child: u32): void {
  const h = load<u64>(rp(t, child) + FIRST);
  tablePut(t.kids, parent, <u32>h, <u32>(h >> 32), child);
}

function unfileChild(t: Trie, parent: u32, child: u32): void {
  const h = load<u64>(rp(t, child) + FIRST);
  tableDelete(t.kids, tableFind(t.kids, parent, <u32>h, <u32>(h >> 32)));
}

/** Files `child` (its record complete) among `parent`'s children: after the eldest, which a list walk meets first. */
export function addChild(t: Trie, parent: u32, child: u32): void {
  const kids = get(t, parent, KIDS) + 1;
  put(t, parent, KIDS, kids);
  const head = get(t, parent, KID);
  put(t, child, PARENT, parent);
  if (head == 0) {
    put(t, parent, KID, child);
    put(t, child, NEXT, 0);
    put(t, child, PREV, 0);
  } else {
    const after = get(t, head, NEXT);
    put(t, child, NEXT, after);
    put(t, child, PREV, head);
    if (after != 0) put(t, after, PREV, child);
    put(t, head, NEXT, child);
  }
  if (get(t, parent, MAPPED) != 0) fileChild(t, parent, child);
  else if (kids > LIST_MAX) {
    for (let c = get(t, parent, KID); c != 0; c = get(t, c, NEXT)) fileChild(t, parent, c);
    put(t, parent, MAPPED, 1);
  }
}

/** Puts `by` where `old` is among `parent`'s children (both begin with the same block). */
export function replaceChild(t: Trie, parent: u32, old: u32, by: u32): void {
  const prev = get(t, old, PREV);
  const next = get(t, old, NEXT);
  put(t, by, PREV, prev);
  put(t, by, NEXT, next);
  if (prev == 0) put(t, parent, KID, by);
  else put(t, prev, NEXT, by);
  if (next != 0) put(t, next, PREV, by);
  put(t, old, PREV, 0);
  put(t, old, NEXT, 0);
  if (get(t, parent, MAPPED) != 0) {
    const h = load<u64>(rp(t, old) + FIRST);
    setEntryValue(tableFind(t.kids, parent, <u32>h, <u32>(h >> 32)), by);
  }
}

/** Takes `child` out of `parent`'s children; a wide node that shrank to LIST_MAX / 2 leaves the table. */
export function dropChild(t: Trie, parent: u32, child: u32): void {
  const kids = get(t, parent, KIDS) - 1;
  put(t, parent, KIDS, kids);
  if (get(t, parent, MAPPED) != 0) {
    unfileChild(t, parent, child);
    if (kids <= LIST_MAX / 2) {
      for (let c = get(t, parent, KID); c != 0; c = get(t, c, NEXT)) if (c != child) unfileChild(t, parent, c);
      put(t, parent, MAPPED, 0);
    }
  }
  const prev = get(t, child, PREV);
  const next = get(t, child, NEXT);
  if (prev == 0) put(t, parent, KID, next);
  else put(t, prev, NEXT, next);
  if (next != 0) put(t, next, PREV, prev);
  put(t, child, PREV, 0);
  put(t, child, NEXT, 0);
}

// ---- matching ------------------------------------------------------------------

/**
 * The first block in [start + 1, min(end, n)) where the query of `n` blocks leaves the edge of `child` (whose
 * first block it matches), or that bound. A whole-edge match costs one comparison of its last block.
 */
export function edgeMatch(t: Trie, n: u32, child: u32): u32 {
  const p = rp(t, child);
  const end = load<u32>(p + END);
  const q = t.q;
  if (end <= n && hashAt(q, end - 1) == load<u64>(p + LAST)) return end;
  const rep = repHashes(t, child);
  let lo = load<u32>(p + START) + 1;
  let hi = end < n ? end : n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (hashAt(q, mid) == hashAt(rep, mid)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The end node of the query's `n` blocks, or -1 when no prompt in the trie ends there. */
export function endOf(t: Trie, n: u32): i32 {
  let node = ROOT;
  while (get(t, node, END) != n) {
    const at = get(t, node, END);
    if (at > n) return -1;
    node = childAt(t, node, hashAt(t.q, at));
    if (node == 0 || edgeMatch(t, n, node) < min(get(t, node, END), n)) return -1;
  }
  return get(t, node, ENDS) > 0 ? <i32>node : -1;
}
