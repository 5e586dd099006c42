/**
 * A prefix index sharded by slot over worker threads, for more (block, slot) entries than one wasm32
 * module holds (4 GiB: about 100M entries at 4,096 slots is at its edge). Each shard is a thread with
 * its own module instance and `PrefixIndex` (index-shard.ts); a slot (worker, dp rank) lives on one
 * shard, given to the least loaded one when first seen, so a stored block goes to exactly one shard
 * and the shards' answers to a match never overlap: merging is concatenation.
 *
 * A match fans out without a message: the request's hashes are written once to a shared region, each
 * shard's generation word is bumped and notified, and the main thread `Atomics.wait`s on each shard's
 * done word. A shard that does not answer within `matchTimeoutMs` is left out of that answer (its
 * slots score no overlap, as after a discarded index) and counted in `lateShards`.
 */
import { Worker } from 'node:worker_threads';
import { slotKey, workerEntryFile } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import {
  CTL_BLOCKS,
  CTL_DONE,
  CTL_GEN,
  CTL_WORDS,
  ShardOps,
  type ShardRegions,
  type ShardReply,
  type ShardRequest,
} from './index-shard.js';

/** One match's answer: every slot holding a prefix of the request, with its depth in blocks. */
export interface ShardedOverlap {
  readonly count: number;
  readonly workerIds: Uint32Array;
  readonly dpRanks: Uint32Array;
  readonly depths: Uint32Array;
}

/** Per shard: (block, slot) entries, bytes of its module's index tables, distinct blocks. */
export interface ShardStats {
  readonly entries: number;
  readonly bytes: number;
  readonly distinctBlocks: number;
}

export interface ShardedIndexOptions {
  readonly shards: number;
  /** Longest request matched, in blocks (the shared query region). Default 65,536. */
  readonly maxQueryBlocks?: number;
  /** Slots one shard can report in one answer. Default 65,536. */
  readonly maxSlotsPerShard?: number;
  /** How long a match waits for a shard, ms. Default 50. */
  readonly matchTimeoutMs?: number;
}

/** How long a match polls a shard's done word before it sleeps on it, ms. */
const SPIN_MS = 0.05;

interface Shard {
  readonly worker: Worker;
  readonly ctl: Int32Array;
  readonly result: Uint32Array;
  readonly ops: ShardOps;
  slots: number;
  /** Requests awaiting the shard's answer. */
  waiting: number;
}

/**
 * @rank-numbers its stored-block API is `PrefixIndex`'s (`applyStored(workerId, dpRank, ...)`), and the
 *   numbers go straight into the packed operations a shard applies.
 */
export class ShardedPrefixIndex {
  readonly #shards: Shard[] = [];
  readonly #slotShard = new Map<string, Shard>();
  readonly #query: BigUint64Array;
  readonly #timeoutMs: number;
  readonly #pending = new Map<number, (reply: ShardReply) => void>();
  #gen = 0;
  #nextId = 1;
  #lateShards = 0;

  constructor(opts: ShardedIndexOptions) {
    if (!Number.isInteger(opts.shards) || opts.shards < 1 || opts.shards > 256)
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `shards must be an integer in [1, 256], got ${opts.shards}`);
    const query = new SharedArrayBuffer((opts.maxQueryBlocks ?? 65_536) * 8);
    this.#query = new BigUint64Array(query);
    this.#timeoutMs = opts.matchTimeoutMs ?? 50;
    const file = workerEntryFile(import.meta.url, 'index-shard', 1);
    for (let i = 0; i < opts.shards; i++) {
      const regions: ShardRegions = {
        ctl: new SharedArrayBuffer(CTL_WORDS * 4),
        query,
        result: new SharedArrayBuffer((1 + 3 * (opts.maxSlotsPerShard ?? 65_536)) * 4),
      };
      const worker = new Worker(file, { workerData: regions, name: `kvgate-index-shard-${i}` });
      worker.unref();
      worker.on('message', (r: ShardReply) => {
        const done = this.#pending.get(r.id);
        this.#pending.delete(r.id);
        done?.(r);
      });
      const ctl = new Int32Array(regions.ctl);
      this.#shards.push({
        worker,
        ctl,
        result: new Uint32Array(regions.result),
        ops: new ShardOps(),
        slots: 0,
        waiting: 0,
      });
    }
  }

  /** Matches a shard left out because it answered late. */
  get lateShards(): number {
    return this.#lateShards;
  }

  /** Queues stored blocks of a slot for its shard; `flush` sends them. Hashes as `PrefixIndex.applyStored`'s. */
  applyStored(
    workerId: number,
    dpRank: number,
    parent: bigint | null,
    engine: BigUint64Array,
    local: BigUint64Array,
  ): void {
    if (engine.length === 0) return;
    if (local.length < engine.length)
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `${engine.length} engine hashes but ${local.length} local hashes`,
      );
    this.#shardOf(workerId, dpRank).ops.addStored(workerId, dpRank, parent, engine, local);
  }

  /** Sends what was queued; resolves once every shard has applied it, with the operations refused (a missing parent). */
  async flush(): Promise<number> {
    const replies = await Promise.all(
      this.#shards.map((s) => {
        const { buffer, words } = s.ops.take();
        return this.#ask(s, { op: 'apply', id: this.#nextId++, buffer, words }, [buffer]);
      }),
    );
    return replies.reduce((n, r) => n + (r.op === 'applied' ? r.refused : 0), 0);
  }

  /** Every shard's numbers, after what was flushed before. */
  async stats(): Promise<ShardStats[]> {
    const replies = await Promise.all(this.#shards.map((s) => this.#ask(s, { op: 'stats', id: this.#nextId++ })));
    return replies.map((r) =>
      r.op === 'stats'
        ? { entries: r.entries, bytes: r.bytes, distinctBlocks: r.distinctBlocks }
        : { entries: 0, bytes: 0, distinctBlocks: 0 },
    );
  }

  /**
   * For every slot of every shard, the leading blocks of the request (local block hashes) it holds.
   * Synchronous: the main thread waits for the shards (microseconds), never longer than `matchTimeoutMs` each.
   */
  findMatches(hashes: BigUint64Array): ShardedOverlap {
    const n = Math.min(hashes.length, this.#query.length);
    this.#query.set(hashes.subarray(0, n));
    const gen = (this.#gen = (this.#gen + 1) | 0);
    for (const s of this.#shards) {
      Atomics.store(s.ctl, CTL_BLOCKS, n);
      Atomics.store(s.ctl, CTL_GEN, gen);
      Atomics.notify(s.ctl, CTL_GEN);
    }
    const answered: Shard[] = [];
    const deadline = performance.now() + this.#timeoutMs;
    for (const s of this.#shards) {
      // A shard answers in microseconds: poll briefly before sleeping, which saves a futex wake per shard.
      const spinUntil = performance.now() + SPIN_MS;
      while (Atomics.load(s.ctl, CTL_DONE) !== gen && performance.now() < spinUntil);
      for (let done = Atomics.load(s.ctl, CTL_DONE); done !== gen; done = Atomics.load(s.ctl, CTL_DONE)) {
        const left = deadline - performance.now();
        if (left <= 0) break;
        Atomics.wait(s.ctl, CTL_DONE, done, left);
      }
      if (Atomics.load(s.ctl, CTL_DONE) === gen) answered.push(s);
      else this.#lateShards++;
    }
    let count = 0;
    for (const s of answered) count += s.result[0]!;
    const out = {
      count,
      workerIds: new Uint32Array(count),
      dpRanks: new Uint32Array(count),
      depths: new Uint32Array(count),
    };
    let k = 0;
    for (const s of answered) {
      const r = s.result;
      for (let i = 0; i < r[0]!; i++, k++) {
        out.workerIds[k] = r[1 + 3 * i]!;
        out.dpRanks[k] = r[2 + 3 * i]!;
        out.depths[k] = r[3 + 3 * i]!;
      }
    }
    return out;
  }

  /** Ends the shard threads (their indexes with them). */
  async close(): Promise<void> {
    await Promise.all(
      this.#shards.map((s) => {
        s.worker.ref(); // the process waits for them to end before it exits
        return s.worker.terminate();
      }),
    );
  }

  #shardOf(workerId: number, dpRank: number): Shard {
    const key = slotKey(workerId, dpRank);
    let shard = this.#slotShard.get(key);
    if (shard === undefined) {
      shard = this.#shards.reduce((a, b) => (b.slots < a.slots ? b : a));
      shard.slots++;
      this.#slotShard.set(key, shard);
    }
    return shard;
  }

  /** One request to a shard; the shard keeps the process alive until it answers (it does not otherwise). */
  async #ask(shard: Shard, req: ShardRequest, transfer: ArrayBuffer[] = []): Promise<ShardReply> {
    if (shard.waiting++ === 0) shard.worker.ref();
    try {
      return await new Promise((resolve) => {
        this.#pending.set(req.id, resolve);
        shard.worker.postMessage(req, transfer);
      });
    } finally {
      if (--shard.waiting === 0) shard.worker.unref();
    }
  }
}
