/**
 * One shard of a `ShardedPrefixIndex` (sharded-index.ts), run on a worker thread of its own (entry
 * workers/index-shard.ts) with its own module instance, so each shard has a 4 GiB wasm32 memory of its
 * own: its `PrefixIndex` holds the slots the main thread assigned to it.
 *
 * Two channels, both from the main thread:
 * - stored blocks come as packed operations in a transferred buffer (`ShardOps`), applied a slice at a
 *   time so a query never waits behind a long batch;
 * - a match is a generation number in the shard's control words of a SharedArrayBuffer: the shard waits
 *   for it with `Atomics.waitAsync` (its event loop stays free for the operations), reads the request's
 *   hashes from the shared query region, writes (worker, dp rank, depth) triples to its own result
 *   region, publishes the generation as done and `Atomics.notify`s the main thread, which waits for
 *   every shard with `Atomics.wait`. No message crosses for a match.
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { PrefixIndex } from './prefix-index.js';

/** Control words of a shard (Int32Array over its SharedArrayBuffer). */
export const CTL_GEN = 0;
export const CTL_DONE = 1;
/** Blocks in the request (written before CTL_GEN). */
export const CTL_BLOCKS = 2;
export const CTL_WORDS = 4;

/** The shared regions one shard works on. */
export interface ShardRegions {
  /** CTL_WORDS Int32 control words. */
  readonly ctl: SharedArrayBuffer;
  /** The request's local block hashes (u64), shared by every shard, read-only for them. */
  readonly query: SharedArrayBuffer;
  /** This shard's answer: [count, then (workerId, dpRank, depth) per slot holding a prefix] as u32. */
  readonly result: SharedArrayBuffer;
}

/** What the main thread posts to a shard. */
export type ShardRequest =
  | { readonly op: 'apply'; readonly id: number; readonly buffer: ArrayBuffer; readonly words: number }
  | { readonly op: 'stats'; readonly id: number };

/** What a shard posts back. */
export type ShardReply =
  | { readonly op: 'applied'; readonly id: number; readonly refused: number }
  | {
      readonly op: 'stats';
      readonly id: number;
      readonly entries: number;
      readonly bytes: number;
      readonly distinctBlocks: number;
    };

/** Node's `Atomics.waitAsync` (ES2024; the project's lib is ES2023). */
const waitAsync = (
  Atomics as unknown as {
    waitAsync(ta: Int32Array, index: number, value: number): { async: boolean; value: Promise<unknown> | string };
  }
).waitAsync;

/** Operations applied per slice before a shard yields to a waiting match. */
const OPS_PER_SLICE = 64;

/**
 * Stored-block operations packed for a shard, in 8-byte words:
 * [workerId u32 | dpRank u32] [blocks u32 | has parent u32] [parent u64] engine hashes... local hashes...
 * @rank-numbers the worker id and rank are written as two u32 words of the packed operation.
 */
export class ShardOps {
  #buf = new BigUint64Array(1 << 14);
  #at = 0;
  #ops = 0;

  get ops(): number {
    return this.#ops;
  }

  addStored(
    workerId: number,
    dpRank: number,
    parent: bigint | null,
    engine: BigUint64Array,
    local: BigUint64Array,
  ): void {
    const n = engine.length;
    const need = this.#at + 3 + 2 * n;
    if (need > this.#buf.length) {
      const grown = new BigUint64Array(Math.max(need, this.#buf.length * 2));
      grown.set(this.#buf.subarray(0, this.#at));
      this.#buf = grown;
    }
    const u32 = new Uint32Array(this.#buf.buffer);
    u32[2 * this.#at] = workerId;
    u32[2 * this.#at + 1] = dpRank;
    u32[2 * (this.#at + 1)] = n;
    u32[2 * (this.#at + 1) + 1] = parent === null ? 0 : 1;
    this.#buf[this.#at + 2] = parent ?? 0n;
    this.#buf.set(engine, this.#at + 3);
    this.#buf.set(local.subarray(0, n), this.#at + 3 + n);
    this.#at = need;
    this.#ops++;
  }

  /** The packed operations (to be transferred) and a fresh buffer. */
  take(): { buffer: ArrayBuffer; words: number } {
    const out = { buffer: this.#buf.buffer as ArrayBuffer, words: this.#at };
    this.#buf = new BigUint64Array(1 << 14);
    this.#at = 0;
    this.#ops = 0;
    return out;
  }
}

export class IndexShard {
  readonly index = new PrefixIndex();
  readonly #ctl: Int32Array;
  readonly #query: BigUint64Array;
  readonly #result: Uint32Array;
  readonly #post: (reply: ShardReply) => void;
  /** Applies run one after another, in the order posted. */
  #applying: Promise<void> = Promise.resolve();

  constructor(regions: ShardRegions, post: (reply: ShardReply) => void) {
    this.#ctl = new Int32Array(regions.ctl);
    this.#query = new BigUint64Array(regions.query);
    this.#result = new Uint32Array(regions.result);
    this.#post = post;
    void this.#serveMatches(Atomics.load(this.#ctl, CTL_GEN));
  }

  handle(req: ShardRequest): void {
    if (req.op === 'stats') {
      const ix = this.index;
      this.#applying = this.#applying.then(() =>
        this.#post({ op: 'stats', id: req.id, entries: ix.size, bytes: ix.bytes, distinctBlocks: ix.distinctBlocks }),
      );
      return;
    }
    this.#applying = this.#applying.then(() => this.#apply(req.id, req.buffer, req.words));
  }

  async #apply(id: number, buffer: ArrayBuffer, words: number): Promise<void> {
    const u64 = new BigUint64Array(buffer, 0, words);
    const u32 = new Uint32Array(buffer, 0, words * 2);
    let refused = 0;
    let w = 0;
    for (let ops = 1; w < words; ops++) {
      const n = u32[2 * (w + 1)]!;
      const parent = u32[2 * (w + 1) + 1] === 1 ? u64[w + 2]! : null;
      try {
        this.index.applyStored(
          u32[2 * w]!,
          u32[2 * w + 1]!,
          parent,
          u64.subarray(w + 3, w + 3 + n),
          u64.subarray(w + 3 + n, w + 3 + 2 * n),
        );
      } catch {
        refused++; // a parent the slot does not hold, a repeated block: refused whole, as the applier counts it
      }
      w += 3 + 2 * n;
      if (ops % OPS_PER_SLICE === 0) await nextTurn();
    }
    this.#post({ op: 'applied', id, refused });
  }

  /** Answers each match the main thread announces, for the life of the thread. */
  async #serveMatches(seen: number): Promise<void> {
    for (;;) {
      const wait = waitAsync(this.#ctl, CTL_GEN, seen);
      if (wait.async) await wait.value;
      const gen = Atomics.load(this.#ctl, CTL_GEN);
      if (gen === seen) continue;
      seen = gen;
      const blocks = Atomics.load(this.#ctl, CTL_BLOCKS);
      const m = this.index.findMatches(this.#query.subarray(0, blocks));
      const out = this.#result;
      let k = 0;
      for (let i = 0; i < m.count && 1 + 3 * (k + 1) <= out.length; i++, k++) {
        const slot = this.index.slotWorker(m.slots[i]!)!;
        out[1 + 3 * k] = slot.workerId;
        out[2 + 3 * k] = slot.dpRank;
        out[3 + 3 * k] = m.depths[i]!;
      }
      out[0] = k;
      Atomics.store(this.#ctl, CTL_DONE, gen);
      Atomics.notify(this.#ctl, CTL_DONE);
    }
  }
}
