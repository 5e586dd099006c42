/**
 * Counts keyed by a pair of small non-negative integers (the in-flight prompt
 * trie's (node, slot) pairs that hold two or more): an open-addressing hash
 * table with linear probing in one typed array, so a lookup with the CPU
 * caches cold costs one cache line, where a Map costs its bucket array, its
 * entry and a boxed key. Deletion shifts the entries after it back (no
 * tombstones): a table that churns keeps its probe lengths.
 *
 * Contract: keys are integers in [0, 2^31 - 1); a count is stored while it is
 * not 0 (`set(a, b, 0)` deletes it).
 */

/** Words per entry: a + 1 (0: empty), b, count, unused (16 bytes: four entries a cache line). */
const STRIDE = 4;

export class PairCounts {
  #table = new Int32Array(64 * STRIDE);
  /** Entries the table has room for minus one (a power of two minus one). */
  #mask = 63;
  #size = 0;

  /** Entries stored. */
  get size(): number {
    return this.#size;
  }

  /** The count of (a, b), 0 if none. */
  get(a: number, b: number): number {
    const t = this.#table;
    const mask = this.#mask;
    for (let i = home(a, b, mask); ; i = (i + 1) & mask) {
      const o = i * STRIDE;
      const k = t[o]!;
      if (k === 0) return 0;
      if (k === a + 1 && t[o + 1] === b) return t[o + 2]!;
    }
  }

  /** Sets the count of (a, b); 0 deletes it. */
  set(a: number, b: number, count: number): void {
    const t = this.#table;
    const mask = this.#mask;
    for (let i = home(a, b, mask); ; i = (i + 1) & mask) {
      const o = i * STRIDE;
      const k = t[o]!;
      if (k === a + 1 && t[o + 1] === b) {
        if (count !== 0) t[o + 2] = count;
        else this.#deleteAt(i);
        return;
      }
      if (k === 0) {
        if (count === 0) return;
        t[o] = a + 1;
        t[o + 1] = b;
        t[o + 2] = count;
        // At most half full: probes stay short.
        if (++this.#size * 2 > mask + 1) this.#rehash((mask + 1) * 2);
        return;
      }
    }
  }

  /** Empties entry `i`, moving back each later entry of its run that would no longer be found. */
  #deleteAt(i: number): void {
    const t = this.#table;
    const mask = this.#mask;
    let hole = i;
    for (let j = (i + 1) & mask; t[j * STRIDE] !== 0; j = (j + 1) & mask) {
      const o = j * STRIDE;
      const h = home(t[o]! - 1, t[o + 1]!, mask);
      // The entry at j may fill the hole if its home is not in (hole, j] (cyclically).
      const reachable = hole <= j ? hole < h && h <= j : hole < h || h <= j;
      if (reachable) continue;
      t.copyWithin(hole * STRIDE, o, o + STRIDE);
      hole = j;
    }
    t.fill(0, hole * STRIDE, hole * STRIDE + STRIDE);
    this.#size--;
  }

  #rehash(entries: number): void {
    const old = this.#table;
    this.#table = new Int32Array(entries * STRIDE);
    this.#mask = entries - 1;
    this.#size = 0;
    for (let o = 0; o < old.length; o += STRIDE) if (old[o] !== 0) this.set(old[o]! - 1, old[o + 1]!, old[o + 2]!);
  }
}

/** Where the pair's probe starts: both integers mixed (murmur3's finaliser), then masked. */
function home(a: number, b: number, mask: number): number {
  let h = Math.imul(a, 0x9e3779b1) ^ b;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h & mask;
}
