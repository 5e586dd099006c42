/**
 * KV-event ingestion for a fleet: one subscriber per (worker, dp rank),
 * started and stopped as workers come and go, all applying to one tiered
 * prefix index, with counters and per-slot liveness.
 *
 * State ownership: the index is advisory (what engines said they cache);
 * this manager owns which slots are subscribed, and removing a worker here
 * forgets its blocks in every tier.
 *
 * Pacing: every stream of the manager drains through one `TurnScheduler`, so
 * however many workers flood at once, ingestion takes at most
 * `maxTurnMs` / `maxEventsPerTurn` of each event-loop turn. A timer checks
 * every stream's consistency bound even when its publisher went quiet.
 */
import { slotKey, type Context, type KvSlotSnapshot, type WorkerRank } from '../common/index.js';
import type { IndexMemoryError } from '../errors/index.js';
import type { KvEventApplier } from './applier.js';
import { EventLiveness, type EventStatus } from './liveness.js';
import {
  fillOptions,
  ingestContext,
  kDefaultKvEventOptions,
  type FilledKvEventOptions,
  type IngestContext,
  type KvEventOptions,
} from './options.js';
import { KvEventCounters, combineHooks, type KvEventHooks } from './stats.js';
import { IngestPool } from './ingest-pool.js';
import type { IngestThreadRestartReason } from './ingest-worker.js';
import { KvEventSubscriber, type KvEventTarget, type SlotSubscription } from './subscriber.js';
import { ThreadedSubscriber } from './threaded-subscriber.js';
import type { TieredPrefixIndex } from './tiered-index.js';
import { TurnScheduler } from './turn-scheduler.js';
import { STORAGE_TIERS, type StorageTier } from './types.js';

/** How often quiet streams are checked against their consistency bound, ms (at most). */
const CONSISTENCY_CHECK_MS = 1000;

/**
 * What a manager is built from: the applier to keep true, the process's clock
 * and logger (common's `Context`, or the parts of it given), extra observers,
 * and tuning for every subscriber.
 */
export interface KvEventManagerOptions extends KvEventOptions, Partial<Pick<Context, 'clock' | 'logger'>> {
  /** The applier (and through it the indexes) to keep true. */
  applier: KvEventApplier;
  /** Extra observers (metrics); the manager's own counters always run. */
  hooks?: KvEventHooks | undefined;
  /**
   * A peer replica's snapshot (warm start): a slot subscribed to the same endpoint starts with its
   * blocks and from its cursor, replaying only what the engine published since.
   */
  seeds?: readonly KvSlotSnapshot[] | undefined;
  /** Told of every rebuild: an index the applier writes was discarded and every subscribed slot restores (metrics). */
  onIndexRebuild?: ((err: IndexMemoryError, slots: number) => void) | undefined;
  /**
   * Told of every ingestion thread restarted (`ingestThreads` > 0), by reason (metrics). The threads are the
   * process's, shared by the managers of the same thread count: managers that give the same function are told
   * once per restart (ingest-pool.ts).
   */
  onIngestThreadRestart?: ((reason: IngestThreadRestartReason) => void) | undefined;
}

function sameSource(a: Readonly<KvEventTarget>, b: KvEventTarget): boolean {
  return (
    a.endpoint === b.endpoint &&
    (a.replayEndpoint || undefined) === (b.replayEndpoint || undefined) &&
    (a.topic ?? '') === (b.topic ?? '')
  );
}

export class KvEventManager {
  readonly applier: KvEventApplier;
  readonly counters = new KvEventCounters();
  readonly liveness: EventLiveness;
  readonly #opts: FilledKvEventOptions;
  /** Built once here; every subscriber and stream shares it. */
  readonly #ctx: IngestContext;
  readonly #subs = new Map<string, SlotSubscription>();
  /** The ingestion threads holding the sockets (`ingestThreads` > 0); without them, each subscriber's own socket. */
  readonly #pool: IngestPool | undefined;
  readonly #checkTimer: NodeJS.Timeout;
  readonly #seeds = new Map<string, KvSlotSnapshot>();
  readonly #onIndexRebuild: KvEventManagerOptions['onIndexRebuild'];
  readonly #onIngestThreadRestart: KvEventManagerOptions['onIngestThreadRestart'];
  /** A rebuild is due at the next turn (discards within one turn make one rebuild). */
  #rebuildDue: IndexMemoryError | undefined;
  #closed = false;
  #closing: Promise<void> | undefined;

  constructor(options: KvEventManagerOptions) {
    this.#opts = fillOptions(kDefaultKvEventOptions, options);
    this.applier = options.applier;
    const base = ingestContext({ applier: options.applier, clock: options.clock, logger: options.logger });
    this.liveness = new EventLiveness({ clock: base.clock, staleAfterMs: this.#opts.staleAfterMs });
    const scheduler = new TurnScheduler({
      clock: base.clock,
      maxEventsPerTurn: this.#opts.maxEventsPerTurn,
      maxTurnMs: this.#opts.maxTurnMs,
    });
    this.#ctx = { ...base, hooks: combineHooks(this.counters, options.hooks), liveness: this.liveness, scheduler };
    const every = Math.max(10, Math.min(CONSISTENCY_CHECK_MS, this.#opts.inconsistentAfterMs / 2));
    this.#checkTimer = setInterval(() => {
      for (const sub of this.#subs.values()) sub.stream.checkConsistency();
    }, every);
    this.#checkTimer.unref();
    for (const seed of options.seeds ?? []) this.#seeds.set(slotKey(seed.workerId, seed.dpRank), seed);
    this.#onIndexRebuild = options.onIndexRebuild;
    options.applier.onIndexDiscarded((err) => this.#indexDiscarded(err));
    const threads = this.#opts.ingestThreads;
    this.#onIngestThreadRestart = options.onIngestThreadRestart;
    this.#pool = threads > 0 ? IngestPool.acquire(threads, base.logger, options.onIngestThreadRestart) : undefined;
  }

  /**
   * An index the applier writes was discarded (the module failed an allocation) and holds nothing now.
   * Routing goes on over the empty index (approximate for the model). At the next turn, outside the
   * stream that was applying the batch, every slot starts over and restores from its engine's replay
   * buffer: the index is rebuilt as after a gap. One error line and one count per rebuild.
   */
  #indexDiscarded(err: IndexMemoryError): void {
    if (this.#closed || this.#rebuildDue !== undefined) return;
    this.#rebuildDue = err;
    setImmediate(() => {
      this.#rebuildDue = undefined;
      if (this.#closed) return;
      const subs = [...this.#subs.values()];
      const replay = subs.filter((s) => s.source.replayEndpoint !== undefined).length;
      this.#ctx.logger.error(
        { code: err.code, op: err.detail?.['op'], slots: subs.length, withReplay: replay },
        "prefix index discarded: the WebAssembly module could not allocate memory. Rebuilding it from the engines' " +
          'replay buffers (slots without one from live events); routing is approximate for this model meanwhile',
      );
      this.#onIndexRebuild?.(err, subs.length);
      for (const sub of subs) sub.stream.rebuild();
    });
  }

  /** Threads holding this manager's sockets and decoding its events (`ingestThreads`); 0: the main thread. */
  get ingestThreads(): number {
    return this.#pool === undefined ? 0 : this.#opts.ingestThreads;
  }

  get indexes(): TieredPrefixIndex {
    return this.applier.indexes;
  }

  /**
   * Subscribes to a (worker, dp rank). The same source again is a no-op; a
   * changed endpoint replaces the subscription and clears the slot (another
   * publisher, another sequence).
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an invalid source.
   */
  async add(source: KvEventTarget): Promise<void> {
    if (this.#closed) return;
    const key = slotKey(source.workerId, source.dpRank);
    const existing = this.#subs.get(key);
    if (existing !== undefined) {
      if (sameSource(existing.source, source)) return;
      await this.#stop(key, existing);
      this.applier.clearSlot(source);
    }
    const sub =
      this.#pool === undefined
        ? new KvEventSubscriber(source, this.#ctx, this.#opts)
        : new ThreadedSubscriber(source, this.#ctx, this.#pool, this.#opts);
    this.liveness.register(source);
    const seed = this.#seeds.get(key);
    this.#seeds.delete(key);
    if (seed !== undefined) this.#seed(sub, seed);
    this.#subs.set(key, sub);
    try {
      await sub.start();
    } catch (err) {
      if (this.#subs.get(key) === sub) this.#subs.delete(key);
      this.liveness.unregister(source);
      throw err;
    }
  }

  /** Fills a new subscription's slot from a peer's snapshot and starts its stream at the snapshot's cursor. */
  #seed(sub: SlotSubscription, seed: KvSlotSnapshot): void {
    const { workerId, dpRank, endpoint } = sub.source;
    const at = { workerId, dpRank, endpoint, snapshotEndpoint: seed.endpoint };
    if (seed.endpoint !== endpoint) {
      this.#ctx.logger.warn(
        at,
        'replica snapshot of this slot came from another KV-event endpoint: ignored, the slot starts from the engine alone',
      );
      return;
    }
    const tiers = seed.tiers.filter((t) => (STORAGE_TIERS as readonly string[]).includes(t.tier));
    this.applier.clearSlot(sub.source);
    let blocks = 0;
    for (const t of tiers) blocks += this.indexes.get(t.tier as StorageTier).importSlot(workerId, dpRank, t.pairs);
    // The snapshot's salted chains started at or before its cursor: their later events inherit these salts.
    const salted = this.applier.salts.importSlot(sub.source, seed.salts ?? []);
    // A hybrid model's other KV-cache groups: the events that stored their blocks lie at or before the cursor too.
    const groupBlocks = this.applier.groups?.importSlot(sub.source, seed.groups ?? []) ?? 0;
    sub.stream.seed(seed.cursor);
    // The peer's events for the slot were live when it took the snapshot: score the blocks, not approximately.
    this.liveness.noteEvent(sub.source);
    this.#ctx.logger.info(
      {
        ...at,
        blocks,
        saltedBlocks: salted,
        groupBlocks,
        cursor: String(seed.cursor),
        tiers: tiers.map((t) => t.tier),
      },
      `worker ${workerId} rank ${dpRank}: ${blocks} block(s) from a replica snapshot at KV-event seq ${seed.cursor}; ` +
        'replaying what the engine published since',
    );
  }

  /**
   * What the streams have applied: per subscribed slot with a cursor, its blocks in every tier, the salts of
   * its salted blocks, a hybrid model's other KV-cache groups and that cursor. Taken within one turn, so the
   * blocks are exactly those of the cursors.
   */
  snapshot(): KvSlotSnapshot[] {
    const out: KvSlotSnapshot[] = [];
    for (const sub of this.#subs.values()) {
      const cursor = sub.stream.appliedCursor;
      if (cursor === null) continue;
      const { workerId, dpRank, endpoint } = sub.source;
      const tiers = this.indexes
        .tiers()
        .map((tier) => ({ tier, pairs: this.indexes.get(tier).exportSlot(workerId, dpRank) }));
      const salts = this.applier.salts.exportSlot(sub.source);
      const groups = this.applier.groups?.exportSlot(sub.source) ?? [];
      out.push({
        workerId,
        dpRank,
        endpoint,
        cursor,
        tiers: tiers.filter((t) => t.pairs.length > 0),
        ...(salts.length > 0 ? { salts } : {}),
        ...(groups.length > 0 ? { groups } : {}),
      });
    }
    return out;
  }

  /** Unsubscribes one rank, or every rank of the worker, and forgets their blocks in every tier. */
  async remove(workerId: number, dpRank?: number): Promise<void> {
    const victims = [...this.#subs].filter(
      ([, s]) => s.source.workerId === workerId && (dpRank === undefined || s.source.dpRank === dpRank),
    );
    await Promise.all(
      victims.map(async ([key, sub]) => {
        await this.#stop(key, sub);
        this.applier.removeSlot(sub.source);
        this.liveness.unregister(sub.source);
        // Worker ids are not reused (the picker gives each pod that joins a new one): nothing is kept per gone slot.
        this.counters.forgetSlot(sub.source);
      }),
    );
  }

  /** Makes the subscribed set exactly `sources` (discovery's view of the fleet). */
  async sync(sources: readonly KvEventTarget[]): Promise<void> {
    const wanted = new Set(sources.map((s) => slotKey(s.workerId, s.dpRank)));
    const gone = [...this.#subs.values()].filter((s) => !wanted.has(slotKey(s.source.workerId, s.source.dpRank)));
    await Promise.all(gone.map((s) => this.remove(s.source.workerId, s.source.dpRank)));
    for (const s of sources) await this.add(s);
  }

  async #stop(key: string, sub: SlotSubscription): Promise<void> {
    this.#subs.delete(key);
    await sub.close();
  }

  /** The subscriber of a slot, if subscribed. */
  subscriber(slot: WorkerRank): SlotSubscription | undefined {
    return this.#subs.get(slotKey(slot.workerId, slot.dpRank));
  }

  /** Of a worker's subscribed ranks, how many are connected to their publishers now, and how many there are. */
  connections(workerId: number): { readonly connected: number; readonly ranks: number } {
    let connected = 0;
    let ranks = 0;
    for (const s of this.#subs.values()) {
      if (s.source.workerId !== workerId) continue;
      ranks++;
      if (s.connected) connected++;
    }
    return { connected, ranks };
  }

  /** Every subscribed source. */
  sources(): KvEventTarget[] {
    return [...this.#subs.values()].map((s) => ({ ...s.source }));
  }

  /**
   * Whether to trust the index for a slot (or, without `dpRank`, for every
   * rank of the worker): `live`, or `stale`/`never` for approximate mode.
   */
  eventStatus(workerId: number, dpRank?: number): EventStatus {
    return this.liveness.status(workerId, dpRank);
  }

  /** The router dispatched a request to the slot (feeds `stale` detection). */
  noteDispatch(slot: WorkerRank): void {
    this.liveness.noteDispatch(slot);
  }

  /**
   * Closes every subscriber, then gives the ingestion threads back (the last manager's release closes their
   * sockets and ends them). The indexes are left to their owner. Idempotent: the pool is released once.
   */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.#closed = true;
      clearInterval(this.#checkTimer);
      const all = [...this.#subs];
      this.#subs.clear();
      await Promise.all(all.map(([, s]) => s.close()));
      await this.#pool?.release(this.#onIngestThreadRestart);
    })();
    return this.#closing;
  }
}
