// The in-flight prompt trie's two hash tables (prompt_trie.ts): the children of its wide nodes, keyed by
// (parent, first block's hash), and the (node, slot) pairs holding a node through two or more sources, with
// their count. One layout for both: open addressing with linear probing over 16-byte entries
// (a + 1 u32, 0: empty | b u32 | c u32 | value u32), at most three quarters full, a power of two of them.
// Deletion shifts the later entries of a run back (no tombstones), so a table that churns keeps its probes short.
//
// Allocation only in `tableReserve` (the trie reserves before it changes anything, so a failed allocation
// leaves it as it was): `tablePut` and `tableDelete` never allocate.
import { alloc } from './block_records';

const ENTRY: usize = 16;

@unmanaged
export class Table {
  tab: usize = 0;
  mask: u32 = 0;
  size: u32 = 0;
}

/** Where the key's probe starts: its words mixed (murmur3's finaliser), then masked. */
// @ts-ignore: decorator
@inline function home(a: u32, b: u32, c: u32, mask: u32): u32 {
  let h = (a * 0x9e3779b1) ^ b;
  h = (h ^ (h >>> 16)) * 0x85ebca6b;
  h ^= c;
  h = (h ^ (h >>> 13)) * 0xc2b2ae35;
  return (h ^ (h >>> 16)) & mask;
}

function zeroed(entries: u32): usize {
  const bytes = <usize>entries * ENTRY;
  const p = alloc(bytes);
  memory.fill(p, 0, bytes);
  return p;
}

export function tableNew(entries: u32): Table {
  const t = changetype<Table>(alloc(offsetof<Table>()));
  t.tab = 0;
  t.size = 0;
  t.mask = 0;
  t.tab = zeroed(entries);
  t.mask = entries - 1;
  return t;
}

export function tableFree(t: Table): void {
  heap.free(t.tab);
  heap.free(changetype<usize>(t));
}

/** The entry of key (a, b, c), or 0. `a` is stored plus one: any u32 below 2^32 - 1. */
export function tableFind(t: Table, a: u32, b: u32, c: u32): usize {
  const tab = t.tab;
  const mask = t.mask;
  const a1 = a + 1;
  for (let i = home(a, b, c, mask); ; i = (i + 1) & mask) {
    const e = tab + (<usize>i << 4);
    const k = load<u32>(e);
    if (k == 0) return 0;
    if (k == a1 && load<u32>(e, 4) == b && load<u32>(e, 8) == c) return e;
  }
  return 0;
}

/** The value of an entry `tableFind` gave. */
// @ts-ignore: decorator
@inline export function entryValue(e: usize): u32 { return load<u32>(e, 12); }
// @ts-ignore: decorator
@inline export function setEntryValue(e: usize, v: u32): void { store<u32>(e, v, 12); }

/** Files a key that is not in the table (room for it reserved). */
export function tablePut(t: Table, a: u32, b: u32, c: u32, v: u32): void {
  const tab = t.tab;
  const mask = t.mask;
  let i = home(a, b, c, mask);
  while (load<u32>(tab + (<usize>i << 4)) != 0) i = (i + 1) & mask;
  const e = tab + (<usize>i << 4);
  store<u32>(e, a + 1);
  store<u32>(e, b, 4);
  store<u32>(e, c, 8);
  store<u32>(e, v, 12);
  t.size++;
}

/** Empties entry `e`, moving back each later entry of its run that would no longer be found. */
export function tableDelete(t: Table, e: usize): void {
  const tab = t.tab;
  const mask = t.mask;
  let hole = <u32>((e - tab) >> 4);
  for (let j = (hole + 1) & mask; load<u32>(tab + (<usize>j << 4)) != 0; j = (j + 1) & mask) {
    const o = tab + (<usize>j << 4);
    const h = home(load<u32>(o) - 1, load<u32>(o, 4), load<u32>(o, 8), mask);
    // The entry at j may fill the hole if its home is not in (hole, j] (cyclically).
    const stays = hole <= j ? hole < h && h <= j : hole < h || h <= j;
    if (stays) continue;
    memory.copy(tab + (<usize>hole << 4), o, ENTRY);
    hole = j;
  }
  memory.fill(tab + (<usize>hole << 4), 0, ENTRY);
  t.size--;
}

/** Makes room for `extra` more keys. The only call that allocates; a failure leaves the table as it was. */
export function tableReserve(t: Table, extra: u32): void {
  let entries = t.mask + 1;
  const need = <u64>t.size + extra;
  if (need * 4 <= <u64>entries * 3) return;
  while (need * 4 > <u64>entries * 3) entries <<= 1;
  const tab = zeroed(entries);
  const old = t.tab;
  const oldEntries = t.mask + 1;
  t.tab = tab;
  t.mask = entries - 1;
  t.size = 0;
  for (let i: u32 = 0; i < oldEntries; i++) {
    const o = old + (<usize>i << 4);
    if (load<u32>(o) != 0) tablePut(t, load<u32>(o) - 1, load<u32>(o, 4), load<u32>(o, 8), load<u32>(o, 12));
  }
  heap.free(old);
}

/** Heap bytes the table holds. */
export function tableBytes(t: Table): usize {
  return (<usize>t.mask + 1) * ENTRY;
}
