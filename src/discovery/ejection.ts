/**
 * Ejection, one notion for the whole gateway: a worker is taken out of routing
 * by the health prober (failed probes, ./health.ts), by the outlier detector
 * (consecutive 5xx answers, connection failures or malformed answers on dispatch, ./outlier.ts),
 * or while its engine serves another model. Each of these is a hold on the
 * worker; it is routable only when it has none, so a passing health probe does
 * not readmit a worker the outlier detector ejected, and its readmission does
 * not put back a worker whose probes fail.
 *
 * The ejection limit is shared: at most `maxEjectedPercent` of a model's
 * workers (all roles together, and at least one, as Envoy's
 * `max_ejection_percent`) are ejected at once, whichever of the prober or the
 * detector ejected them. A model mismatch is not ill health and does not count.
 * Every ejection is counted in `kvgate_worker_ejections_total` with its reason.
 */
import type { Logger } from '../common/index.js';
import type { WorkerInfo, WorkerRegistry } from './registry.js';

/** Why a worker was ejected: failed health probes, or consecutive errors on dispatch. */
export type EjectionReason = 'health_probe' | 'consecutive_errors';
type Hold = EjectionReason | 'model_mismatch';

/** Where ejections are counted: kvgate's metrics registry fits this shape. */
export interface EjectionMetrics {
  readonly workerEjections: {
    labels(labels: { model: string; worker_id: string; reason: EjectionReason }): { inc(): void };
  };
}

/** A model's logger and metrics, registered with `watch`. */
export interface EjectionSink {
  readonly log: Logger;
  readonly metrics: EjectionMetrics | undefined;
}

export class Ejections {
  readonly #registry: WorkerRegistry;
  readonly #holds = new Map<number, Set<Hold>>();
  readonly #sinks = new Map<string, EjectionSink>();
  readonly #forgetters: ((workerId: number) => void)[] = [];
  readonly maxEjectedPercent: number;

  constructor(registry: WorkerRegistry, maxEjectedPercent = 50) {
    this.#registry = registry;
    this.maxEjectedPercent = maxEjectedPercent;
  }

  /** Logs and counts `model`'s ejections here. */
  watch(model: string, sink: EjectionSink): void {
    this.#sinks.set(model, sink);
  }

  /** The model's logger and metrics (undefined before `watch`). */
  sink(model: string): EjectionSink | undefined {
    return this.#sinks.get(model);
  }

  /** Whether `w` may be ejected for one more reason: it is out already, or the model's limit has room. */
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
    const h = this.#holds.get(workerId);
    return h !== undefined && (h.has('health_probe') || h.has('consecutive_errors'));
  }

  /** Whether the worker holds `reason` now. */
  holds(workerId: number, reason: Hold): boolean {
    return this.#holds.get(workerId)?.has(reason) ?? false;
  }

  /** Takes the worker out of routing for `reason` (the caller checked `mayEject`); ejections are counted. */
  hold(w: WorkerInfo, reason: Hold): void {
    const h = this.#holds.get(w.id) ?? new Set<Hold>();
    if (h.has(reason)) return;
    h.add(reason);
    this.#holds.set(w.id, h);
    this.#registry.markDown(w.id);
    if (reason !== 'model_mismatch') this.#sinks.get(w.model)?.metrics?.workerEjections.labels({ model: w.model, worker_id: String(w.id), reason }).inc();
  }

  /** Lifts `reason`; the worker is routable again once nothing else holds it. True if it is routable now. */
  release(w: WorkerInfo, reason: Hold): boolean {
    const h = this.#holds.get(w.id);
    h?.delete(reason);
    if (h !== undefined && h.size > 0) return false;
    this.#holds.delete(w.id);
    this.#registry.markUp(w.id);
    return true;
  }

  /** A worker left the registry: its holds go with it, and every `onForget` listener is told. */
  forget(workerId: number): void {
    this.#holds.delete(workerId);
    for (const f of this.#forgetters) f(workerId);
  }

  /** Calls `f` with each worker that leaves (the outlier detector drops its streak and timer). */
  onForget(f: (workerId: number) => void): void {
    this.#forgetters.push(f);
  }
}
