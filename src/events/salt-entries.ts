/**
 * The salt memory's entries (salt-memory.ts): per slot (a small integer id), the salt of each remembered engine
 * block hash, oldest first. Built for the applier's hot path: no object and no `bigint` per entry or per call.
 *
 * - A hash is keyed by its two 32-bit halves and the slot id, in an open-addressing table of entry indices
 *   (linear probing; a deletion shifts the probe run back, so there are no tombstones).
 * - An entry's fields live in typed arrays by entry index (a free list reuses them); each slot's entries form a
 *   doubly linked list, oldest first, which is the order eviction and a replica's snapshot follow.
 * - Salts are interned: an entry holds a small id, and a salt string stays in the table while an entry (or a
 *   caller's `hold`) refers to it.
 *
 * The arrays grow by doubling and never shrink: their size follows the most entries held at once, which the
 * memory's cap bounds (28 bytes an entry and 8 of table).
 */

/** Entries the arrays start with. */
const kInitialEntries = 256;

export class SaltEntries {
  #lo: Uint32Array;
  #hi: Uint32Array;
  /** The key's mixed hash, for moving an entry when a deletion shifts its probe run. */
  #mix: Int32Array;
  #slot: Int32Array;
  #salt: Int32Array;
  /** Per slot's list: the next older and newer entry, -1 for none (`#newer` links the free list too). */
  #older: Int32Array;
  #newer: Int32Array;
  #free = -1;
  /** Entries ever allocated (those past it were never used). */
  #used = 0;
  /** Entry index + 1 by probe position; 0 for empty. At most half full. */
  #table: Int32Array;
  #mask: number;
  #size = 0;

  /** Per slot id: its oldest and newest entry (-1 for none) and how many it holds. */
  #oldest = new Int32Array(16).fill(-1);
  #newest = new Int32Array(16).fill(-1);
  #count = new Int32Array(16);

  readonly #saltIds = new Map<string, number>();
  readonly #salts: (string | undefined)[] = [];
  #saltRefs = new Int32Array(16);
  readonly #freeSalts: number[] = [];

  constructor(initialEntries = kInitialEntries) {
    const n = Math.max(2, 1 << Math.ceil(Math.log2(Math.max(2, initialEntries))));
    this.#lo = new Uint32Array(n);
    this.#hi = new Uint32Array(n);
    this.#mix = new Int32Array(n);
    this.#slot = new Int32Array(n);
    this.#salt = new Int32Array(n);
    this.#older = new Int32Array(n);
    this.#newer = new Int32Array(n);
    this.#table = new Int32Array(2 * n);
    this.#mask = 2 * n - 1;
  }

  /** Entries held over all slots. */
  get size(): number {
    return this.#size;
  }

  /** Entries the slot holds. */
  count(slot: number): number {
    return slot < this.#count.length ? this.#count[slot]! : 0;
  }

  /** The slot's oldest entry; -1 when it holds none. */
  oldest(slot: number): number {
    return slot < this.#oldest.length ? this.#oldest[slot]! : -1;
  }

  /** The entry stored after `e` in its slot; -1 after the newest. */
  newer(e: number): number {
    return this.#newer[e]!;
  }

  lo(e: number): number {
    return this.#lo[e]!;
  }

  hi(e: number): number {
    return this.#hi[e]!;
  }

  /** The entry's salt id (`saltOf` names it). */
  saltId(e: number): number {
    return this.#salt[e]!;
  }

  saltOf(id: number): string {
    return this.#salts[id]!;
  }

  /** The id of `salt`, held once for the caller until `release`: an id without entries is reused after. */
  hold(salt: string): number {
    let id = this.#saltIds.get(salt);
    if (id === undefined) {
      id = this.#freeSalts.pop() ?? this.#salts.length;
      if (id >= this.#saltRefs.length) this.#saltRefs = grown(this.#saltRefs, 2 * id, 0);
      this.#salts[id] = salt;
      this.#saltIds.set(salt, id);
    }
    this.#saltRefs[id]!++;
    return id;
  }

  release(id: number): void {
    if (--this.#saltRefs[id]! > 0) return;
    this.#saltIds.delete(this.#salts[id]!);
    this.#salts[id] = undefined;
    this.#freeSalts.push(id);
  }

  /** The entry of the slot's hash (halves `lo`, `hi`); -1 when there is none. */
  find(slot: number, lo: number, hi: number): number {
    const t = this.#table;
    const mask = this.#mask;
    for (let i = mix(slot, lo, hi) & mask; ; i = (i + 1) & mask) {
      const v = t[i]!;
      if (v === 0) return -1;
      const e = v - 1;
      if (this.#lo[e] === lo && this.#hi[e] === hi && this.#slot[e] === slot) return e;
    }
  }

  /** Adds a hash the slot does not hold, as its newest entry, with salt `saltId` (referred to once more). */
  add(slot: number, lo: number, hi: number, saltId: number): number {
    if (this.#free < 0 && this.#used === this.#lo.length) this.#grow();
    let e = this.#free;
    if (e >= 0) this.#free = this.#newer[e]!;
    else e = this.#used++;
    if (slot >= this.#count.length) this.#growSlots(slot);
    const m = mix(slot, lo, hi);
    this.#lo[e] = lo;
    this.#hi[e] = hi;
    this.#mix[e] = m;
    this.#slot[e] = slot;
    this.#salt[e] = saltId;
    this.#saltRefs[saltId]!++;
    this.#append(slot, e);
    const t = this.#table;
    const mask = this.#mask;
    let i = m & mask;
    while (t[i] !== 0) i = (i + 1) & mask;
    t[i] = e + 1;
    this.#size++;
    return e;
  }

  /** Makes `e` its slot's newest entry, with salt `saltId` (a re-stored block). */
  renew(e: number, saltId: number): void {
    const old = this.#salt[e]!;
    if (old !== saltId) {
      this.#saltRefs[saltId]!++;
      this.#salt[e] = saltId;
      this.release(old);
    }
    const slot = this.#slot[e]!;
    if (this.#newest[slot] === e) return;
    this.#unlink(slot, e);
    this.#append(slot, e);
  }

  /** Removes entry `e`. */
  remove(e: number): void {
    const t = this.#table;
    const mask = this.#mask;
    let i = this.#mix[e]! & mask;
    while (t[i] !== e + 1) i = (i + 1) & mask;
    // Backward shift: each later entry of the probe run that may sit at `i` (its home is not cyclically within
    // (i, j]) moves there, so every entry stays reachable from its home without tombstones.
    for (let j = (i + 1) & mask; t[j] !== 0; j = (j + 1) & mask) {
      const home = this.#mix[t[j]! - 1]! & mask;
      if (i <= j ? i < home && home <= j : i < home || home <= j) continue;
      t[i] = t[j]!;
      i = j;
    }
    t[i] = 0;
    const slot = this.#slot[e]!;
    this.#unlink(slot, e);
    this.release(this.#salt[e]!);
    this.#newer[e] = this.#free;
    this.#free = e;
    this.#size--;
  }

  #append(slot: number, e: number): void {
    const last = this.#newest[slot]!;
    this.#older[e] = last;
    this.#newer[e] = -1;
    if (last >= 0) this.#newer[last] = e;
    else this.#oldest[slot] = e;
    this.#newest[slot] = e;
    this.#count[slot]!++;
  }

  #unlink(slot: number, e: number): void {
    const o = this.#older[e]!;
    const n = this.#newer[e]!;
    if (o >= 0) this.#newer[o] = n;
    else this.#oldest[slot] = n;
    if (n >= 0) this.#older[n] = o;
    else this.#newest[slot] = o;
    this.#count[slot]!--;
  }

  #grow(): void {
    const n = 2 * this.#lo.length;
    this.#lo = grown(this.#lo, n);
    this.#hi = grown(this.#hi, n);
    this.#mix = grown(this.#mix, n);
    this.#slot = grown(this.#slot, n);
    this.#salt = grown(this.#salt, n);
    this.#older = grown(this.#older, n);
    this.#newer = grown(this.#newer, n);
    const t = new Int32Array(2 * n);
    const mask = 2 * n - 1;
    const old = this.#table;
    for (let k = 0; k < old.length; k++) {
      const v = old[k]!;
      if (v === 0) continue;
      let i = this.#mix[v - 1]! & mask;
      while (t[i] !== 0) i = (i + 1) & mask;
      t[i] = v;
    }
    this.#table = t;
    this.#mask = mask;
  }

  #growSlots(slot: number): void {
    const n = Math.max(2 * this.#count.length, slot + 1);
    this.#oldest = grown(this.#oldest, n, -1);
    this.#newest = grown(this.#newest, n, -1);
    this.#count = grown(this.#count, n, 0);
  }
}

/** A 32-bit hash of a slot's key (engine hashes are mostly well spread already; tests' small ones are not). */
function mix(slot: number, lo: number, hi: number): number {
  let x = Math.imul(lo ^ Math.imul(slot, 0x27d4eb2d), 0x9e3779b1) ^ hi;
  x = Math.imul(x ^ (x >>> 15), 0x85ebca6b);
  return x ^ (x >>> 13);
}

function grown<T extends Uint32Array | Int32Array>(a: T, n: number, fill?: number): T {
  const out = new (a.constructor as new (n: number) => T)(n);
  out.set(a);
  if (fill !== undefined && fill !== 0) out.fill(fill, a.length);
  return out;
}

/**
 * A set of engine hashes on the same table (slot 0, one salt), emptied in place: the blocks a salted packed run
 * stores salted (applier.ts), asked of every stored event of the run, with no `bigint` made per block.
 */
export class HashSet {
  readonly #entries = new SaltEntries();
  readonly #salt = this.#entries.hold('');
  readonly #h64 = new BigUint64Array(1);
  readonly #h32 = new Uint32Array(this.#h64.buffer);

  has(hash: bigint): boolean {
    if (this.#entries.size === 0) return false;
    this.#h64[0] = hash;
    return this.#entries.find(0, this.#h32[0]!, this.#h32[1]!) >= 0;
  }

  addAll(hashes: BigUint64Array): void {
    const entries = this.#entries;
    const h32 = this.#h32;
    for (let i = 0; i < hashes.length; i++) {
      this.#h64[0] = hashes[i]!;
      if (entries.find(0, h32[0]!, h32[1]!) < 0) entries.add(0, h32[0]!, h32[1]!, this.#salt);
    }
  }

  clear(): void {
    const entries = this.#entries;
    for (let e = entries.oldest(0); e >= 0; e = entries.oldest(0)) entries.remove(e);
  }
}
