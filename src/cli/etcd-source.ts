/**
 * The etcd discovery source: the workers registered under a model's
 * `<prefix>/<model>/<id>` keys, applied through `FleetMembers` (source `etcd`).
 *
 * kvgate lists the prefix, then watches it from the listing's revision, so no
 * change falls between the two. A put joins the worker (or, for a changed
 * value, replaces it: leave then join); a delete, including the one etcd makes
 * when a registration's lease expires, makes it leave. A value that is
 * invalid (or names an id in use) is refused whole and logged with every
 * problem; the key's previous worker, if any, stays. When the watch is lost
 * (etcd unreachable, the watch cancelled or compacted), kvgate lists the
 * prefix again once it can and applies the difference; until then the current
 * workers stay. Every outcome is counted in
 * `kvgate_discovery_updates_total{source="etcd"}`.
 */
import { Etcd3, type IKeyValue, type Watcher } from 'etcd3';
import type { Logger } from 'pino';
import { etcdModelPrefix, readEtcdWorker, type ConfigProblem, type EtcdDiscovery, type ModelConfig, type WorkerConfig } from '../config/index.js';
import type { WorkerRegistry } from '../discovery/index.js';
import { isKvgateError } from '../errors/index.js';
import { applyWorkerSet } from './discovered-set.js';
import type { FleetMembers } from './membership.js';
import type { DiscoveryMetrics } from './workers-file.js';

/** Wait before listing again after a failure, doubling up to the maximum. */
const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;

type Outcome = 'applied' | 'unchanged' | 'rejected';

export class EtcdWorkersSource {
  readonly #model: ModelConfig;
  readonly #etcd: EtcdDiscovery;
  readonly #prefix: string;
  readonly #members: FleetMembers;
  readonly #registry: WorkerRegistry;
  readonly #client: Etcd3;
  /** The workers this source brought, by id. */
  #current = new Map<number, WorkerConfig>();
  #watcher: Watcher | undefined;
  #timer: NodeJS.Timeout | undefined;
  #retryMs = RETRY_MIN_MS;
  #sink: { logger: Logger; metrics: DiscoveryMetrics } | undefined;
  #closed = false;

  constructor(model: ModelConfig, registry: WorkerRegistry, members: FleetMembers) {
    this.#model = model;
    this.#etcd = model.etcd!;
    this.#prefix = etcdModelPrefix(this.#etcd.prefix, model.name);
    this.#registry = registry;
    this.#members = members;
    this.#client = new Etcd3({ hosts: [...this.#etcd.endpoints] });
  }

  /** Lists and watches the model's prefix from now on; outcomes go to `logger` and `metrics`. */
  start(logger: Logger, metrics: DiscoveryMetrics): void {
    if (this.#closed || this.#sink !== undefined) return;
    this.#sink = { logger, metrics };
    logger.info({ endpoints: this.#etcd.endpoints, prefix: this.#prefix }, `watching etcd prefix ${this.#prefix} for workers of model ${this.#model.name}`);
    void this.#sync();
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    const watcher = this.#watcher;
    this.#watcher = undefined;
    await watcher?.cancel().catch(() => undefined);
    this.#client.close();
  }

  /** Lists the prefix, applies the difference, and watches from the listing's revision. */
  async #sync(): Promise<void> {
    const sink = this.#sink;
    if (this.#closed || sink === undefined) return;
    let watcher: Watcher;
    try {
      const listing = await this.#client.getAll().prefix(this.#prefix).exec();
      if (this.#closed) return;
      this.#applyListing(listing.kvs);
      watcher = await this.#client.watch().prefix(this.#prefix).startRevision(String(BigInt(listing.header.revision) + 1n)).create();
    } catch (err) {
      this.#retry(`cannot list ${this.#prefix}: ${(err as Error).message}`);
      return;
    }
    if (this.#closed) {
      void watcher.cancel().catch(() => undefined);
      return;
    }
    this.#retryMs = RETRY_MIN_MS;
    this.#watcher = watcher;
    watcher.on('put', (kv) => this.#put(kv));
    watcher.on('delete', (kv) => this.#delete(kv.key.toString()));
    // The client re-establishes a dropped watch from its last revision; a list on the way back catches up
    // with whatever it could not replay (a compacted revision, a watch the server cancelled).
    watcher.on('disconnected', () => this.#closed || sink.logger.warn({ prefix: this.#prefix }, `etcd watch of ${this.#prefix} lost; the current workers stay until it is back`));
    watcher.on('connected', () => void this.#relist());
    watcher.on('error', (err) => {
      if (this.#watcher !== watcher) return;
      this.#watcher = undefined;
      void watcher.cancel().catch(() => undefined);
      this.#retry(`etcd watch of ${this.#prefix} failed: ${err.message}`);
    });
  }

  /** A reconnected watch: list again and apply the difference (the watch goes on). */
  async #relist(): Promise<void> {
    try {
      const listing = await this.#client.getAll().prefix(this.#prefix).exec();
      if (!this.#closed) this.#applyListing(listing.kvs);
    } catch (err) {
      this.#sink?.logger.warn({ prefix: this.#prefix, err: (err as Error).message }, `etcd relist of ${this.#prefix} failed; the watch goes on`);
    }
  }

  #retry(reason: string): void {
    if (this.#closed) return;
    this.#sink?.logger.error({ prefix: this.#prefix, retryInMs: this.#retryMs }, `${reason}; the current workers stay, retrying`);
    this.#timer = setTimeout(() => void this.#sync(), this.#retryMs);
    this.#timer.unref();
    this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
  }

  /** A listing of the whole prefix: every key in it is the truth; keys gone from it leave. */
  #applyListing(kvs: readonly IKeyValue[]): void {
    const next = new Map<number, WorkerConfig>();
    for (const kv of kvs) {
      const key = kv.key.toString();
      if (!this.#ours(key)) continue;
      const w = this.#read(key, kv.value.toString());
      // A refused value keeps the key's previous worker.
      const id = w?.id ?? Number(key.slice(this.#prefix.length));
      const kept = w ?? this.#current.get(id);
      if (kept !== undefined) next.set(kept.id, kept);
    }
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
    const next = new Map(this.#current);
    next.delete(Number(key.slice(this.#prefix.length)));
    this.#apply(next);
  }

  /** Keys of this model: one segment after the prefix (a model named `a` does not take `a/b`'s keys). */
  #ours(key: string): boolean {
    return key.startsWith(this.#prefix) && !key.slice(this.#prefix.length).includes('/');
  }

  /** The key's worker, or undefined (logged and counted) when its registration is refused. */
  #read(key: string, text: string): WorkerConfig | undefined {
    try {
      return readEtcdWorker(this.#model, key, text, this.#taken());
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      this.#count('rejected');
      this.#sink?.logger.error({ key, problems: (err.detail?.problems ?? []) as ConfigProblem[] }, `etcd registration rejected: ${err.message}`);
      return undefined;
    }
  }

  #apply(next: Map<number, WorkerConfig>): void {
    const change = applyWorkerSet(this.#members, 'etcd', this.#current, next, (w, err) => {
      // An id another source took since the value was read: this one stays out, the next put or relist retries.
      this.#count('rejected');
      this.#sink?.logger.error({ prefix: this.#prefix, workerId: w.id }, `etcd worker ${w.id} cannot join: ${err.message}`);
    });
    if (change === undefined) {
      this.#count('unchanged');
      return;
    }
    this.#current = next;
    this.#count('applied');
    this.#sink?.logger.info({ prefix: this.#prefix, joined: change.joined.map((w) => w.id), left: change.left.map((w) => w.id) },
      `etcd workers applied: ${change.joined.length} joined, ${change.left.length} left`);
  }

  #count(outcome: Outcome): void {
    this.#sink?.metrics.discoveryUpdates.labels({ model: this.#model.name, source: 'etcd', outcome }).inc();
  }

  /** Ids held by every other worker of the gateway (this source's own may stay or change). */
  #taken(): Map<number, string> {
    const out = new Map<number, string>();
    for (const w of this.#registry.all()) {
      if (!this.#current.has(w.id)) out.set(w.id, `worker ${w.id} of model ${w.model} (${this.#members.sourceOf(w.id) ?? 'static'})`);
    }
    return out;
  }
}
