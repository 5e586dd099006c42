/**
 * Approximate mode: without KV events, the router records
 * its own routing decisions in a PrefixIndex as if the chosen slot had stored
 * every complete prompt block, and forgets each (block, slot) entry `ttlMs`
 * after its last use. Also serves as the short-TTL predict-on-route side index.
 *
 * Entries are keyed by our sequence hash, which doubles as the "engine" block
 * hash here, so removals need no translation. Expiry uses a min-heap with lazy
 * deletion, one item per recording (all its blocks share a deadline): a
 * refresh pushes a new item and bumps each entry's deadline; entries whose
 * deadline moved on are skipped when an older item pops. The heap is rebuilt
 * when the block references it holds outnumber live entries by `compactFactor`.
 */
import type { PrefixIndex, PromptHashes } from '../wasm/index.js';
import { BinaryHeap } from './binary-heap.js';
import type { Clock } from '../common/index.js';
import { isKvgateError } from '../errors/index.js';

export interface ApproximateIndexOptions {
  /** Lifetime of an entry after its last recording, in ms (Dynamo's router_ttl_secs, default 120 s). */
  ttlMs?: number;
  clock: Clock;
  /** Rebuild the heap when it holds more than this many times the live entries (default 8). */
  compactFactor?: number;
}

/** One recording: every block of one prompt on one slot shares a deadline, so one heap item covers them. */
interface HeapItem {
  deadline: number;
  slot: number;
  seqs: BigUint64Array;
}

const DEFAULT_APPROXIMATE_TTL_MS = 120_000;

/**
 * A 53-bit number key for the i-th hash of a BigUint64Array, read through a
 * u32 view so no BigInt is created: Map lookups by number are several times
 * cheaper than by BigInt. Two live hashes of one slot colliding in 53 bits
 * (odds ~n^2 / 2^54) would share a deadline; the index itself stays exact.
 */
function keyAt(u32: Uint32Array, i: number): number {
  return (u32[2 * i + 1]! & 0x1fffff) * 4294967296 + u32[2 * i]!;
}

function words(a: BigUint64Array): Uint32Array {
  return new Uint32Array(a.buffer, a.byteOffset, a.length * 2);
}

export class ApproximateIndex {
  readonly index: PrefixIndex;
  readonly ttlMs: number;
  readonly #clock: Clock;
  readonly #compactFactor: number;
  /** Per slot: seq hash key (see `keyAt`) -> current deadline. */
  readonly #deadlines = new Map<number, Map<number, number>>();
  readonly #heap = new BinaryHeap<HeapItem>((a, b) => a.deadline < b.deadline);
  #live = 0;
  /** Block references held by heap items (live or stale), to decide compaction. */
  #items = 0;

  constructor(index: PrefixIndex, opts: ApproximateIndexOptions) {
    const ttl = opts.ttlMs ?? DEFAULT_APPROXIMATE_TTL_MS;
    if (!(ttl > 0) || !Number.isFinite(ttl))
      throw new RangeError(`ApproximateIndex: ttlMs must be a positive number, got ${ttl}`);
    this.index = index;
    this.ttlMs = ttl;
    this.#clock = opts.clock;
    this.#compactFactor = opts.compactFactor ?? 8;
    // The module failed an allocation in the index: it was discarded empty, so are the deadlines of its entries.
    index.onDiscard(() => {
      this.#deadlines.clear();
      this.#heap.reset([]);
      this.#live = 0;
      this.#items = 0;
    });
  }

  /** Entries currently recorded (block, slot pairs). */
  get size(): number {
    return this.#live;
  }

  /**
   * Records that (workerId, dpRank) was sent a prompt with these hashes:
   * every complete block becomes (or stays) cached there until now + ttl.
   * @rank-numbers the scheduler books from its dense slot's columns, once per request, and the
   *   pair goes straight to the WASM index: numbers spare a pair object per booking.
   */
  record(workerId: number, dpRank: number, hashes: PromptHashes): void {
    try {
      this.#record(workerId, dpRank, hashes);
    } catch (err) {
      // The index was discarded (and the deadlines forgotten): the decision stands, predictions start over.
      if (!isKvgateError(err, 'KVG_ERR_INDEX_MEMORY')) throw err;
    }
  }

  /** `record`'s work, which may meet a discarded index. @rank-numbers as `record`: the pair goes straight to the WASM index. */
  #record(workerId: number, dpRank: number, hashes: PromptHashes): void {
    const { local, seq } = hashes;
    this.expire();
    const n = Math.min(local.length, seq.length);
    if (n === 0) return;
    const slot = this.index.slotOf(workerId, dpRank);
    // Root-parented store of the whole chain; re-storing known blocks is a no-op in the index.
    this.index.applyStored(
      workerId,
      dpRank,
      null,
      n === seq.length ? seq : seq.subarray(0, n),
      n === local.length ? local : local.subarray(0, n),
    );
    const deadline = this.#clock.now() + this.ttlMs;
    let map = this.#deadlines.get(slot);
    if (map === undefined) this.#deadlines.set(slot, (map = new Map()));
    const owned = seq.slice(0, n); // owned copy: callers may reuse their arrays
    const u32 = words(owned);
    const before = map.size;
    for (let i = 0; i < n; i++) map.set(keyAt(u32, i), deadline);
    this.#live += map.size - before;
    this.#heap.push({ deadline, slot, seqs: owned });
    this.#items += n;
    if (this.#items > this.#compactFactor * Math.max(this.#live, 1024)) this.#compact();
  }

  /** Removes every entry whose deadline has passed; returns how many. */
  expire(): number {
    const now = this.#clock.now();
    let removed = 0;
    const batch = new Map<number, bigint[]>();
    for (let top = this.#heap.top(); top !== undefined && top.deadline <= now; top = this.#heap.top()) {
      const item = this.#heap.pop()!;
      this.#items -= item.seqs.length;
      const map = this.#deadlines.get(item.slot);
      if (map === undefined) continue;
      let list = batch.get(item.slot);
      const u32 = words(item.seqs);
      for (let i = 0; i < item.seqs.length; i++) {
        const k = keyAt(u32, i);
        if (map.get(k) !== item.deadline) continue; // refreshed by a later recording, or already gone
        map.delete(k);
        this.#live--;
        removed++;
        if (list === undefined) batch.set(item.slot, (list = []));
        list.push(item.seqs[i]!);
      }
    }
    for (const [slot, hashes] of batch) {
      const w = this.index.slotWorker(slot);
      if (w === undefined) continue;
      try {
        this.index.applyRemoved(w.workerId, w.dpRank, hashes);
      } catch (err) {
        // The index was discarded: nothing is left to expire.
        if (!isKvgateError(err, 'KVG_ERR_INDEX_MEMORY')) throw err;
        break;
      }
    }
    return removed;
  }

  /** Forgets every entry of one worker (all ranks), e.g. when it leaves the fleet. */
  removeWorker(workerId: number): void {
    for (const [slot, map] of this.#deadlines) {
      if (this.index.slotWorker(slot)?.workerId === workerId) {
        this.#live -= map.size;
        this.#deadlines.delete(slot);
        // heap items of this slot become stale and are skipped when they pop
      }
    }
    this.index.removeWorker(workerId);
  }

  #compact(): void {
    // Keep, in each item, only the entries it still holds the current deadline for.
    const kept: HeapItem[] = [];
    let items = 0;
    for (const item of this.#heap.items) {
      const map = this.#deadlines.get(item.slot);
      if (map === undefined) continue;
      const u32 = words(item.seqs);
      const live: number[] = [];
      for (let i = 0; i < item.seqs.length; i++) if (map.get(keyAt(u32, i)) === item.deadline) live.push(i);
      if (live.length === 0) continue;
      const seqs = live.length === item.seqs.length ? item.seqs : BigUint64Array.from(live, (i) => item.seqs[i]!);
      kept.push({ deadline: item.deadline, slot: item.slot, seqs });
      items += seqs.length;
    }
    kept.sort((a, b) => a.deadline - b.deadline); // a sorted array is a valid min-heap
    this.#heap.reset(kept);
    this.#items = items;
  }
}
