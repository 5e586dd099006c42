/**
 * PoolMetrics: the labelled Prometheus children one pool (one model, one
 * worker role) touches per request, resolved once: a prom-client `labels()`
 * call hashes its label object, and a request would otherwise make about
 * twenty of them.
 *
 * Every series exists from the start at zero (the pool's when it is built, a
 * worker's per rank when it joins), so dashboards and rate() see the whole
 * fleet before the first request. The per-slot load gauges are written from
 * the pool's bookkeeping at each scrape (`readLoad`), so they always show
 * the scheduler's state rather than its state at the last dispatch.
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
  readonly #workers = new Map<string, SlotGauges>();
  readonly #unsubscribe: () => void;

  /** `readLoad` writes one slot's load into its gauges; called for every slot at each scrape. */
  constructor(m: KvgateMetrics, model: string, role: WorkerRole, readLoad: (g: WorkerGauges, workerId: number, dpRank: number) => void) {
    this.#m = m;
    this.#model = model;
    this.#role = role;
    this.#unsubscribe = m.onScrape(() => {
      for (const g of this.#workers.values()) readLoad(g, g.workerId, g.dpRank);
    });
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
    this.#registerAtZero(l);
  }

  /** Creates the pool's series at zero. */
  #registerAtZero(l: { model: string; worker_type: WorkerRole }): void {
    const m = this.#m;
    for (const c of [m.requests, m.requestsStarted, m.nonMaxOverlapSelections, m.backpressure]) c.inc(l, 0);
    for (const outcome of ['exact', 'over', 'under']) m.predictionExact.inc({ ...l, outcome }, 0);
    for (const h of [m.ttft, m.itl, m.isl, m.osl, m.predictedKvHitRate, m.predictionErrorTokens]) h.zero(l);
    for (const stage of ['block_hashing', 'indexer_find_matches', 'scheduling', 'total']) m.overheadMs.zero({ model: l.model, stage });
    m.queuePendingRequests.set(l, 0);
    m.queuePendingIslTokens.set(l, 0);
  }

  /** A worker joined: its ranks' load gauges exist from now on (at zero until load is booked). */
  addWorker(workerId: number, dpStart: number, dpSize: number): void {
    for (let r = dpStart; r < dpStart + dpSize; r++) {
      const key = slotKey(workerId, r);
      if (this.#workers.has(key)) continue;
      const l = this.#slotLabels(workerId, r);
      const g: SlotGauges = {
        workerId, dpRank: r,
        activeRequests: this.#m.workerActiveRequests.labels(l),
        activePrefillTokens: this.#m.workerActivePrefillTokens.labels(l),
        activeDecodeBlocks: this.#m.workerActiveDecodeBlocks.labels(l),
        indexBlocks: this.#m.workerIndexBlocks.labels(l),
      };
      for (const gauge of [g.activeRequests, g.activePrefillTokens, g.activeDecodeBlocks, g.indexBlocks]) gauge.set(0);
      this.#workers.set(key, g);
    }
  }

  /** A worker left: its series go (a scrape must not report a worker that is gone). */
  forgetWorker(workerId: number): void {
    for (const [key, g] of [...this.#workers]) {
      if (g.workerId !== workerId) continue;
      this.#workers.delete(key);
      const l = this.#slotLabels(workerId, g.dpRank);
      for (const gauge of [this.#m.workerActiveRequests, this.#m.workerActivePrefillTokens, this.#m.workerActiveDecodeBlocks, this.#m.workerIndexBlocks]) gauge.remove(l);
    }
  }

  /** Stops writing the gauges at scrape (the pool is closed). */
  close(): void {
    this.#unsubscribe();
  }

  #slotLabels(workerId: number, dpRank: number): { model: string; worker_id: string; dp_rank: string; worker_type: string } {
    return { model: this.#model, worker_id: String(workerId), dp_rank: String(dpRank), worker_type: this.#role };
  }
}

interface SlotGauges extends WorkerGauges {
  readonly workerId: number;
  readonly dpRank: number;
}

export interface WorkerGauges {
  readonly activeRequests: { set(v: number): void };
  readonly activePrefillTokens: { set(v: number): void };
  readonly activeDecodeBlocks: { set(v: number): void };
  readonly indexBlocks: { set(v: number): void };
}
