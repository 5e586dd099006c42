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
import type { GatewayConfig } from '../config/index.js';
import type { HealthProber, WorkerInfo, WorkerRegistry } from '../discovery/index.js';
import type { EngineClient } from '../engines/index.js';
import type { WorkerSourceKind } from './source.js';

/**
 * A worker's standing as `/admin/models` shows it: `joining` (registered, not yet passed its first
 * probe), `ready` (routed to), `draining` (left; its in-flight requests finish), `mismatched` (its engine
 * serves another model: out altogether; or another block size or tokenizer: routed without KV overlap),
 * `down` (failing its health probes).
 */
export type WorkerState = 'joining' | 'ready' | 'draining' | 'mismatched' | 'down';

/** Where joins and leaves are counted: the gateway's metrics fit this shape. */
/** joined, left (no new request), drained (a left worker's in-flight requests done, its engine pool closed). */
type MembershipChange = 'joined' | 'left' | 'drained';

interface MembershipMetrics {
  readonly workerMembership: {
    labels(l: { model: string; source: WorkerSourceKind; change: MembershipChange }): { inc(): void };
  };
  /** Removes every series labelled with the worker's id (it is gone: ids come and go with the fleet). */
  forgetWorker(workerId: number): unknown;
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
  readonly #sources = new Map<number, WorkerSourceKind>();
  /** Workers of a discovery source (not `static`), by id: the served config lists them beside the file's. */
  readonly #discovered = new Map<number, WorkerInfo>();
  /** Workers that joined and have not yet been routable. */
  readonly #joining = new Set<number>();
  /** Workers that left while their engine pool finishes the requests it serves. */
  readonly #draining = new Map<number, { readonly worker: WorkerInfo; readonly source: WorkerSourceKind }>();
  readonly #listeners: (() => void)[] = [];
  readonly #joinListeners: ((w: WorkerInfo) => void)[] = [];
  /** Workers kept out of KV-aware routing by a check on join (block size, tokenizer), with the reason. */
  readonly #mismatched = new Map<number, string>();

  constructor(registry: WorkerRegistry, engine: EngineClient, prober: HealthProber) {
    this.#registry = registry;
    this.#engine = engine;
    this.#prober = prober;
    registry.on('added', (w) => this.#joining.delete(w.id));
  }

  /** Called after every join and leave of a discovered worker, and when a draining one is gone. */
  onChange(listener: () => void): void {
    this.#listeners.push(listener);
  }

  /** Called when a worker joins at runtime (after it is registered; the engine checks start here). */
  onJoin(listener: (w: WorkerInfo) => void): void {
    this.#joinListeners.push(listener);
  }

  /** The workers of `model` a discovery source brought (registered, routable or not), by id. */
  discovered(model: string): WorkerInfo[] {
    return [...this.#discovered.values()].filter((w) => w.model === model).sort((a, b) => a.id - b.id);
  }

  /** `config` with each model's workers followed by those its discovery sources brought (what the gateway serves). */
  served(config: GatewayConfig): GatewayConfig {
    return {
      ...config,
      models: config.models.map((m) => ({ ...m, workers: [...m.workers, ...this.discovered(m.name)] })),
    };
  }

  /** The workers of `model` that left and are finishing their in-flight requests. */
  draining(model: string): { worker: WorkerInfo; source: WorkerSourceKind }[] {
    return [...this.#draining.values()].filter((d) => d.worker.model === model);
  }

  /** A worker that left and is finishing its in-flight requests. */
  drainingWorker(id: number): WorkerInfo | undefined {
    return this.#draining.get(id)?.worker;
  }

  /** Why a worker is mismatched: its engine serves another model, or uses another block size or tokenizer. */
  mismatchOf(id: number): string | undefined {
    const check = this.#prober.modelCheck(id);
    if (check?.kind === 'mismatch') return `its engine does not serve ${check.expected}`;
    return this.#mismatched.get(id);
  }

  /** Where a registered (or draining) worker came from. */
  sourceOf(id: number): WorkerSourceKind | undefined {
    return this.#sources.get(id) ?? this.#draining.get(id)?.source;
  }

  /** A worker's state (see `WorkerState`); undefined for an unknown id. */
  state(id: number): WorkerState | undefined {
    if (this.#registry.get(id) === undefined) return this.#draining.has(id) ? 'draining' : undefined;
    if (this.mismatchOf(id) !== undefined) return 'mismatched';
    if (this.#registry.isAvailable(id)) return 'ready';
    return this.#joining.has(id) ? 'joining' : 'down';
  }

  /** Marks a worker mismatched (`reason` says why), or clears it (undefined). */
  setMismatch(id: number, reason: string | undefined): void {
    if (reason === undefined) this.#mismatched.delete(id);
    else if (this.#registry.get(id) !== undefined) this.#mismatched.set(id, reason);
  }

  /** Membership changes of `model` are logged and counted here (its router's logger and the gateway's metrics). */
  watch(model: string, logger: Logger, metrics: MembershipMetrics): void {
    this.#sinks.set(model, { logger, metrics });
  }

  /** A worker registered at start (from the config file, or a workers file). */
  started(w: WorkerInfo, source: WorkerSourceKind = 'static'): void {
    this.#sources.set(w.id, source);
    if (source !== 'static') this.#discovered.set(w.id, w);
  }

  /**
   * A worker joins: routed to once its engine answers its health probe and serves the model.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for an invalid worker or an id in use (nothing changed).
   */
  join(w: WorkerInfo, source: WorkerSourceKind): void {
    this.#registry.add(w, false);
    this.#engine.addWorker(w.url);
    this.#sources.set(w.id, source);
    this.#joining.add(w.id);
    this.#draining.delete(w.id);
    if (source !== 'static') this.#discovered.set(w.id, w);
    this.#changed();
    this.#note(
      w,
      source,
      'joined',
      `worker ${w.id} joins model ${w.model} (${source}): routed to once its engine answers its health probe`,
    );
    void this.#prober.probe(w.id);
    for (const l of this.#joinListeners) l(w);
  }

  /** A worker leaves: no new request from now on; its in-flight requests finish before its sockets close. */
  leave(id: number): void {
    const w = this.#registry.get(id);
    if (w === undefined) return;
    const source = this.#sources.get(id) ?? 'static';
    this.#registry.remove(id);
    this.#prober.forget(id);
    this.#sources.delete(id);
    this.#joining.delete(id);
    this.#discovered.delete(id);
    this.#mismatched.delete(id);
    this.#note(
      w,
      source,
      'left',
      `worker ${w.id} leaves model ${w.model} (${source}): no new requests; in-flight requests finish`,
    );
    // Another registered worker may share the engine (dp ranks split across ids): its pool stays.
    // Closing is graceful: the pool's running requests finish first; until then the worker is draining.
    if (!this.#registry.all().some((o) => o.url === w.url)) {
      const entry = { worker: w, source };
      this.#draining.set(id, entry);
      void this.#engine.removeWorker(w.url).finally(() => {
        if (this.#draining.get(id) === entry) {
          this.#draining.delete(id);
          this.#note(
            w,
            source,
            'drained',
            `worker ${w.id} drained: its in-flight requests are done, its connections closed`,
          );
          this.#gone(w);
        }
        this.#changed();
      });
    } else this.#gone(w);
    this.#changed();
  }

  /**
   * The worker is gone for good (drained, or left an engine another worker still serves): its series go, so a
   * fleet whose ids come and go (pods, registrations) does not pile up series of workers long gone.
   */
  #gone(w: WorkerInfo): void {
    this.#sinks.get(w.model)?.metrics.forgetWorker(w.id);
  }

  #changed(): void {
    for (const l of this.#listeners) l();
  }

  #note(w: WorkerInfo, source: WorkerSourceKind, change: MembershipChange, msg: string): void {
    const sink = this.#sinks.get(w.model);
    sink?.metrics.workerMembership.labels({ model: w.model, source, change }).inc();
    sink?.logger.info({ workerId: w.id, url: w.url, role: w.role, source, change }, msg);
  }
}
