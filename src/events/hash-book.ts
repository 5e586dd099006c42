/**
 * A hybrid model's hash book (`KvGroupIndexes`, group-indexes.ts, says why it exists): per slot, each engine
 * hash the slot holds in any KV-cache group, to our sequence hash and a bit per group holding it.
 *
 * Bounded: the book is a JavaScript Map beside the WASM indexes, not under their memory budget, and it learns
 * of a block's end only from the engine's removals, never from kvgate's evictions (the module reports how many
 * entries it evicted, not which). An engine that never sends removals, or whose removals are lost, would grow it
 * without bound. So the model's books hold at most `bookCapacity(budget)` entries together: about the budget's
 * bytes again (`BOOK_ENTRY_BYTES` each), or, without a budget, 1 GiB's worth (`UNBUDGETED_BYTES`). Past
 * that they are trimmed to 90 % of it max-min fairly (the largest slots' books to a common level, as the indexes
 * under their budget), each book's least recently noted entries first (a block used as a parent counts as noted),
 * and the trim is counted (`onForgotten`) and logged, a warn line for the first of an episode (the books had been
 * under 3/4 of the capacity). One slot's book also stays within V8's Map limit (2^24 entries).
 *
 * What a forgotten entry costs: a group's later stored event under that block finds no parent and counts as
 * `parent_not_found`, as under any block the model does not know (the group's index then lacks that event's
 * blocks until the engine stores them again), and a later removal of it only misses the book. Forgotten first are
 * the blocks nothing has stored or chained under for longest; a conversation's follow-up chains under its newest
 * block. An entry costs about four times an index's (block, slot) entry, so under a budget the indexes fill, the
 * book can hold fewer blocks than they do and forget some they still hold.
 *
 * Why not drop an entry when the indexes evict its block: the module's eviction reports a count, and listing the
 * (slot, engine hash) of every entry evicted, up to a tenth of the budget's entries at once, would cost a buffer in
 * WASM memory and a JS pass over them on the event loop. Why not hold the book under the budget itself: being the
 * largest member it would be trimmed first, to about a quarter of the blocks the indexes hold, even for engines that
 * send every removal.
 */
import type { Logger } from '../common/index.js';
import { waterLevel } from '../wasm/index.js';

export interface BookEntry {
  seq: bigint;
  /** Bit k set while the group of ordinal k holds the block (group-indexes.ts). */
  groups: number;
}

/** One slot's book: engine hash to its entry, least recently noted first (a Map keeps insertion order). */
export type SlotBook = Map<bigint, BookEntry>;

/**
 * JS heap bytes of one entry: the Map's slot, its bigint key, the record and its bigint (117 measured with Node
 * 20 at a full table, up to about 145 just after the table doubled).
 */
const BOOK_ENTRY_BYTES = 128;

/**
 * The bytes a book's capacity is figured from without a budget: 1 GiB of JS heap (about 8M blocks), well within
 * V8's default heap limit, where the 4 GiB an unbudgeted module may hold would be as large as the heap itself.
 */
const UNBUDGETED_BYTES = 2 ** 30;

/** One slot's book at most: V8's Map throws at 2^24 entries; trimmed to 90 % of this when it reaches it. */
const MAX_SLOT_ENTRIES = 2 ** 24 - 1;

/** Entries the model's books hold together at most, for an index memory budget in bytes (0: none). */
function bookCapacity(budgetBytes: number): number {
  return Math.max(1, Math.floor((budgetBytes > 0 ? budgetBytes : UNBUDGETED_BYTES) / BOOK_ENTRY_BYTES));
}

export interface HashBookOptions {
  /** The model's index memory budget in bytes, read at each store (0: none). */
  readonly budget: () => number;
  readonly logger: Logger;
  /** Told of the entries each trim forgot (metrics). */
  readonly onForgotten?: ((entries: number) => void) | undefined;
}

/** Every slot's book of one model, under one capacity. */
export class HashBook {
  readonly #books = new Map<string, SlotBook>();
  readonly #opts: HashBookOptions;
  #entries = 0;
  #inEpisode = false;

  constructor(opts: HashBookOptions) {
    this.#opts = opts;
  }

  /** Entries of every slot's book together. */
  get entries(): number {
    return this.#entries;
  }

  /** Slots with a book. */
  get slots(): number {
    return this.#books.size;
  }

  /** The slot's book, made (and `seed`ed: (engine hash, sequence hash) pairs, under `bit`) the first time. */
  open(key: string, seed: () => BigUint64Array, bit: number): SlotBook {
    let book = this.#books.get(key);
    if (book === undefined) {
      this.#books.set(key, (book = new Map()));
      this.note(book, seed(), bit);
    }
    return book;
  }

  /** The sequence hash of a block to chain under, noted anew (it stays longest); undefined when not in the book. */
  parentSeq(book: SlotBook, hash: bigint): bigint | undefined {
    const e = book.get(hash);
    if (e === undefined) return undefined;
    book.delete(hash);
    book.set(hash, e);
    return e.seq;
  }

  /** Notes (engine hash, sequence hash) pairs as held by the group of `bit`; then trims past the capacity. */
  note(book: SlotBook, pairs: BigUint64Array, bit: number): void {
    for (let j = 0; j < pairs.length; j += 2) {
      const e = book.get(pairs[j]!);
      if (e !== undefined) {
        e.groups |= bit;
        continue;
      }
      if (book.size >= MAX_SLOT_ENTRIES)
        this.#trimmed(this.#forget(book, book.size - Math.floor(MAX_SLOT_ENTRIES * 0.9)));
      book.set(pairs[j]!, { seq: pairs[j + 1]!, groups: bit });
      this.#entries++;
    }
    this.#enforce();
  }

  /** The group of `bit` no longer holds these blocks; a block no group holds leaves the book. */
  drop(key: string, hashes: BigUint64Array, bit: number): void {
    const book = this.#books.get(key);
    if (book === undefined) return;
    for (const h of hashes) {
      const e = book.get(h);
      if (e === undefined) continue;
      e.groups &= ~bit;
      if (e.groups === 0) {
        book.delete(h);
        this.#entries--;
      }
    }
  }

  /** Forgets the slot's book. */
  delete(key: string): void {
    const book = this.#books.get(key);
    if (book === undefined) return;
    this.#entries -= book.size;
    this.#books.delete(key);
  }

  clear(): void {
    this.#books.clear();
    this.#entries = 0;
  }

  /** Past the capacity: the books down to 90 % of it, max-min fairly, each its least recently noted first. */
  #enforce(): void {
    const capacity = bookCapacity(this.#opts.budget());
    if (this.#entries <= capacity) {
      if (this.#entries < capacity * 0.75) this.#inEpisode = false;
      return;
    }
    const books = [...this.#books.values()];
    const level = waterLevel(
      books.map((b) => b.size),
      Math.floor(capacity * 0.9),
    );
    let forgotten = 0;
    for (const b of books) if (b.size > level) forgotten += this.#forget(b, b.size - level);
    this.#trimmed(forgotten, capacity);
  }

  /** Forgets the book's `count` least recently noted entries (one iterator: holes at the front are walked once). */
  #forget(book: SlotBook, count: number): number {
    let n = 0;
    for (const h of book.keys()) {
      if (n === count) break;
      book.delete(h);
      n++;
    }
    this.#entries -= n;
    return n;
  }

  #trimmed(forgotten: number, capacity = bookCapacity(this.#opts.budget())): void {
    this.#opts.onForgotten?.(forgotten);
    const fields = { forgotten, entriesAfter: this.#entries, capacity };
    if (this.#inEpisode) {
      this.#opts.logger.debug(fields, 'KV-cache group hash book forgot its least recently used blocks');
      return;
    }
    this.#inEpisode = true;
    this.#opts.logger.warn(
      fields,
      "KV-cache group hash book reached its bound (about router_index_memory_budget_mib's bytes): its least " +
        'recently used blocks are forgotten, and a later event stored under one counts as parent_not_found',
    );
  }
}
