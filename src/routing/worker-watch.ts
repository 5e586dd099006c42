/**
 * What an operator sees of one model's workers: each state change logged with
 * the worker's id and URL (down and up as the registry moves it, a dispatch
 * that found it unreachable, its KV events going stale, resuming or starting,
 * a block size other than the model's), and the per-worker gauges
 * (`kvgate_worker_up`, `kvgate_worker_state`, `kvgate_worker_kv_events_live`,
 * `kvgate_worker_block_size_mismatch`); and the per-worker view /admin/models
 * shows. Health transitions themselves are logged by the prober (discovery).
 *
 * A worker that goes down has its KV-event subscription dropped and its
 * blocks forgotten by the ModelRouter; here its `kv_events_live` drops to 0
 * at once (the router no longer trusts events it does not receive).
 */
import type { WorkerRank, WorkerRole } from '../common/index.js';
import type { WorkerHealthView, WorkerInfo, WorkerRegistry } from '../discovery/index.js';
import type { KvgateError } from '../errors/index.js';
import type { KvEventManager } from '../events/index.js';
import type { RouterContext } from './context.js';
import { KvEventsWatch } from './kv-events-watch.js';
import type { WorkerStatus } from './router-port.js';

const HEALTH_STATES: readonly WorkerHealthView['state'][] = [
  'up',
  'down',
  'ejected',
  'panic',
  'kept',
  'model_mismatch',
  'unknown',
];

export class WorkerWatch {
  readonly #model: string;
  readonly #registry: WorkerRegistry;
  readonly #ctx: RouterContext;
  readonly #health: ((workerId: number) => WorkerHealthView | undefined) | undefined;
  /** KV-event liveness of the workers that are up. */
  readonly #kvEvents: KvEventsWatch;
  readonly #blockSizeWarned = new Set<number>();
  /** Why the model cannot be served now (undefined: it can); the ModelRouter's `unavailable`. */
  readonly #unavailable: (() => KvgateError | undefined) | undefined;
  /** Whether the model could be served at the last check; undefined before the first (`servable`). */
  #servable: boolean | undefined;
  /** Whether the model could be served at some check before this one (its first servable line says "again" after). */
  #wasServable = false;

  constructor(
    model: string,
    registry: WorkerRegistry,
    ctx: RouterContext,
    health: ((workerId: number) => WorkerHealthView | undefined) | undefined,
    unavailable?: () => KvgateError | undefined,
  ) {
    this.#model = model;
    this.#registry = registry;
    this.#ctx = ctx;
    this.#health = health;
    this.#unavailable = unavailable;
    this.#kvEvents = new KvEventsWatch(model, ctx);
    for (const w of registry.all()) if (w.model === model) this.#setUp(w, registry.isAvailable(w.id));
  }

  #labels(w: WorkerInfo): { model: string; worker_id: string; worker_type: WorkerRole } {
    return { model: this.#model, worker_id: String(w.id), worker_type: w.role };
  }

  #setUp(w: WorkerInfo, up: boolean): void {
    this.#ctx.metrics?.workerUp.labels(this.#labels(w)).set(up ? 1 : 0);
  }

  /** The registry made the worker routable but its pool refused it (the pool logged why): not routed to. */
  notRouted(w: WorkerInfo): void {
    this.#setUp(w, false);
    this.servable();
  }

  /** The registry made the worker routable. */
  up(w: WorkerInfo): void {
    this.#setUp(w, true);
    this.#ctx.logger.info({ workerId: w.id, url: w.url, role: w.role }, `worker ${w.id} is up: routed to`);
    this.servable();
  }

  /**
   * Checks whether the model can be served (is listed by /ready and /v1/models) and reports a change: a warn line
   * with the reason and error code when it can no longer be, an info line when it can again, both counted
   * (`kvgate_model_servable_transitions_total`); `kvgate_model_servable` follows. The first check (the ModelRouter,
   * once built) sets the gauge and reports nothing. Run after each worker change and at each tick.
   */
  servable(): void {
    if (this.#unavailable === undefined) return;
    const why = this.#unavailable();
    const now = why === undefined;
    const was = this.#servable;
    this.#servable = now;
    this.#wasServable ||= was === true;
    const m = this.#ctx.metrics;
    m?.modelServable.labels({ model: this.#model }).set(now ? 1 : 0);
    if (was === undefined || was === now) return;
    const to = now ? 'servable' : 'unavailable';
    m?.modelServableTransitions.labels({ model: this.#model, to }).inc();
    if (why === undefined)
      this.#ctx.logger.info(
        { to },
        `model ${this.#model} can be served${this.#wasServable ? ' again' : ''}: listed by /ready and /v1/models`,
      );
    else
      this.#ctx.logger.warn(
        { to, code: why.code, reason: why.message },
        `model ${this.#model} can no longer be served (${why.message}): gone from /ready and /v1/models, ` +
          `its requests refused with ${why.code}`,
      );
  }

  /**
   * The registry took the worker out (health, model check, removal): not routed to. `held`: marked down, its
   * bookings, session pins and cached blocks kept for its return (otherwise dropped); `kvKept`: its KV-event
   * subscriptions kept too.
   */
  down(w: WorkerInfo, held = false, kvKept = false): void {
    this.#setUp(w, false);
    this.#kvEvents.forget(w.id);
    this.#ctx.metrics?.workerKvEventsLive.labels(this.#labels(w)).set(0);
    const health = this.#health?.(w.id);
    this.#ctx.logger.warn(
      { workerId: w.id, url: w.url, role: w.role, health: health?.state, error: health?.lastError, held, kvKept },
      `worker ${w.id} is down: not routed to, its bookings, session pins and cached blocks ${held ? 'kept for its return' : 'dropped'}` +
        (kvKept ? ', its KV events followed' : ''),
    );
    this.servable();
  }

  /** A dispatch could not reach the worker (the prober is asked to probe it now). */
  unreachable(w: WorkerInfo | undefined, workerId: number): void {
    this.#ctx.logger.warn(
      { workerId, url: w?.url },
      `worker ${workerId} is unreachable: a request could not connect; probing it now`,
    );
  }

  /** A KV event of the worker carried a block size other than the model's: logged once per worker, flagged in a gauge. */
  blockSizeMismatch(workerId: number, blockSize: number): void {
    if (this.#blockSizeWarned.has(workerId)) return;
    this.#blockSizeWarned.add(workerId);
    this.#ctx.metrics?.workerBlockSizeMismatch.labels({ model: this.#model, worker_id: String(workerId) }).set(1);
    this.#ctx.logger.warn(
      { workerId, url: this.#registry.get(workerId)?.url, blockSize },
      `worker ${workerId} publishes KV events with a block size other than the model's block_size ${blockSize}: its blocks are ignored ` +
        "(set the model's block_size to the engine's)",
    );
  }

  /** Missed KV-event batches of a rank were replayed from the engine's buffer (gaps and resets are logged by the stream). */
  replayed(slot: WorkerRank, batches: number): void {
    this.#ctx.logger.info(
      { ...slot, url: this.#registry.get(slot.workerId)?.url, batches },
      `worker ${slot.workerId}: missed KV events replayed (${batches} batch(es))`,
    );
  }

  /** Periodic: every configured worker's health state gauge, and whether the model can be served. */
  tickHealth(): void {
    this.servable();
    const m = this.#ctx.metrics;
    if (m === undefined || this.#health === undefined) return;
    for (const w of this.#registry.all()) {
      const h = w.model === this.#model ? this.#health(w.id) : undefined;
      if (h === undefined) continue;
      for (const s of HEALTH_STATES)
        m.workerState.labels({ model: this.#model, worker_id: String(w.id), state: s }).set(s === h.state ? 1 : 0);
    }
  }

  /** Periodic: KV-event liveness of a pool's workers (`KvEventsWatch`: the gauge, each transition logged and counted). */
  tickEvents(workers: readonly WorkerInfo[], events: KvEventManager | undefined): void {
    this.#kvEvents.tick(
      workers.map((w) => ({
        id: w.id,
        role: w.role,
        name: `worker ${w.id}`,
        fields: { workerId: w.id, url: w.url, role: w.role },
        publisher:
          w.kvEvents === undefined
            ? undefined
            : { fields: { endpoint: w.kvEvents.endpoint }, check: 'its kv_events endpoint' },
      })),
      events,
    );
  }

  /** Every configured worker of the model, for /admin/models. */
  status(events: (w: WorkerInfo) => KvEventManager | undefined): WorkerStatus[] {
    return this.#registry
      .all()
      .filter((w) => w.model === this.#model)
      .map((w) => {
        const ev = events(w);
        const last = ev?.liveness.lastEventAt(w.id);
        const h = this.#health?.(w.id);
        return {
          id: w.id,
          up: this.#registry.isAvailable(w.id),
          health: h?.state ?? 'unknown',
          kvEvents:
            ev === undefined || !this.#registry.isAvailable(w.id)
              ? w.kvEvents === undefined
                ? 'off'
                : 'down'
              : ev.eventStatus(w.id),
          kvEventRanksConnected:
            ev === undefined || w.kvEvents === undefined ? undefined : ev.connections(w.id).connected,
          // The liveness clock is monotonic: an age on it, turned into wall time here.
          lastEventAt:
            last === undefined ? undefined : new Date(Date.now() - (this.#ctx.clock.now() - last)).toISOString(),
          lastProbeAt: h?.lastProbeAt === undefined ? undefined : new Date(h.lastProbeAt).toISOString(),
          lastError: h?.lastError,
        };
      });
  }
}
