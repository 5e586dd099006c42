/**
 * Active health checking: probes each worker's GET /health on an interval and
 * flips its availability in the registry after `unhealthyAfter` consecutive
 * failures (down) or one success (up). `reportFailure` lets the dispatch path
 * ask for an immediate probe when a connection fails, so a dead engine stops
 * receiving traffic within one probe round trip instead of one interval.
 *
 * Two guards keep the gateway's own trouble from emptying a model:
 * - a probe's timeout counts event-loop time that was free to run (see
 *   loop-timeout.ts), so a gateway whose loop is saturated does not blame its
 *   engines for answers it has not read yet;
 * - at most `maxEjectedPercent` of a model's workers (all roles together, and
 *   at least one, as Envoy's `max_ejection_percent`) are ejected at once, on
 *   health or on dispatch errors alike (the limit is the shared ejection
 *   ledger's, ./ejection.ts): beyond it, a failing worker stays routable, and
 *   that is logged and counted. When an ejected worker comes back, the next
 *   failing probe of a kept one ejects it;
 * - a pool (the model's workers of one role) below its panic threshold routes
 *   to its ejected workers too (Envoy's panic mode, the ledger's): with panic
 *   on, a pool's only worker is never out.
 * A passing probe lifts the prober's own hold, and an outlier ejection
 * (./outlier.ts) that connection failures alone earned if the probe started
 * during it; one earned by 5xx answers stays until its ejection time ends.
 * Every transition (ejected, kept, readmitted) is logged at warn with the
 * worker's id and URL and counted in `kvgate_worker_health_transitions_total`.
 *
 * Model check: when a worker first answers its health probe, when it comes
 * back after being down, and every `modelsRefreshMs` after that, the prober
 * also reads the engine's `/v1/models` (./engine-models.ts). An engine that
 * does not serve the worker's served model name is kept down (not routed
 * to) for as long as that lasts; the LoRA adapters it lists are recorded in
 * the registry. An engine whose list cannot be read keeps its health-probe
 * state (not every engine has the endpoint). `onModelCheck` hears every
 * change of outcome, so the caller logs and counts it.
 */
import { request } from 'undici';
import { systemClock, type Clock, type Logger } from '../common/index.js';
import { checkEngineModels, type ModelCheck } from './engine-models.js';
import { Ejections, type EjectionMetrics } from './ejection.js';
import { loopTimeout, systemScheduler, type Scheduler } from './loop-timeout.js';
import type { WorkerInfo, WorkerRegistry } from './registry.js';

/** Where transitions are counted: kvgate's metrics registry fits this shape. */
export interface HealthMetrics {
  readonly healthTransitions: {
    labels(labels: { model: string; worker_id: string; transition: HealthTransition }): { inc(): void };
  };
}

type HealthTransition = 'ejected' | 'kept' | 'readmitted';

/**
 * A worker as the prober last saw it (for /admin/models): `up`; `down` (ejected after failed probes);
 * `ejected` (answering its probes, but ejected for consecutive errors on dispatch, ./outlier.ts);
 * `panic` (ejected, but routed all the same: its pool is below its panic threshold); `kept` (failing,
 * but routable under the ejection limit); `model_mismatch` (its engine serves another model); `unknown`
 * before its first probe answered.
 */
export interface WorkerHealthView {
  readonly state: 'up' | 'down' | 'ejected' | 'panic' | 'kept' | 'model_mismatch' | 'unknown';
  readonly consecutiveFailures: number;
  /** When the last probe finished (ms since the epoch); undefined before the first. */
  readonly lastProbeAt: number | undefined;
  /** Why the last failing probe failed (kept after the worker recovers); undefined if none has failed. */
  readonly lastError: string | undefined;
}

export interface HealthProberOptions {
  /** Milliseconds between probe rounds (default 2000). */
  intervalMs?: number;
  /** Probe timeout in ms of free event-loop time (default 1000). */
  timeoutMs?: number;
  /** Consecutive failures before a worker is marked down (default 2). */
  unhealthyAfter?: number;
  /** Most of a model's workers ejected at once, in percent (default 50; at least one worker); unused with `ejections`. */
  maxEjectedPercent?: number;
  /** A pool with fewer healthy workers than this percent routes to all of them (default 0: off); unused with `ejections`. */
  panicThresholdPercent?: number;
  /** The gateway's ejection ledger, shared with the outlier detector (default: the prober's own). */
  ejections?: Ejections;
  clock?: Clock;
  scheduler?: Scheduler;
  /** Check each engine's /v1/models against the served model name (default true). */
  checkModels?: boolean;
  /** Milliseconds between /v1/models checks of a worker that stays up (default 30000). */
  modelsRefreshMs?: number;
  /** Told when a worker's model check changes outcome (or adapters); `previous` is undefined the first time. */
  onModelCheck?: (worker: WorkerInfo, check: ModelCheck, previous: ModelCheck | undefined) => void;
  /** Milliseconds clock for the refresh period (default Date.now). */
  now?: () => number;
}

/** A worker's standing with the prober: failing past the threshold it is either ejected or kept (panic). */
type Standing = 'up' | 'ejected' | 'kept';

export class HealthProber {
  readonly #registry: WorkerRegistry;
  readonly #intervalMs: number;
  readonly #timeoutMs: number;
  readonly #unhealthyAfter: number;
  readonly #ejections: Ejections;
  readonly #clock: Clock;
  readonly #scheduler: Scheduler;
  readonly #failures = new Map<number, number>();
  readonly #standing = new Map<number, Standing>();
  readonly #inFlight = new Set<number>();
  /** Per model: where its transitions are counted (see `watch`); they are logged through the ledger's sink. */
  readonly #metrics = new Map<string, HealthMetrics | undefined>();
  readonly #opts: HealthProberOptions;
  /** Last model-check outcome and when it was taken, per worker. */
  readonly #checks = new Map<number, { check: ModelCheck; at: number }>();
  /** Per worker: when its last probe finished and why the last failing one failed. */
  readonly #probes = new Map<number, { at: number; lastError: string | undefined }>();
  #timer: NodeJS.Timeout | undefined;
  #closed = false;

  constructor(registry: WorkerRegistry, opts: HealthProberOptions = {}) {
    this.#registry = registry;
    this.#intervalMs = opts.intervalMs ?? 2000;
    this.#timeoutMs = opts.timeoutMs ?? 1000;
    this.#unhealthyAfter = opts.unhealthyAfter ?? 2;
    this.#ejections =
      opts.ejections ?? new Ejections(registry, opts.maxEjectedPercent ?? 50, opts.panicThresholdPercent ?? 0);
    this.#clock = opts.clock ?? systemClock;
    this.#scheduler = opts.scheduler ?? systemScheduler;
    this.#opts = opts;
  }

  /**
   * Logs and counts the transitions of `model`'s workers here (its routers' logger and metrics), and the ledger's
   * ejections and panics. Those before the model was watched (probing runs for every model from the first one
   * built) are logged and counted now, in the order they happened, their lines marked `early` (./model-sinks.ts).
   */
  watch(model: string, logger: Logger, metrics?: HealthMetrics & Partial<EjectionMetrics>): void {
    this.#metrics.set(model, metrics);
    // Every series of the ledger's: one left out here is never counted in the gateway.
    const counted =
      metrics?.workerEjections === undefined
        ? undefined
        : {
            workerEjections: metrics.workerEjections,
            workerReadmissions: metrics.workerReadmissions,
            workerEjectionsRefused: metrics.workerEjectionsRefused,
            poolPanic: metrics.poolPanic,
          };
    this.#ejections.watch(model, { logger, metrics: counted });
  }

  start(): void {
    if (this.#timer !== undefined || this.#closed) return;
    this.#timer = setInterval(() => void this.probeAll(), this.#intervalMs);
    this.#timer.unref();
  }

  close(): void {
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Probes every registered worker once; resolves when all probes are done. */
  async probeAll(): Promise<void> {
    await Promise.all(this.#registry.all().map((w) => this.probe(w.id)));
  }

  /** A worker left the registry: drop what the prober kept about it (a flapping worker leaks nothing). */
  forget(workerId: number): void {
    this.#failures.delete(workerId);
    this.#standing.delete(workerId);
    this.#checks.delete(workerId);
    this.#ejections.forget(workerId);
  }

  /** The worker's last model check (undefined before its first, or with model checks off). */
  modelCheck(workerId: number): ModelCheck | undefined {
    return this.#checks.get(workerId)?.check;
  }

  /** The dispatch path saw a connection failure: count it and probe now. */
  reportFailure(workerId: number): void {
    void this.probe(workerId);
  }

  /** Probes one worker; resolves to whether it answered 2xx. */
  async probe(workerId: number): Promise<boolean> {
    const w = this.#registry.get(workerId);
    if (w === undefined || this.#inFlight.has(workerId) || this.#closed) return this.#registry.isAvailable(workerId);
    this.#inFlight.add(workerId);
    // Only a probe that started during an outlier ejection speaks for the engine after the failures that earned it.
    const ejectedAtStart = this.#ejections.holds(workerId, 'consecutive_errors');
    let error: string | undefined;
    try {
      error = await this.#get(w.url);
    } finally {
      this.#inFlight.delete(workerId);
    }
    let ok = error === undefined;
    if (ok && (await this.#modelMismatch(w))) ok = false;
    // A worker that left (or was replaced) while its probe ran keeps no state here.
    if (this.#closed || this.#registry.get(workerId) !== w) return ok;
    const now = (this.#opts.now ?? Date.now)();
    this.#probes.set(w.id, {
      at: now,
      lastError: error ?? (ok ? this.#probes.get(w.id)?.lastError : 'its engine serves another model'),
    });
    if (ok) {
      if (ejectedAtStart) this.#ejections.probePassed(w);
      this.#healthy(w);
    }
    // Serving another model is not ill health: no threshold, no ejection limit, down until it serves ours.
    else if (this.#checks.get(w.id)?.check.kind === 'mismatch') this.#ejections.hold(w, 'model_mismatch');
    else this.#failed(w);
    return ok;
  }

  /** Runs the model check when due (first answer, back from down, refresh period); true while the engine serves another model. */
  async #modelMismatch(w: WorkerInfo): Promise<boolean> {
    if (this.#opts.checkModels === false) return false;
    const now = (this.#opts.now ?? Date.now)();
    const last = this.#checks.get(w.id);
    const due =
      last === undefined ||
      last.check.kind === 'mismatch' ||
      this.#standing.get(w.id) === 'ejected' ||
      now - last.at >= (this.#opts.modelsRefreshMs ?? 30_000);
    if (!due) return false;
    const check = await checkEngineModels(w, this.#timeoutMs);
    if (this.#closed || this.#registry.get(w.id) !== w) return check.kind === 'mismatch';
    this.#checks.set(w.id, { check, at: now });
    if (check.kind === 'ok') this.#registry.setDiscoveredAdapters(w.id, check.adapters);
    if (last === undefined || JSON.stringify(last.check) !== JSON.stringify(check))
      this.#opts.onModelCheck?.(w, check, last?.check);
    return check.kind === 'mismatch';
  }

  /** The worker's standing as last probed (undefined for a worker not registered). */
  view(workerId: number): WorkerHealthView | undefined {
    const w = this.#registry.get(workerId);
    if (w === undefined) return undefined;
    const probe = this.#probes.get(workerId);
    const standing = this.#standing.get(workerId);
    const state =
      this.#checks.get(workerId)?.check.kind === 'mismatch'
        ? 'model_mismatch'
        : this.#ejections.isEjected(workerId) && this.#ejections.inPanic(w)
          ? 'panic'
          : standing === 'ejected'
            ? 'down'
            : this.#ejections.holds(workerId, 'consecutive_errors')
              ? 'ejected'
              : standing === 'kept'
                ? 'kept'
                : probe === undefined
                  ? 'unknown'
                  : 'up';
    return {
      state,
      consecutiveFailures: this.#failures.get(workerId) ?? 0,
      lastProbeAt: probe?.at,
      lastError: probe?.lastError,
    };
  }

  /** GET /health within the loop-time budget: undefined for a 2xx, else why not. */
  async #get(url: string): Promise<string | undefined> {
    const ac = new AbortController();
    const cancel = loopTimeout(this.#timeoutMs, () => ac.abort(), { clock: this.#clock, scheduler: this.#scheduler });
    try {
      // undici's own timers would fire in a stalled loop too: the loop-time budget above is the bound.
      const res = await request(new URL('/health', url), {
        method: 'GET',
        headersTimeout: 0,
        bodyTimeout: 0,
        signal: ac.signal,
      });
      await res.body.dump();
      return res.statusCode >= 200 && res.statusCode < 300 ? undefined : `GET /health answered ${res.statusCode}`;
    } catch (err) {
      if (ac.signal.aborted) return `GET /health did not answer within ${this.#timeoutMs} ms`;
      const e = err as NodeJS.ErrnoException & { cause?: NodeJS.ErrnoException };
      return `GET /health failed: ${e.code ?? e.cause?.code ?? e.message}`;
    } finally {
      cancel();
    }
  }

  #healthy(w: WorkerInfo): void {
    this.#failures.delete(w.id);
    const was = this.#standing.get(w.id) ?? 'up';
    this.#standing.set(w.id, 'up');
    this.#ejections.release(w, 'model_mismatch');
    const routable = this.#ejections.release(w, 'health_probe');
    if (was !== 'up') {
      this.#transition(
        w,
        'readmitted',
        routable
          ? 'worker passes its health probe again: readmitted'
          : 'worker passes its health probe again; still ejected for errors on dispatch',
      );
    }
  }

  #failed(w: WorkerInfo): void {
    const n = (this.#failures.get(w.id) ?? 0) + 1;
    this.#failures.set(w.id, n);
    const was = this.#standing.get(w.id) ?? 'up';
    if (n < this.#unhealthyAfter || was === 'ejected') return;
    if (this.#ejections.mayEject(w)) {
      this.#standing.set(w.id, 'ejected');
      this.#ejections.hold(w, 'health_probe');
      const panic = this.#ejections.inPanic(w) ? '; its pool is in panic, so it stays routable' : '';
      this.#transition(w, 'ejected', `worker failed ${n} health probes in a row: ejected${panic}`);
    } else if (was !== 'kept') {
      this.#standing.set(w.id, 'kept');
      this.#ejections.refused(w, 'health_probe');
      this.#transition(
        w,
        'kept',
        `worker failed ${n} health probes in a row but ${this.#ejections.maxEjectedPercent}% of the model's workers are ` +
          `ejected already: kept routable`,
      );
    }
  }

  /**
   * Logs and counts a transition, through the ledger's sink so that one held until its model is watched keeps
   * its place among the ledger's own reports (an ejection's count and panic line come before its transition).
   */
  #transition(w: WorkerInfo, transition: HealthTransition, msg: string): void {
    const error = transition === 'readmitted' ? undefined : this.#probes.get(w.id)?.lastError;
    const line = { workerId: w.id, url: w.url, role: w.role, transition, ...(error !== undefined ? { error } : {}) };
    this.#ejections.report(w.model, ({ logger }) => {
      this.#metrics
        .get(w.model)
        ?.healthTransitions.labels({ model: w.model, worker_id: String(w.id), transition })
        .inc();
      logger.warn(line, msg);
    });
  }
}
