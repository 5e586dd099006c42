/**
 * Ejection, one notion for the whole gateway: a worker is taken out of routing
 * by the health prober (failed probes, ./health.ts), by the outlier detector
 * (consecutive 5xx answers, connection failures or malformed answers on dispatch, ./outlier.ts),
 * or while its engine serves another model. Each of these is a hold on the
 * worker; it is routable only when it has none, so a passing health probe does
 * not readmit a worker the outlier detector ejected for the errors it answered,
 * and its readmission does not put back a worker whose probes fail.
 *
 * Two limits:
 * - At most `maxEjectedPercent` of a model's workers (all roles together, and
 *   at least one, as Envoy's `max_ejection_percent` of a cluster) are ejected
 *   at once, whichever of the prober or the detector ejected them.
 * - Panic (Envoy's load-balancer panic threshold), per pool: a model's workers
 *   of one role (aggregated, prefill or decode), the workers that can stand in
 *   for each other. While fewer than the model's panic threshold (percent) of
 *   a pool's workers are healthy (not ejected), the pool routes to all of them
 *   as if all were healthy: ejected workers stay routable, so ejection never
 *   takes a pool below its threshold and a pool's only worker is never taken
 *   out. The ejections still stand (their time runs, the prober's view says
 *   `panic`); when enough workers are healthy again the pool leaves panic and
 *   the ejected ones leave routing. 0 turns panic off (then a pool whose
 *   workers all fail can be emptied: a disaggregated model whose prefill pool
 *   is gone serves aggregated, or refuses under `enforce_disagg`).
 * A worker whose engine serves another model is in no pool (it cannot stand in
 * for the others) and is never routed to. Every ejection is counted in
 * `kvgate_worker_ejections_total` with its reason; entering and leaving panic
 * is a log line and `kvgate_pool_panic`.
 */
import type { Logger, WorkerRole } from '../common/index.js';
import { ModelSinks } from './model-sinks.js';
import type { WorkerInfo, WorkerRegistry } from './registry.js';

/** Why a worker was ejected: failed health probes, or consecutive errors on dispatch. */
export type EjectionReason = 'health_probe' | 'consecutive_errors';
type Hold = EjectionReason | 'model_mismatch';

/** A per-worker counter by ejection reason. */
interface EjectionCounter {
  labels(labels: { model: string; worker_id: string; reason: EjectionReason }): { inc(): void };
}

/** Where ejections and panic are counted: kvgate's metrics registry fits this shape. */
export interface EjectionMetrics {
  readonly workerEjections: EjectionCounter;
  /** An ejection lifted (its reason's hold released; the worker may stay held for the other reason). */
  readonly workerReadmissions?: EjectionCounter | undefined;
  /** An ejection the model's `max_ejected_percent` did not allow: the failing worker stays routable. */
  readonly workerEjectionsRefused?: EjectionCounter | undefined;
  readonly poolPanic?:
    | {
        labels(labels: { model: string; worker_type: WorkerRole }): { set(value: number): void };
      }
    | undefined;
}

/** A model's logger and metrics, registered with `watch`. */
export interface EjectionSink {
  /** The model's logger, bound to the model: lines written through it never add `model`. */
  readonly logger: Logger;
  readonly metrics: EjectionMetrics | undefined;
}

/** A pool's standing as last settled. */
interface PoolState {
  readonly model: string;
  readonly role: WorkerRole;
  panic: boolean;
}

const poolKey = (model: string, role: WorkerRole): string => `${role}\u0000${model}`;

export class Ejections {
  readonly #registry: WorkerRegistry;
  /** Each held worker's holds, with the worker (to find its pool once it left the registry). */
  readonly #holds = new Map<number, { readonly worker: WorkerInfo; readonly reasons: Set<Hold> }>();
  /** Per model: where its ejections and panics are logged and counted; those before `watch`, held (./model-sinks.ts). */
  readonly #sinks = new ModelSinks<EjectionSink>();
  readonly #forgetters: ((workerId: number) => void)[] = [];
  readonly #probeListeners: ((w: WorkerInfo) => void)[] = [];
  readonly #pools = new Map<string, PoolState>();
  readonly #panicThresholds = new Map<string, number>();
  readonly maxEjectedPercent: number;
  /** The panic threshold of a model without its own (`setPanicThreshold`). */
  readonly panicThresholdPercent: number;

  /** `panicThresholdPercent` is off (0) unless given; `kvgate serve` sets each model's (default 50). */
  constructor(registry: WorkerRegistry, maxEjectedPercent = 50, panicThresholdPercent = 0) {
    this.#registry = registry;
    this.maxEjectedPercent = maxEjectedPercent;
    this.panicThresholdPercent = panicThresholdPercent;
  }

  /**
   * Logs and counts `model`'s ejections and panics here; those before it are logged and counted now, in order
   * (their lines marked `early`), and its pools' panic gauges start at their state.
   */
  watch(model: string, sink: EjectionSink): void {
    this.#sinks.set(model, sink);
    for (const w of this.#registry.all()) {
      if (w.model === model) this.#gauge(sink, model, w.role, this.#pools.get(poolKey(model, w.role))?.panic ?? false);
    }
  }

  /** The model's logger and metrics (undefined before `watch`). */
  sink(model: string): EjectionSink | undefined {
    return this.#sinks.get(model);
  }

  /**
   * Runs `report` with the model's sink: now, or when the model is watched, in the order reported (the health
   * prober's transitions go through here too, so that held reports keep one order).
   */
  report(model: string, report: (sink: EjectionSink) => void): void {
    this.#sinks.report(model, report);
  }

  /** The model's panic threshold in percent of its pools' workers (0: never). */
  setPanicThreshold(model: string, percent: number): void {
    this.#panicThresholds.set(model, percent);
  }

  panicThreshold(model: string): number {
    return this.#panicThresholds.get(model) ?? this.panicThresholdPercent;
  }

  /** Whether `w` may be ejected for one more reason: it is out already, or its model's limit has room. */
  mayEject(w: WorkerInfo): boolean {
    if (this.isEjected(w.id)) return true;
    let size = 0;
    let ejected = 0;
    for (const other of this.#registry.all()) {
      if (other.model !== w.model) continue;
      size++;
      if (this.isEjected(other.id)) ejected++;
    }
    return ejected < Math.max(1, Math.floor((size * this.maxEjectedPercent) / 100));
  }

  /** Whether the worker is ejected (for health or errors; a model mismatch is not an ejection). */
  isEjected(workerId: number): boolean {
    const h = this.#holds.get(workerId)?.reasons;
    return h !== undefined && (h.has('health_probe') || h.has('consecutive_errors'));
  }

  /** Whether the worker holds `reason` now. */
  holds(workerId: number, reason: Hold): boolean {
    return this.#holds.get(workerId)?.reasons.has(reason) ?? false;
  }

  /** Whether the worker's pool is in panic (its ejected workers routed all the same). */
  inPanic(w: WorkerInfo): boolean {
    return this.#pools.get(poolKey(w.model, w.role))?.panic ?? false;
  }

  /**
   * Takes the worker out of routing for `reason` (the caller checked `mayEject`) unless its pool is then
   * in panic; ejections are counted.
   */
  hold(w: WorkerInfo, reason: Hold): void {
    const h = this.#holds.get(w.id) ?? { worker: w, reasons: new Set<Hold>() };
    if (h.reasons.has(reason)) return;
    h.reasons.add(reason);
    this.#holds.set(w.id, h);
    if (reason === 'model_mismatch') this.#registry.markDown(w.id);
    else this.#count(w, reason, (m) => m.workerEjections);
    this.#settle(w.model, w.role);
  }

  /** An ejection for `reason` that `mayEject` refused: counted (the caller logs it). */
  refused(w: WorkerInfo, reason: EjectionReason): void {
    this.#count(w, reason, (m) => m.workerEjectionsRefused);
  }

  /** Counts `reason` for worker `w` in the series `pick` chooses from its model's metrics (when it has them). */
  #count(w: WorkerInfo, reason: EjectionReason, pick: (m: EjectionMetrics) => EjectionCounter | undefined): void {
    this.#sinks.report(w.model, (sink) => {
      if (sink.metrics !== undefined)
        pick(sink.metrics)
          ?.labels({ model: w.model, worker_id: String(w.id), reason })
          .inc();
    });
  }

  /** Lifts `reason`; the worker is routable again once nothing else holds it. True if nothing holds it now. */
  release(w: WorkerInfo, reason: Hold): boolean {
    const h = this.#holds.get(w.id);
    if (h?.reasons.delete(reason) === true && reason !== 'model_mismatch')
      this.#count(w, reason, (m) => m.workerReadmissions);
    const free = h === undefined || h.reasons.size === 0;
    if (free) {
      this.#holds.delete(w.id);
      this.#registry.markUp(w.id);
    }
    this.#settle(w.model, w.role);
    return free;
  }

  /** A worker left the registry: its holds go with it, every `onForget` listener is told, and its pool settles again. */
  forget(workerId: number): void {
    const w = this.#holds.get(workerId)?.worker;
    this.#holds.delete(workerId);
    for (const f of this.#forgetters) f(workerId);
    // A healthy worker leaving may put its pool in panic, an ejected one take it out: settle every pool that can be.
    const pools = new Map<string, { model: string; role: WorkerRole }>();
    for (const p of this.#pools.values()) if (p.panic) pools.set(poolKey(p.model, p.role), p);
    for (const x of [w, ...[...this.#holds.values()].map((h) => h.worker)])
      if (x !== undefined) pools.set(poolKey(x.model, x.role), x);
    for (const p of pools.values()) this.#settle(p.model, p.role);
  }

  /** Calls `f` with each worker that leaves (the outlier detector drops its streak and timer). */
  onForget(f: (workerId: number) => void): void {
    this.#forgetters.push(f);
  }

  /** The health prober saw `w` answer a probe that started while the outlier detector had it ejected. */
  probePassed(w: WorkerInfo): void {
    for (const f of this.#probeListeners) f(w);
  }

  /** Calls `f` on each `probePassed` (the outlier detector ends an ejection that connection failures alone earned). */
  onProbePassed(f: (w: WorkerInfo) => void): void {
    this.#probeListeners.push(f);
  }

  /**
   * Recomputes the pool's panic and applies it: in panic its ejected workers are routable, otherwise not.
   * Workers that are neither routable nor ejected (joining, not yet probed) are not counted.
   */
  #settle(model: string, role: WorkerRole): void {
    const members: WorkerInfo[] = [];
    let healthy = 0;
    for (const w of this.#registry.all()) {
      if (w.model !== model || w.role !== role || this.holds(w.id, 'model_mismatch')) continue;
      const ejected = this.isEjected(w.id);
      if (!ejected && !this.#registry.isAvailable(w.id)) continue;
      members.push(w);
      if (!ejected) healthy++;
    }
    const threshold = this.panicThreshold(model);
    const panic = members.length > 0 && healthy * 100 < threshold * members.length;
    const key = poolKey(model, role);
    const state = this.#pools.get(key) ?? { model, role, panic: false };
    this.#pools.set(key, state);
    for (const w of members)
      if (this.isEjected(w.id)) panic ? this.#registry.markUp(w.id) : this.#registry.markDown(w.id);
    const sink = this.#sinks.get(model);
    if (sink !== undefined) this.#gauge(sink, model, role, panic);
    if (panic === state.panic) return;
    state.panic = panic;
    const line = { workerType: role, healthy, workers: members.length, panicThresholdPercent: threshold };
    const of = `${healthy} of its ${members.length} workers healthy`;
    // The gauge is set above (or at `watch`, at the pool's state then); the line is held until the model is watched.
    this.#sinks.report(model, ({ logger }) => {
      if (panic) logger.warn(line, `pool entered panic: ${of}, below ${threshold}%; routing to all of them`);
      else logger.info(line, `pool left panic: ${of}; ejected workers are out of routing again`);
    });
  }

  #gauge(sink: EjectionSink, model: string, role: WorkerRole, panic: boolean): void {
    sink.metrics?.poolPanic?.labels({ model, worker_type: role }).set(panic ? 1 : 0);
  }
}
