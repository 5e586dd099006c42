// The in-flight prompt trie's operations (layout and primitives in prompt_trie.ts), each one call from the host.
// A query's hashes are in the trie's query region (`trieQuery`) when it is called.
//
// Walk caching: the last depth query's walk (the nodes whose whole edge the query matched, shallowest first)
// is kept until the trie changes; an insert starts from it when its prompt agrees with the walk's deepest node
// on that node's last block (chained hashes: then on its whole path). The router matches, then books.
import {
  Trie, ROOT, START, END, LAST, KIDS, KID, WIDTH, TOTAL, ENDS, PARENT, REP, rp, get, put, add, hashAt, walkAt,
  setWalk, bit, setBit, reserve, newNode, release, setStart, childAt, addChild, replaceChild, dropChild, edgeMatch,
  endOf,
} from './prompt_trie';
import { tableFind, tablePut, tableDelete, entryValue, setEntryValue } from './trie_tables';

/**
 * For every slot holding a prefix of the query's `n` blocks, writes (slot, prefix length) to `out`, each slot
 * once, deepest node first; returns how many. Keeps the walk for an insert.
 */
export function trieDepths(t: Trie, n: u32): u32 {
  t.walkLen = 0;
  if (n == 0 || get(t, ROOT, KIDS) == 0) return 0;
  const q = t.q;
  let len: u32 = 0;
  let node = ROOT;
  // The node the query leaves inside its edge (at block `k`), if any (0: none).
  let partial: u32 = 0;
  let k: u32 = 0;
  let at: u32 = 0;
  while (at < n && get(t, node, KIDS) > 0) {
    const child = childAt(t, node, hashAt(q, at));
    if (child == 0) break;
    k = edgeMatch(t, n, child);
    if (k < get(t, child, END)) {
      partial = child;
      break;
    }
    setWalk(t, len++, child);
    node = child;
    at = k;
  }
  t.walkLen = len;
  return writeDepths(t, partial, k, len);
}

/**
 * A slot's depth is the end of the deepest node on the walk holding it (`k` inside `partial`). Slot sets only
 * grow towards the root, so a node with as many slots as the one below it holds the same ones and is skipped.
 */
function writeDepths(t: Trie, partial: u32, k: u32, len: u32): u32 {
  const words = t.words;
  const seen = t.seen;
  const out = t.out;
  memory.fill(seen, 0, <usize>words << 2);
  let count: u32 = 0;
  let below: u32 = 0;
  for (let i = <i32>len; i >= 0; i--) {
    const p = i == <i32>len ? partial : walkAt(t, i);
    if (p == 0) continue;
    const width = get(t, p, WIDTH);
    if (width == below) continue;
    below = width;
    const depth = i == <i32>len ? k : get(t, p, END);
    const holds = t.bits + ((<usize>p * 2 * words) << 2);
    for (let w: u32 = 0; w < words; w++) {
      const s = seen + (<usize>w << 2);
      let fresh = load<u32>(holds + (<usize>w << 2)) & ~load<u32>(s);
      if (fresh == 0) continue;
      store<u32>(s, load<u32>(s) | fresh);
      while (fresh != 0) {
        const o = out + (<usize>count << 3);
        store<u32>(o, (w << 5) + ctz(fresh));
        store<u32>(o, depth, 4);
        count++;
        fresh &= fresh - 1;
      }
    }
  }
  return count;
}

/**
 * Adds a request's prompt (the query's `n` blocks) on `slot`; its end node goes to `lastEnd`. Returns how many
 * of its leading blocks the slot already held. Walks (read only), reserves what it may allocate, then changes
 * the trie: a failed allocation changes nothing.
 */
export function trieInsert(t: Trie, n: u32, slot: u32): u32 {
  const q = t.q;
  let len = t.walkLen;
  t.walkLen = 0;
  if (len > 0) {
    const last = walkAt(t, len - 1);
    const end = get(t, last, END);
    if (end > n || hashAt(q, end - 1) != load<u64>(rp(t, last) + LAST)) len = 0;
  }
  let node = len > 0 ? walkAt(t, len - 1) : ROOT;
  let split: u32 = 0;
  let k: u32 = 0;
  let leaf = false;
  while (get(t, node, END) != n) {
    const child = childAt(t, node, hashAt(q, get(t, node, END)));
    if (child == 0) {
      leaf = true;
      break;
    }
    k = edgeMatch(t, n, child);
    if (k < get(t, child, END)) {
      split = child;
      leaf = k < n;
      break;
    }
    setWalk(t, len++, child);
    node = child;
  }
  reserve(t, slot, n, leaf);
  if (split != 0) {
    node = splitAt(t, split, k);
    setWalk(t, len++, node);
  }
  if (leaf) {
    const rep = t.spare;
    t.spare = 0;
    t.spareCap = 0;
    store<u32>(rep, 0);
    memory.copy(rep + 8, q, <usize>n << 3);
    const c = newNode(t, get(t, node, END), n, rep, node);
    addChild(t, node, c);
    setWalk(t, len++, c);
    node = c;
  }
  add(t, ROOT, TOTAL, 1);
  for (let i: u32 = 0; i < len; i++) add(t, walkAt(t, i), TOTAL, 1);
  add(t, node, ENDS, 1);
  t.lastEnd = node;
  return addSource(t, node, slot);
}

/** Splits `child` at block `k` (start < k < end): returns the new upper node, which holds what the child holds. */
function splitAt(t: Trie, child: u32, k: u32): u32 {
  const parent = get(t, child, PARENT);
  const upper = newNode(t, get(t, child, START), k, <usize>get(t, child, REP), parent);
  // Its one source of every slot is `child`: it holds what the child holds, once.
  const w = <usize>t.words << 2;
  memory.copy(t.bits + <usize>upper * 2 * w, t.bits + <usize>child * 2 * w, w);
  put(t, upper, WIDTH, get(t, child, WIDTH));
  put(t, upper, TOTAL, get(t, child, TOTAL));
  replaceChild(t, parent, child, upper);
  setStart(t, child, k);
  addChild(t, upper, child);
  return upper;
}

/**
 * One more source of `slot` at `node`: climbs while nodes newly hold the slot, and counts one more source at
 * the first that held it already. Returns that node's end (0: none), the blocks the slot held before.
 */
function addSource(t: Trie, node: u32, slot: u32): u32 {
  let x = node;
  while (!bit(t, x, false, slot)) {
    setBit(t, x, false, slot, true);
    add(t, x, WIDTH, 1);
    if (x == ROOT) return 0;
    x = get(t, x, PARENT);
  }
  if (bit(t, x, true, slot)) {
    const e = tableFind(t.counts, x, slot, 0);
    setEntryValue(e, entryValue(e) + 1);
  } else {
    setBit(t, x, true, slot, true);
    tablePut(t.counts, x, slot, 0, 2);
  }
  return get(t, x, END);
}

/** One source of `slot` less at `node`: climbs while nodes lose the slot. Returns the blocks it still holds. */
function dropSource(t: Trie, node: u32, slot: u32): u32 {
  let x = node;
  while (!bit(t, x, true, slot)) {
    setBit(t, x, false, slot, false);
    add(t, x, WIDTH, -1);
    if (x == ROOT) return 0;
    x = get(t, x, PARENT);
  }
  const e = tableFind(t.counts, x, slot, 0);
  const c = entryValue(e) - 1;
  if (c == 1) {
    setBit(t, x, true, slot, false);
    tableDelete(t.counts, e);
  } else setEntryValue(e, c);
  return get(t, x, END);
}

/**
 * Removes a prompt of `slot` given the node it ends on (a node some prompt ends on is never split away from its
 * end or merged while that prompt is in). Returns how many of its blocks the slot still holds. Never allocates.
 */
export function trieRemoveAt(t: Trie, end: u32, slot: u32): u32 {
  let len: u32 = 0;
  for (let x = end; x != ROOT; x = get(t, x, PARENT)) setWalk(t, len++, x);
  t.walkLen = 0;
  add(t, ROOT, TOTAL, -1);
  for (let i: u32 = 0; i < len; i++) add(t, walkAt(t, i), TOTAL, -1);
  add(t, end, ENDS, -1);
  const kept = dropSource(t, end, slot);
  // Drop the empty tail of the path (deepest first: each childless by then), then re-compress the deepest survivor.
  let d: u32 = 0;
  while (d < len && get(t, walkAt(t, d), TOTAL) == 0) {
    const p = walkAt(t, d);
    dropChild(t, get(t, p, PARENT), p);
    release(t, p);
    d++;
  }
  mergeIfUnary(t, d < len ? walkAt(t, d) : ROOT);
  return kept;
}

/** A non-root node with no request ending on it and one child is folded into the child. */
function mergeIfUnary(t: Trie, node: u32): void {
  if (node == ROOT || get(t, node, ENDS) != 0 || get(t, node, KIDS) != 1) return;
  const child = get(t, node, KID);
  const parent = get(t, node, PARENT);
  replaceChild(t, parent, node, child);
  setStart(t, child, get(t, node, START));
  put(t, child, PARENT, parent);
  release(t, node);
}

/** `trieRemoveAt` from the end node of the query's `n` blocks (a prompt of `slot` in the trie); -1: none ends there. */
export function trieRemove(t: Trie, n: u32, slot: u32): u32 {
  const end = endOf(t, n);
  return end < 0 ? 0xffffffff : trieRemoveAt(t, <u32>end, slot);
}

/** Blocks of the query's `n` (a prompt in the trie) held on `slot` by requests other than one of its own copies. */
export function trieHeldByOthers(t: Trie, n: u32, slot: u32): u32 {
  // A slot beyond the bit sets has never booked a prompt here.
  if (slot >= 32 * t.words) return 0;
  let node = ROOT;
  let held: u32 = 0;
  // The deepest node of its path that another request of the slot passes through: one with two sources.
  while (get(t, node, END) < n) {
    node = childAt(t, node, hashAt(t.q, get(t, node, END)));
    if (node == 0) break;
    if (bit(t, node, true, slot)) held = min(get(t, node, END), n);
  }
  return held;
}
