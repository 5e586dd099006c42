/**
 * Outlier detection on dispatch, with Envoy's semantics for consecutive errors:
 * a worker whose last `consecutiveErrors` dispatches each ended in a 5xx answer,
 * a connection failure, a malformed answer or a missed engine deadline (the push
 * router says which; Envoy counts its timeouts too) is ejected from new requests for
 * `baseEjectionMs` × (the number of times it has been ejected), at most
 * `maxEjectionMs`, then readmitted. A worker whose failures finish fast looks
 * idle to a load-aware router and would otherwise attract traffic.
 *
 * The ejection is a hold in the gateway's shared ledger (./ejection.ts): the
 * share of a model's workers ejected at once is the same limit the health
 * prober obeys, a pool below its panic threshold keeps routing to its ejected
 * workers, and a worker both ejected here and failing its probes comes back
 * only when both let it. Past the limit a failing worker stays routable; that
 * is logged once per streak. Ejections and readmissions are warn lines with
 * the worker's id and URL; ejections are counted with reason
 * `consecutive_errors`.
 *
 * A streak of connection failures alone (nothing answered: the engine was
 * gone, as when it crashed) says what the health probe checks: a probe that
 * started during the ejection and passes (Envoy's
 * `successful_active_health_check_uneject_host`) ends it, so a restarted
 * engine is routable within one probe interval instead of serving the rest of
 * an ejection its crash earned. An ejection with any 5xx answer in its streak
 * runs its time: the engine answers its probe while failing real requests.
 */
import { silentLogger } from '../common/index.js';
import type { Ejections } from './ejection.js';
import { systemScheduler, type Scheduler } from './loop-timeout.js';
import type { WorkerInfo, WorkerRegistry } from './registry.js';

export interface OutlierOptions {
  /** Consecutive 5xx answers, connection failures, malformed answers or timeouts that eject a worker; 0 turns detection off. */
  readonly consecutiveErrors: number;
  /** First ejection's length; the n-th lasts n times this. */
  readonly baseEjectionMs: number;
  /** Longest ejection. */
  readonly maxEjectionMs: number;
  readonly scheduler?: Scheduler | undefined;
}

interface WorkerRecord {
  consecutive: number;
  /** Times ejected so far: the next ejection lasts one more base. */
  ejections: number;
  timer: unknown;
  /** A streak past the limit was logged (once per streak). */
  keptLogged: boolean;
  /** The current streak holds an engine's 5xx answer (not only connection failures). */
  answered: boolean;
  /** The running ejection was earned by connection failures alone: a passing probe ends it. */
  liftable: boolean;
}

export class OutlierDetector {
  readonly #registry: WorkerRegistry;
  readonly #ejections: Ejections;
  readonly #opts: OutlierOptions;
  readonly #scheduler: Scheduler;
  readonly #workers = new Map<number, WorkerRecord>();

  constructor(registry: WorkerRegistry, ejections: Ejections, opts: OutlierOptions) {
    this.#registry = registry;
    this.#ejections = ejections;
    this.#opts = opts;
    this.#scheduler = opts.scheduler ?? systemScheduler;
    ejections.onForget((id) => this.forget(id));
    ejections.onProbePassed((w) => this.#probePassed(w));
  }

  /**
   * A dispatch to the worker ended: `error` is why it failed (a 5xx answer or a connection failure),
   * undefined for any other answer; `connectionFailure` when nothing answered (refused, reset). Outcomes of
   * dispatches that were in flight while it was ejected (or made while its pool is in panic) are ignored.
   */
  record(workerId: number, error: string | undefined, connectionFailure = false): void {
    if (this.#opts.consecutiveErrors <= 0) return;
    const w = this.#registry.get(workerId);
    if (w === undefined || this.#ejections.holds(workerId, 'consecutive_errors')) return;
    const r = this.#record(workerId);
    if (error === undefined) {
      r.consecutive = 0;
      r.keptLogged = false;
      r.answered = false;
      return;
    }
    r.consecutive++;
    if (!connectionFailure) r.answered = true;
    if (r.consecutive < this.#opts.consecutiveErrors) return;
    const logger = this.#ejections.sink(w.model)?.logger ?? silentLogger;
    const line = { workerId: w.id, url: w.url, role: w.role, consecutiveErrors: r.consecutive, error };
    if (!this.#ejections.mayEject(w)) {
      if (!r.keptLogged) {
        this.#ejections.refused(w, 'consecutive_errors');
        logger.warn(
          { ...line, maxEjectedPercent: this.#ejections.maxEjectedPercent },
          `worker failed ${r.consecutive} dispatches in a row but ${this.#ejections.maxEjectedPercent}% of the model's ` +
            `workers are ejected already: kept routable`,
        );
      }
      r.keptLogged = true;
      return;
    }
    r.ejections++;
    r.consecutive = 0;
    r.keptLogged = false;
    r.liftable = !r.answered;
    r.answered = false;
    const ms = Math.min(this.#opts.baseEjectionMs * r.ejections, this.#opts.maxEjectionMs);
    this.#ejections.hold(w, 'consecutive_errors');
    const panic = this.#ejections.inPanic(w) ? '; its pool is in panic, so it stays routable' : '';
    logger.warn(
      { ...line, ejectionMs: ms, ejections: r.ejections, connectionFailuresOnly: r.liftable },
      `worker failed ${this.#opts.consecutiveErrors} dispatches in a row: ejected for ${ms} ms${panic}`,
    );
    r.timer = this.#scheduler.setTimeout(() => {
      r.timer = undefined;
      if (this.#registry.get(w.id) !== w) return;
      this.#readmit(w, { ejectionMs: ms }, "worker's ejection time is over");
    }, ms);
  }

  /** A probe that started while the worker was ejected passed: an ejection that connection failures alone earned ends. */
  #probePassed(w: WorkerInfo): void {
    const r = this.#workers.get(w.id);
    if (r?.timer === undefined || !r.liftable || this.#registry.get(w.id) !== w) return;
    this.#scheduler.clearTimeout(r.timer);
    r.timer = undefined;
    const why = 'worker answers its health probe again after its connection failures: ejection ended';
    this.#readmit(w, { connectionFailuresOnly: true }, why);
  }

  #readmit(w: WorkerInfo, fields: Record<string, unknown>, why: string): void {
    const free = this.#ejections.release(w, 'consecutive_errors');
    const logger = this.#ejections.sink(w.model)?.logger ?? silentLogger;
    logger.warn(
      { workerId: w.id, url: w.url, role: w.role, ...fields },
      free ? `${why}: readmitted` : `${why}; still ejected on its health probes`,
    );
  }

  /** A worker left the registry: its streak, count and timer go with it. */
  forget(workerId: number): void {
    const r = this.#workers.get(workerId);
    if (r?.timer !== undefined) this.#scheduler.clearTimeout(r.timer);
    this.#workers.delete(workerId);
  }

  close(): void {
    for (const id of [...this.#workers.keys()]) this.forget(id);
  }

  #record(workerId: number): WorkerRecord {
    let r = this.#workers.get(workerId);
    if (r === undefined) {
      r = { consecutive: 0, ejections: 0, timer: undefined, keptLogged: false, answered: false, liftable: false };
      this.#workers.set(workerId, r);
    }
    return r;
  }
}
