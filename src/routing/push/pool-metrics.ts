/**
 * PoolMetrics: the labelled Prometheus children one pool (one model, one
 * worker role) touches per request, resolved once: a prom-client `labels()`
 * call hashes its label object, and a request would otherwise make about
 * twenty of them. Children are resolved on first use and kept.
 *
 * `worker_type` says what the work was: per-request series carry the leg's
 * phase (the decode pool serves `aggregated` legs and, when the model is
 * disaggregated, `decode` legs); per-worker series carry the worker's
 * configured role; the queue gauges carry what the pool's workers are.
 */
import { slotKey, type WorkerRole } from '../../common/index.js';
import type { KvgateMetrics } from '../../metrics/index.js';

/** What PoolMetrics reads of the pool: each member's configured role. */
type PoolRoles = ReadonlyMap<number, { readonly role: WorkerRole }>;

export class PoolMetrics {
  readonly hashing; readonly matching; readonly scheduling; readonly total;
  readonly #m: KvgateMetrics;
  readonly #model: string;
  readonly #role: WorkerRole;
  readonly #members: PoolRoles;
  readonly #legs = new Map<WorkerRole, LegMetrics>();
  readonly #latency = new Map<string, LatencyMetrics>();
  readonly #workers = new Map<string, WorkerGauges>();
  #queueLabel: WorkerRole | undefined;

  constructor(m: KvgateMetrics, model: string, role: WorkerRole, members: PoolRoles) {
    this.#m = m;
    this.#model = model;
    this.#role = role;
    this.#members = members;
    this.hashing = m.overhead.labels({ model, stage: 'block_hashing' });
    this.matching = m.overhead.labels({ model, stage: 'indexer_find_matches' });
    this.scheduling = m.overhead.labels({ model, stage: 'scheduling' });
    this.total = m.overhead.labels({ model, stage: 'total' });
  }

  /** The per-request series of one kind of leg. */
  leg(phase: WorkerRole): LegMetrics {
    let lm = this.#legs.get(phase);
    if (lm === undefined) {
      const m = this.#m;
      const l = { model: this.#model, worker_type: phase };
      lm = {
        requests: m.requests.labels(l),
        requestsStarted: m.requestsStarted.labels(l),
        isl: m.isl.labels(l),
        osl: m.osl.labels(l),
        kvHitRate: m.predictedKvHitRate.labels(l),
        nonMaxOverlap: m.nonMaxOverlapSelections.labels(l),
        backpressure: m.backpressure.labels(l),
        predictionError: m.predictionErrorTokens.labels(l),
        exact: m.predictionExact.labels({ ...l, outcome: 'exact' }),
        over: m.predictionExact.labels({ ...l, outcome: 'over' }),
        under: m.predictionExact.labels({ ...l, outcome: 'under' }),
      };
      this.#legs.set(phase, lm);
    }
    return lm;
  }

  /** TTFT and ITL of one kind of leg on one worker (workers are configured, so the label set stays bounded). */
  latency(phase: WorkerRole, workerId: number): LatencyMetrics {
    const key = `${phase}:${workerId}`;
    let lat = this.#latency.get(key);
    if (lat === undefined) {
      const l = { model: this.#model, worker_type: phase, worker_id: String(workerId) };
      lat = { ttft: this.#m.ttft.labels(l), itl: this.#m.itl.labels(l) };
      this.#latency.set(key, lat);
    }
    return lat;
  }

  /** The pool's queue depth, labelled by what its workers are; a relabelled pool zeroes its old series. */
  setQueue(pendingRequests: number, pendingIslTokens: number): void {
    const label = this.#poolLabel();
    const m = this.#m;
    if (this.#queueLabel !== undefined && this.#queueLabel !== label) {
      const old = { model: this.#model, worker_type: this.#queueLabel };
      m.queuePendingRequests.set(old, 0);
      m.queuePendingIslTokens.set(old, 0);
    }
    this.#queueLabel = label;
    const l = { model: this.#model, worker_type: label };
    m.queuePendingRequests.set(l, pendingRequests);
    m.queuePendingIslTokens.set(l, pendingIslTokens);
  }

  /** Per-slot load gauges, resolved on first use, labelled with the worker's configured role. */
  worker(workerId: number, dpRank: number): WorkerGauges {
    const key = slotKey(workerId, dpRank);
    let g = this.#workers.get(key);
    if (g === undefined) {
      const role = this.#members.get(workerId)?.role ?? this.#poolLabel();
      const l = { model: this.#model, worker_id: String(workerId), dp_rank: String(dpRank), worker_type: role };
      g = {
        activeRequests: this.#m.workerActiveRequests.labels(l),
        activePrefillTokens: this.#m.workerActivePrefillTokens.labels(l),
        activeDecodeBlocks: this.#m.workerActiveDecodeBlocks.labels(l),
        indexBlocks: this.#m.workerIndexBlocks.labels(l),
      };
      this.#workers.set(key, g);
    }
    return g;
  }

  /**
   * The worker left the pool: its bookings left with it (the scheduler dropped them), so its load
   * gauges read zero from now on instead of the last value published while it served.
   */
  forgetWorker(workerId: number): void {
    for (const [key, g] of [...this.#workers]) {
      if (!key.startsWith(`${workerId}:`)) continue;
      g.activeRequests.set(0);
      g.activePrefillTokens.set(0);
      g.activeDecodeBlocks.set(0);
      this.#workers.delete(key);
    }
  }

  /** The prefill pool is `prefill`; the decode pool is `decode` once it holds a decode worker, else `aggregated`. */
  #poolLabel(): WorkerRole {
    if (this.#role === 'prefill') return 'prefill';
    for (const w of this.#members.values()) if (w.role === 'decode') return 'decode';
    return 'aggregated';
  }
}

interface Observer { observe(v: number): void }
interface Incrementer { inc(): void }

interface LegMetrics {
  readonly requests: Incrementer;
  readonly requestsStarted: Incrementer;
  readonly isl: Observer;
  readonly osl: Observer;
  readonly kvHitRate: Observer;
  readonly nonMaxOverlap: Incrementer;
  readonly backpressure: Incrementer;
  readonly predictionError: Observer;
  readonly exact: Incrementer;
  readonly over: Incrementer;
  readonly under: Incrementer;
}

interface LatencyMetrics {
  readonly ttft: Observer;
  readonly itl: Observer;
}

export interface WorkerGauges {
  readonly activeRequests: { set(v: number): void };
  readonly activePrefillTokens: { set(v: number): void };
  readonly activeDecodeBlocks: { set(v: number): void };
  readonly indexBlocks: { set(v: number): void };
}
