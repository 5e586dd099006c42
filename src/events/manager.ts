/**
 * KV-event ingestion for a fleet: one subscriber per (worker, dp rank),
 * started and stopped as workers come and go, all applying to one tiered
 * prefix index, with counters and per-slot liveness.
 *
 * State ownership: the index is advisory (what engines said they cache);
 * this manager owns which slots are subscribed, and removing a worker here
 * forgets its blocks in every tier.
 */
import { systemClock, type Clock } from '../core/clock.js';
import { KvEventApplier } from './applier.js';
import { EventLiveness, type EventStatus } from './liveness.js';
import type { EventLog } from './log.js';
import { KvEventCounters, combineHooks, type KvEventHooks } from './stats.js';
import { KvEventSubscriber, type KvEventSource } from './subscriber.js';
import type { TieredPrefixIndex } from './tiered-index.js';

export interface KvEventManagerOptions {
  /** The applier (and through it the indexes) to keep true. */
  applier: KvEventApplier;
  clock?: Clock | undefined;
  /** Silence while serving after which a slot is `stale`. Default 30000 ms. */
  staleAfterMs?: number | undefined;
  /** Extra observers (metrics); the manager's own counters always run. */
  hooks?: KvEventHooks | undefined;
  log?: EventLog | undefined;
  replayTimeoutMs?: number | undefined;
  receiveHighWaterMark?: number | undefined;
  maxPendingBatches?: number | undefined;
  logIntervalMs?: number | undefined;
}

function slotKey(workerId: number, dpRank: number): string {
  return `${workerId}:${dpRank}`;
}

function sameSource(a: Readonly<KvEventSource>, b: KvEventSource): boolean {
  return a.endpoint === b.endpoint && (a.replayEndpoint || undefined) === (b.replayEndpoint || undefined) && (a.topic ?? '') === (b.topic ?? '');
}

export class KvEventManager {
  readonly applier: KvEventApplier;
  readonly counters = new KvEventCounters();
  readonly liveness: EventLiveness;
  readonly #opts: KvEventManagerOptions;
  readonly #hooks: KvEventHooks;
  readonly #subs = new Map<string, KvEventSubscriber>();
  #closed = false;

  constructor(opts: KvEventManagerOptions) {
    this.#opts = opts;
    this.applier = opts.applier;
    this.liveness = new EventLiveness({ clock: opts.clock ?? systemClock, staleAfterMs: opts.staleAfterMs ?? 30_000 });
    this.#hooks = combineHooks(this.counters, opts.hooks);
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
  async add(source: KvEventSource): Promise<void> {
    if (this.#closed) return;
    const key = slotKey(source.workerId, source.dpRank);
    const existing = this.#subs.get(key);
    if (existing !== undefined) {
      if (sameSource(existing.source, source)) return;
      await this.#stop(key, existing);
      this.applier.clearSlot(source.workerId, source.dpRank);
    }
    const sub = new KvEventSubscriber(source, {
      applier: this.applier,
      hooks: this.#hooks,
      liveness: this.liveness,
      log: this.#opts.log,
      clock: this.#opts.clock,
      replayTimeoutMs: this.#opts.replayTimeoutMs,
      receiveHighWaterMark: this.#opts.receiveHighWaterMark,
      maxPendingBatches: this.#opts.maxPendingBatches,
      logIntervalMs: this.#opts.logIntervalMs,
    });
    sub.start();
    this.#subs.set(key, sub);
    this.liveness.register(source.workerId, source.dpRank);
  }

  /** Unsubscribes one rank, or every rank of the worker, and forgets their blocks in every tier. */
  async remove(workerId: number, dpRank?: number): Promise<void> {
    const victims = [...this.#subs].filter(([, s]) => s.source.workerId === workerId && (dpRank === undefined || s.source.dpRank === dpRank));
    await Promise.all(victims.map(async ([key, sub]) => {
      await this.#stop(key, sub);
      this.applier.removeSlot(sub.source.workerId, sub.source.dpRank);
      this.liveness.unregister(sub.source.workerId, sub.source.dpRank);
    }));
  }

  /** Makes the subscribed set exactly `sources` (discovery's view of the fleet). */
  async sync(sources: readonly KvEventSource[]): Promise<void> {
    const wanted = new Set(sources.map((s) => slotKey(s.workerId, s.dpRank)));
    const gone = [...this.#subs.values()].filter((s) => !wanted.has(slotKey(s.source.workerId, s.source.dpRank)));
    await Promise.all(gone.map((s) => this.remove(s.source.workerId, s.source.dpRank)));
    for (const s of sources) await this.add(s);
  }

  async #stop(key: string, sub: KvEventSubscriber): Promise<void> {
    this.#subs.delete(key);
    await sub.close();
  }

  /** The subscriber of a slot, if subscribed. */
  subscriber(workerId: number, dpRank = 0): KvEventSubscriber | undefined {
    return this.#subs.get(slotKey(workerId, dpRank));
  }

  /** Every subscribed source. */
  sources(): KvEventSource[] {
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
  noteDispatch(workerId: number, dpRank: number): void {
    this.liveness.noteDispatch(workerId, dpRank);
  }

  /** Closes every subscriber. The indexes are left to their owner. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    const all = [...this.#subs];
    this.#subs.clear();
    await Promise.all(all.map(([, s]) => s.close()));
  }
}
