/**
 * The etcd discovery source: the workers registered under a model's
 * `<prefix>/<model>/<id>` keys, applied through `FleetMembers` (source `etcd`).
 *
 * kvgate lists the prefix, then watches it from the listing's revision, so no
 * change falls between the two. A put joins the worker (or, for a changed
 * value, replaces it: leave then join); a delete, including the one etcd makes
 * when a registration's lease expires, makes it leave. A value that is
 * invalid (or names an id in use) is refused whole and logged with every
 * problem; the key's previous worker, if any, stays. Every outcome is counted
 * in `kvgate_discovery_updates_total{source="etcd"}`. A key whose last segment
 * is not a worker id in canonical decimal (`07`, `+7`, `7.0`: `parseEtcdWorkerId`)
 * is refused once (one error line with the key, one `rejected`) until it is
 * deleted, and otherwise ignored: its puts and deletes never touch worker 7.
 *
 * When the watch is lost (etcd stopped or unreachable, the watch cancelled or
 * its revision compacted), the current workers stay and stay routable. kvgate
 * drops that watch and, on a `Backoff` (exponential, with jitter), lists the
 * prefix again, applies the difference against what it holds (a worker whose
 * key is still there stays, untouched) and watches from the new listing's
 * revision. It never resumes from the old revision: that revision may be
 * compacted away, or ahead of a cluster that lost its data, whose watch would
 * stay silent. The watch reports through `WatchReport`, as the Kubernetes
 * sources' do (`kvgate_discovery_watch_*`): losing it is a warn line, resuming
 * it an info line with the workers the new listing holds, each failed attempt
 * a warn line; whether it is live (the report's state) decides whether a
 * failure loses it or is one more failed attempt. The back-off starts again
 * from its minimum only once a watch delivers an event or has stayed open
 * `WATCH_MIN_OPEN_MS`, not when etcd confirms it: a server that ends every
 * watch at once is listed and watched again on a growing delay, not in a loop.
 */
import type { Etcd3, IKeyValue, Watcher } from 'etcd3';
import type { Logger } from 'pino';
import { Backoff, systemClock, type Clock, type Rng } from '../common/index.js';
import {
  etcdModelPrefix,
  parseEtcdWorkerId,
  readEtcdWorker,
  type ConfigProblem,
  type EtcdDiscovery,
  type ModelConfig,
  type WorkerConfig,
} from '../config/index.js';
import { systemScheduler, type Scheduler, type WorkerRegistry } from '../discovery/index.js';
import { isKvgateError } from '../errors/index.js';
import { applyWorkerSet } from './discovered-set.js';
import { ETCD_CALL_TIMEOUT_MS, etcdClient } from './etcd-client.js';
import type { FleetMembers } from './membership.js';
import type { DiscoveryMetrics, WorkerSource } from './source.js';
import { WatchReport } from './watch-report.js';

/** Wait before listing again after a failure: from the minimum, doubling (with jitter) up to the maximum. */
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 5_000;
/** A watch lost sooner than this after etcd confirmed it, with no event, does not reset the back-off. */
const WATCH_MIN_OPEN_MS = 1_000;

type Outcome = 'applied' | 'unchanged' | 'rejected';

export class EtcdWorkersSource implements WorkerSource {
  readonly kind = 'etcd' as const;
  readonly #model: ModelConfig;
  readonly #etcd: EtcdDiscovery;
  readonly #prefix: string;
  readonly #members: FleetMembers;
  readonly #registry: WorkerRegistry;
  readonly #client: Etcd3;
  readonly #backoff: Backoff;
  /** The workers this source brought, by id. */
  #current = new Map<number, WorkerConfig>();
  /** Keys of this prefix refused for their id segment (not canonical), each logged and counted once until deleted. */
  readonly #badKeys = new Set<string>();
  /** The watch being opened or live; any other watcher's events are stale. */
  #watcher: Watcher | undefined;
  #timer: unknown;
  readonly #clock: Clock;
  readonly #scheduler: Scheduler;
  /** When etcd confirmed the watch being live (`#clock`). */
  #openedAt = 0;
  /** The watch's state (starting, live, lost), its gauge, transitions, retries and their lines. */
  readonly #report: WatchReport;
  /** The attempt to list and watch in progress, counted from 1 since the watch was last live. */
  #attempt = 0;
  #sink: { logger: Logger; metrics: DiscoveryMetrics } | undefined;
  #closed = false;

  /** `rng` draws the retries' jitter; `opts` are the clock and timers (tests drive them). */
  constructor(
    model: ModelConfig,
    registry: WorkerRegistry,
    members: FleetMembers,
    rng: Rng,
    opts: { clock?: Clock; scheduler?: Scheduler } = {},
  ) {
    this.#clock = opts.clock ?? systemClock;
    this.#scheduler = opts.scheduler ?? systemScheduler;
    this.#model = model;
    this.#etcd = model.etcd!;
    this.#prefix = etcdModelPrefix(this.#etcd.prefix, model.name);
    this.#registry = registry;
    this.#members = members;
    this.#client = etcdClient(this.#etcd.endpoints);
    this.#backoff = new Backoff(RETRY_MIN_MS, RETRY_MAX_MS, rng);
    this.#report = new WatchReport({
      model: model.name,
      source: 'etcd',
      what: `etcd watch of ${this.#prefix}`,
      fields: { prefix: this.#prefix },
      stays: 'the current workers stay',
      retryLevel: 'warn',
    });
  }

  /** Lists and watches the model's prefix from now on; outcomes go to `logger` and `metrics`. */
  start(logger: Logger, metrics: DiscoveryMetrics): void {
    if (this.#closed || this.#sink !== undefined) return;
    this.#sink = { logger, metrics };
    this.#report.start(logger, metrics);
    logger.info(
      { endpoints: this.#etcd.endpoints, prefix: this.#prefix },
      `watching etcd prefix ${this.#prefix} for workers of model ${this.#model.name}`,
    );
    void this.#sync();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) this.#scheduler.clearTimeout(this.#timer);
    const watcher = this.#watcher;
    this.#watcher = undefined;
    await watcher?.cancel().catch(() => undefined);
    this.#client.close();
  }

  /** Lists the prefix, applies the difference, and opens a watch from the listing's revision. */
  async #sync(): Promise<void> {
    this.#timer = undefined;
    if (this.#closed || this.#sink === undefined) return;
    this.#attempt++;
    let revision: bigint;
    try {
      const listing = await this.#client.getAll().prefix(this.#prefix).exec();
      if (this.#closed) return;
      this.#applyListing(listing.kvs);
      revision = BigInt(listing.header.revision);
    } catch (err) {
      this.#retry(err as Error, `cannot list ${this.#prefix}: ${(err as Error).message}`);
      return;
    }
    this.#watch(revision + 1n);
  }

  /**
   * Opens a watch from `revision`. `create()` is not used: it waits through disconnections (etcd3 reconnects
   * on its own schedule, from the old revision) and gives no handle to drop a watch still connecting.
   */
  #watch(revision: bigint): void {
    const watcher = this.#client.watch().prefix(this.#prefix).startRevision(String(revision)).watcher();
    this.#watcher = watcher;
    const unconfirmed = new Error(`etcd did not confirm the watch within ${ETCD_CALL_TIMEOUT_MS} ms`);
    const opening = this.#scheduler.setTimeout(() => this.#dropped(watcher, unconfirmed), ETCD_CALL_TIMEOUT_MS);
    watcher.on('connected', () => {
      this.#scheduler.clearTimeout(opening);
      if (this.#watcher === watcher) this.#watching();
    });
    watcher.on('put', (kv) => this.#event(watcher) && this.#put(kv));
    watcher.on('delete', (kv) => this.#event(watcher) && this.#delete(kv.key.toString()));
    // 'disconnected': the stream failed (etcd3 would resume it from the old revision: dropped instead);
    // 'error': etcd cancelled the watch (a compacted revision, for one), and etcd3 has let it go already.
    const drop = (err: Error, cancelled: boolean): void => {
      this.#scheduler.clearTimeout(opening);
      this.#dropped(watcher, err, cancelled);
    };
    watcher.on('disconnected', (err: Error) => drop(err, false));
    watcher.on('error', (err: Error) => drop(err, true));
  }

  /** An event of `watcher`: whether it is the current watch's; if so the watch works, and the next loss waits the minimum. */
  #event(watcher: Watcher): boolean {
    if (this.#watcher !== watcher) return false;
    this.#backoff.reset();
    return true;
  }

  /** The watch is live: a lost one is back, with the workers the listing before it applied. */
  #watching(): void {
    const was = this.#report.live(this.#attempt, {
      fields: { workers: [...this.#current.keys()] },
      detail: `listed again, ${this.#current.size} workers`,
    });
    if (was !== 'lost' && this.#attempt > 1) {
      this.#sink!.logger.info(
        { prefix: this.#prefix, attempts: this.#attempt },
        `etcd watch of ${this.#prefix} established`,
      );
    }
    this.#attempt = 0;
    // Not `#backoff.reset()`: a watch etcd confirms and ends at once would be opened again every RETRY_MIN_MS.
    this.#openedAt = this.#clock.now();
  }

  /** A watch failed, opening or live: dropped (unless etcd `cancelled` it), and the prefix listed again after the back-off. */
  #dropped(watcher: Watcher, err: Error, cancelled = false): void {
    if (!cancelled) void watcher.cancel().catch(() => undefined);
    if (this.#watcher !== watcher || this.#closed) return;
    this.#watcher = undefined;
    // A live watch lost is not a failed attempt: the listing after the back-off is the first of its own.
    if (this.#report.state !== 'live') {
      this.#retry(err);
      return;
    }
    this.#report.lost(err);
    if (this.#clock.now() - this.#openedAt >= WATCH_MIN_OPEN_MS) this.#backoff.reset();
    this.#schedule(this.#backoff.next());
  }

  /**
   * A failed attempt to list and watch: one line (`reason`, or the watch's `<what> failed: <err>`), then the next
   * attempt after the back-off.
   */
  #retry(err: Error, reason?: string): void {
    if (this.#closed) return;
    const retryInMs = this.#backoff.next();
    this.#report.failed(err, retryInMs, { fields: { attempt: this.#attempt }, reason });
    this.#schedule(retryInMs);
  }

  #schedule(ms: number): void {
    this.#timer = this.#scheduler.setTimeout(() => void this.#sync(), ms);
  }

  /** A listing of the whole prefix: every key in it is the truth; keys gone from it leave. */
  #applyListing(kvs: readonly IKeyValue[]): void {
    const next = new Map<number, WorkerConfig>();
    const listed = new Set<string>();
    for (const kv of kvs) {
      const key = kv.key.toString();
      if (!this.#ours(key)) continue;
      listed.add(key);
      const id = this.#idOf(key);
      const w = this.#read(key, kv.value.toString());
      // A refused value keeps the key's previous worker; a key refused for its id names none.
      const kept = w ?? (id === undefined ? undefined : this.#current.get(id));
      if (kept !== undefined) next.set(kept.id, kept);
    }
    for (const key of this.#badKeys) if (!listed.has(key)) this.#badKeys.delete(key);
    this.#apply(next);
  }

  #put(kv: IKeyValue): void {
    const key = kv.key.toString();
    if (!this.#ours(key)) return;
    const w = this.#read(key, kv.value.toString());
    if (w === undefined) return;
    const next = new Map(this.#current);
    next.set(w.id, w);
    this.#apply(next);
  }

  #delete(key: string): void {
    if (!this.#ours(key)) return;
    const id = this.#idOf(key);
    // A refused key's delete leaves the worker whose id it resembles alone.
    if (id === undefined) {
      this.#badKeys.delete(key);
      return;
    }
    const next = new Map(this.#current);
    next.delete(id);
    this.#apply(next);
  }

  /** Keys of this model: one segment after the prefix (a model named `a` does not take `a/b`'s keys). */
  #ours(key: string): boolean {
    return key.startsWith(this.#prefix) && !key.slice(this.#prefix.length).includes('/');
  }

  /** The worker id a key of this model names; undefined when its segment is not one (in canonical form). */
  #idOf(key: string): number | undefined {
    return parseEtcdWorkerId(key.slice(this.#prefix.length));
  }

  /**
   * The key's worker, or undefined (logged and counted) when its registration is refused. A key refused for its
   * id is logged and counted once, until it is deleted: its every put and each listing would say the same.
   */
  #read(key: string, text: string): WorkerConfig | undefined {
    if (this.#idOf(key) === undefined) {
      if (this.#badKeys.has(key)) return undefined;
      this.#badKeys.add(key);
    }
    try {
      return readEtcdWorker(this.#model, key, text, this.#taken());
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      this.#count('rejected');
      this.#sink?.logger.error(
        { key, problems: (err.detail?.problems ?? []) as ConfigProblem[] },
        `etcd registration rejected: ${err.message}`,
      );
      return undefined;
    }
  }

  #apply(next: Map<number, WorkerConfig>): void {
    const change = applyWorkerSet(this.#members, 'etcd', this.#current, next, (w, err) => {
      // An id another source took since the value was read: this one stays out, the next put or relist retries.
      this.#count('rejected');
      this.#sink?.logger.error(
        { prefix: this.#prefix, workerId: w.id },
        `etcd worker ${w.id} cannot join: ${err.message}`,
      );
    });
    if (change === undefined) {
      this.#count('unchanged');
      return;
    }
    this.#current = next;
    this.#count('applied');
    this.#sink?.logger.info(
      { prefix: this.#prefix, joined: change.joined.map((w) => w.id), left: change.left.map((w) => w.id) },
      `etcd workers applied: ${change.joined.length} joined, ${change.left.length} left`,
    );
  }

  #count(outcome: Outcome): void {
    this.#sink?.metrics.discoveryUpdates.labels({ model: this.#model.name, source: 'etcd', outcome }).inc();
  }

  /** Ids held by every other worker of the gateway (this source's own may stay or change). */
  #taken(): Map<number, string> {
    const out = new Map<number, string>();
    for (const w of this.#registry.all()) {
      if (!this.#current.has(w.id))
        out.set(w.id, `worker ${w.id} of model ${w.model} (${this.#members.sourceOf(w.id) ?? 'static'})`);
    }
    return out;
  }
}
