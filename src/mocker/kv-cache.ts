/**
 * The simulated paged KV cache: `numBlocks` blocks of `blockSize` tokens with
 * prefix caching keyed by chained sequence hash (the hash the router computes).
 *
 *   state of a block       where it lives            evictable
 *   free (never cached)    #free (stack)             -
 *   active (ref > 0)       requests' block lists     no
 *   inactive (ref 0)       #inactive, LRU order      yes (BlockRemoved)
 *
 * A full block becomes cached when a request finishes computing it; a hash
 * already cached by another block is not cached twice (the second copy stays
 * private to its request, and no event is emitted). Allocation prefers free
 * blocks and only then evicts a cached block: under the `lru` policy (vLLM's)
 * the least recently released one; under `priority` (SGLang's
 * `--radix-eviction-policy priority`) the least important one, the least
 * recently released among equals, where a block's importance is the most
 * important `priority` of the requests that have used it since it was cached
 * (lower values first, the engine's scheduling order; SGLang keeps the highest
 * value, in its own order). Releasing a request's blocks tail-first makes its
 * tail the first to go.
 *
 * Pure and synchronous; the engine core owns one per data-parallel rank.
 */
import { BinaryHeap } from '../core/index.js';
import { EVICTION_POLICIES, type EvictionPolicy } from './engine-types.js';

export class Block {
  readonly id: number;
  refCount = 0;
  /** Sequence hash while the block is in the prefix cache; null when private or free. */
  seqHash: bigint | null = null;
  /** The opaque hash published in KV events for `seqHash`. */
  engineHash = 0n;
  /** The most important (lowest) `priority` of the requests holding or having held it while cached. */
  priority = Infinity;
  constructor(id: number) {
    this.id = id;
  }
}

export class KvBlockPool {
  readonly numBlocks: number;
  readonly #blocks: Block[];
  readonly #free: number[] = [];
  readonly #cached = new Map<bigint, Block>();
  /** Cached blocks with ref 0; Map iteration order is release order (oldest first). */
  readonly #inactive = new Map<bigint, Block>();
  #active = 0;
  /** Live iterator over `#inactive` used to find the LRU block (see `allocate`). */
  #lru: IterableIterator<Block> | undefined;
  /** Engine hashes of blocks evicted since the last drain, in eviction order. */
  #evicted: bigint[] = [];
  /** The `priority` policy's eviction order (null under `lru`). */
  readonly #byPriority: PriorityBuckets | null;

  constructor(numBlocks: number, evictionPolicy: EvictionPolicy = 'lru') {
    if (!EVICTION_POLICIES.includes(evictionPolicy)) throw new Error(`unknown eviction policy ${evictionPolicy}`);
    this.numBlocks = numBlocks;
    this.#byPriority = evictionPolicy === 'priority' ? new PriorityBuckets() : null;
    this.#blocks = Array.from({ length: numBlocks }, (_, i) => new Block(i));
    // Pop from the end: hand out block 0 first.
    for (let i = numBlocks - 1; i >= 0; i--) this.#free.push(i);
  }

  get activeBlocks(): number {
    return this.#active;
  }
  get cachedBlocks(): number {
    return this.#cached.size;
  }
  get inactiveBlocks(): number {
    return this.#inactive.size;
  }
  get freeBlocks(): number {
    return this.#free.length;
  }
  /** Fraction of blocks held by requests (vLLM's kv_cache_usage_perc): inactive cached blocks count as free. */
  usage(): number {
    return this.#active / this.numBlocks;
  }
  /** Blocks an allocation could obtain now (free plus evictable). */
  available(): number {
    return this.#free.length + this.#inactive.size;
  }

  /** Number of leading hashes of the chain that are cached, at most `maxBlocks`. */
  matchPrefix(seqHashes: readonly bigint[], maxBlocks: number): number {
    const n = Math.min(seqHashes.length, maxBlocks);
    let i = 0;
    while (i < n && this.#cached.has(seqHashes[i]!)) i++;
    return i;
  }

  /** Of the first `count` hashes (all cached), how many are inactive, i.e. would leave the evictable pool when acquired. */
  inactiveAmong(seqHashes: readonly bigint[], count: number): number {
    let k = 0;
    for (let i = 0; i < count; i++) if (this.#inactive.has(seqHashes[i]!)) k++;
    return k;
  }

  isCached(seqHash: bigint): boolean {
    return this.#cached.has(seqHash);
  }

  /** Takes a reference on a cached block (precondition: `isCached`) for a request of `priority` (default 0). */
  acquireCached(seqHash: bigint, priority = 0): Block {
    const b = this.#cached.get(seqHash)!;
    if (b.refCount === 0) {
      this.#inactive.delete(seqHash);
      this.#byPriority?.delete(b);
      this.#active++;
    }
    b.refCount++;
    if (priority < b.priority) b.priority = priority;
    return b;
  }

  /**
   * A new private block with ref 1 for a request of `priority` (default 0), evicting a cached block (the policy's
   * choice) if no free one is left; undefined when full.
   */
  allocate(priority = 0): Block | undefined {
    let id = this.#free.pop();
    if (id === undefined) {
      const victim = this.#byPriority !== null ? this.#byPriority.shift() : this.#leastRecent();
      if (victim === undefined) return undefined;
      this.#inactive.delete(victim.seqHash!);
      this.#cached.delete(victim.seqHash!);
      this.#evicted.push(victim.engineHash);
      victim.seqHash = null;
      victim.engineHash = 0n;
      id = victim.id;
    }
    const b = this.#blocks[id]!;
    b.refCount = 1;
    b.priority = priority;
    this.#active++;
    return b;
  }

  /** The least recently released inactive block (the `lru` policy's victim), or undefined when there is none. */
  #leastRecent(): Block | undefined {
    // One live iterator, not a fresh one per eviction: a fresh Map iterator
    // walks over every entry deleted since the table was last rebuilt, which
    // made each eviction O(evictions so far). A live iterator stays on the
    // oldest entry (everything before it was evicted; re-released blocks are
    // appended behind it); once exhausted it is recreated.
    let oldest = (this.#lru ??= this.#inactive.values()).next();
    if (oldest.done === true) oldest = (this.#lru = this.#inactive.values()).next();
    return oldest.done === true ? undefined : oldest.value;
  }

  /** Puts a computed full block into the prefix cache; false (block stays private) when the hash is already cached. */
  register(block: Block, seqHash: bigint, engineHash: bigint): boolean {
    if (this.#cached.has(seqHash)) return false;
    block.seqHash = seqHash;
    block.engineHash = engineHash;
    this.#cached.set(seqHash, block);
    return true;
  }

  /** Drops one reference; at zero a cached block becomes the most recent inactive one, a private block becomes free. */
  release(block: Block): void {
    if (block.refCount <= 0) throw new Error(`KvBlockPool.release: block ${block.id} is not referenced`);
    block.refCount--;
    if (block.refCount > 0) return;
    this.#active--;
    if (block.seqHash !== null) {
      this.#inactive.set(block.seqHash, block);
      this.#byPriority?.add(block);
    } else {
      block.priority = Infinity;
      this.#free.push(block.id);
    }
  }

  /** Engine hashes evicted since the last call (one BlockRemoved each, as vLLM emits them). */
  drainEvicted(): bigint[] {
    const out = this.#evicted;
    this.#evicted = [];
    return out;
  }

  /**
   * Empties the prefix cache (vLLM's reset_prefix_cache). Like vLLM it refuses
   * while any block is in use, returning false.
   */
  reset(): boolean {
    if (this.#active > 0) return false;
    for (const b of this.#inactive.values()) {
      b.seqHash = null;
      b.engineHash = 0n;
      b.priority = Infinity;
      this.#free.push(b.id);
    }
    this.#inactive.clear();
    this.#byPriority?.clear();
    this.#lru = undefined;
    this.#cached.clear();
    this.#evicted = [];
    return true;
  }
}

/**
 * The `priority` policy's inactive blocks: one bucket per importance in release order, and a max-heap of the
 * importances that have a bucket, so the victim (the least important, then the least recently released) is found
 * in O(log buckets). A bucket emptied by acquisitions stays in the heap until it reaches the top.
 */
class PriorityBuckets {
  readonly #buckets = new Map<number, Map<bigint, Block>>();
  /** Importances with a bucket, least important (highest value) on top; each at most once. */
  readonly #heap = new BinaryHeap<number>((a, b) => a > b);

  add(b: Block): void {
    let bucket = this.#buckets.get(b.priority);
    if (bucket === undefined) {
      bucket = new Map();
      this.#buckets.set(b.priority, bucket);
      this.#heap.push(b.priority);
    }
    bucket.set(b.seqHash!, b);
  }

  delete(b: Block): void {
    this.#buckets.get(b.priority)?.delete(b.seqHash!);
  }

  /** Takes the victim out (the caller evicts it), or undefined when no block is inactive. */
  shift(): Block | undefined {
    for (let top = this.#heap.top(); top !== undefined; top = this.#heap.top()) {
      const bucket = this.#buckets.get(top)!;
      const oldest = bucket.values().next();
      if (oldest.done !== true) {
        bucket.delete(oldest.value.seqHash!);
        return oldest.value;
      }
      this.#buckets.delete(top);
      this.#heap.pop();
    }
    return undefined;
  }

  clear(): void {
    this.#buckets.clear();
    this.#heap.reset([]);
  }
}
