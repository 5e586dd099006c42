/**
 * Workers joining and leaving a running gateway (a config reload, a watched
 * workers file). The one path for both, so every source gets the same safety:
 *
 * - join: the worker is registered unavailable, its engine pool opened, and
 *   a health probe (with the /v1/models check) runs at once; the registry's
 *   'added' then brings it into its model's pool, index and KV-event
 *   subscriptions.
 * - leave: the worker is removed from the registry, so it takes no new
 *   request from this moment; its bookings, index entries and subscriptions
 *   go with the registry's 'removed'; its engine pool is closed gracefully,
 *   so the requests it is serving finish.
 *   The prober forgets it, so a worker that flaps leaks nothing.
 * Each join and leave is an info line and a count in
 * `kvgate_worker_membership_changes_total`.
 */
import type { Logger } from 'pino';
import type { HealthProber, WorkerInfo, WorkerRegistry } from '../discovery/index.js';
import type { EngineClient } from '../engines/index.js';

/** Where a worker came from: the config file (at start or on reload); each discovery source adds its name. */
export type WorkerSource = 'static';

/** Where joins and leaves are counted: the gateway's metrics fit this shape. */
interface MembershipMetrics {
  readonly workerMembership: { labels(l: { model: string; source: WorkerSource; change: 'joined' | 'left' }): { inc(): void } };
}

/** Where a model's membership changes are logged and counted. */
interface ModelSink {
  readonly logger: Logger;
  readonly metrics: MembershipMetrics;
}

export class FleetMembers {
  readonly #registry: WorkerRegistry;
  readonly #engine: EngineClient;
  readonly #prober: HealthProber;
  readonly #sinks = new Map<string, ModelSink>();
  readonly #sources = new Map<number, WorkerSource>();

  constructor(registry: WorkerRegistry, engine: EngineClient, prober: HealthProber) {
    this.#registry = registry;
    this.#engine = engine;
    this.#prober = prober;
  }

  /** Membership changes of `model` are logged and counted here (its router's logger and the gateway's metrics). */
  watch(model: string, logger: Logger, metrics: MembershipMetrics): void {
    this.#sinks.set(model, { logger, metrics });
  }

  /** A worker configured at start (its source: the config file). */
  started(w: WorkerInfo): void {
    this.#sources.set(w.id, 'static');
  }

  /**
   * A worker joins: routed to once its engine answers its health probe and serves the model.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for an invalid worker or an id in use (nothing changed).
   */
  join(w: WorkerInfo, source: WorkerSource): void {
    this.#registry.add(w, false);
    this.#engine.addWorker(w.url);
    this.#sources.set(w.id, source);
    this.#note(w, source, 'joined', `worker ${w.id} joins model ${w.model} (${source}): routed to once its engine answers its health probe`);
    void this.#prober.probe(w.id);
  }

  /** A worker leaves: no new request from now on; its in-flight requests finish before its sockets close. */
  leave(id: number): void {
    const w = this.#registry.get(id);
    if (w === undefined) return;
    const source = this.#sources.get(id) ?? 'static';
    this.#registry.remove(id);
    this.#prober.forget(id);
    this.#sources.delete(id);
    this.#note(w, source, 'left', `worker ${w.id} leaves model ${w.model} (${source}): no new requests; in-flight requests finish`);
    // Another registered worker may share the engine (dp ranks split across ids): its pool stays.
    // Closing is graceful: the pool's running requests finish first.
    if (!this.#registry.all().some((o) => o.url === w.url)) void this.#engine.removeWorker(w.url);
  }

  #note(w: WorkerInfo, source: WorkerSource, change: 'joined' | 'left', msg: string): void {
    const sink = this.#sinks.get(w.model);
    sink?.metrics.workerMembership.labels({ model: w.model, source, change }).inc();
    sink?.logger.info({ workerId: w.id, url: w.url, role: w.role, source, change }, msg);
  }
}
