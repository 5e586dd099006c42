/**
 * PoolMetrics: the labelled Prometheus children one pool (one model, one
 * worker role) touches per request, resolved once: a prom-client `labels()`
 * call hashes its label object, and a request would otherwise make about
 * twenty of them. Per-slot load gauges are resolved on first use.
 */
import { slotKey, type WorkerRole } from '../../common/index.js';
import type { KvgateMetrics } from '../../metrics/index.js';

export class PoolMetrics {
  readonly requests; readonly requestsStarted; readonly isl; readonly osl; readonly itl; readonly ttft;
  readonly kvHitRate; readonly nonMaxOverlap; readonly backpressure; readonly queueRequests; readonly queueIslTokens;
  readonly predictionError; readonly exact; readonly over; readonly under;
  readonly hashing; readonly matching; readonly scheduling; readonly total;
  readonly #m: KvgateMetrics;
  readonly #model: string;
  readonly #role: string;
  readonly #workers = new Map<string, WorkerGauges>();

  constructor(m: KvgateMetrics, model: string, role: WorkerRole) {
    this.#m = m;
    this.#model = model;
    this.#role = role;
    const l = { model, worker_type: role };
    this.requests = m.requests.labels(l);
    this.requestsStarted = m.requestsStarted.labels(l);
    this.isl = m.isl.labels(l);
    this.osl = m.osl.labels(l);
    this.itl = m.itl.labels(l);
    this.ttft = m.ttft.labels(l);
    this.kvHitRate = m.predictedKvHitRate.labels(l);
    this.nonMaxOverlap = m.nonMaxOverlapSelections.labels(l);
    this.backpressure = m.backpressure.labels(l);
    this.queueRequests = m.queuePendingRequests.labels(l);
    this.queueIslTokens = m.queuePendingIslTokens.labels(l);
    this.predictionError = m.predictionErrorTokens.labels(l);
    this.exact = m.predictionExact.labels({ ...l, outcome: 'exact' });
    this.over = m.predictionExact.labels({ ...l, outcome: 'over' });
    this.under = m.predictionExact.labels({ ...l, outcome: 'under' });
    this.hashing = m.overheadMs.labels({ model, stage: 'block_hashing' });
    this.matching = m.overheadMs.labels({ model, stage: 'indexer_find_matches' });
    this.scheduling = m.overheadMs.labels({ model, stage: 'scheduling' });
    this.total = m.overheadMs.labels({ model, stage: 'total' });
  }

  /** Per-slot load gauges, resolved on first use. */
  worker(workerId: number, dpRank: number): WorkerGauges {
    const key = slotKey(workerId, dpRank);
    let g = this.#workers.get(key);
    if (g === undefined) {
      const l = { model: this.#model, worker_id: String(workerId), dp_rank: String(dpRank), worker_type: this.#role };
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
}

export interface WorkerGauges {
  readonly activeRequests: { set(v: number): void };
  readonly activePrefillTokens: { set(v: number): void };
  readonly activeDecodeBlocks: { set(v: number): void };
  readonly indexBlocks: { set(v: number): void };
}
