/**
 * PoolMetrics: the labelled Prometheus children one pool (one model, one
 * worker role) touches per request, resolved once: a prom-client `labels()`
 * call hashes its label object, and a request would otherwise make about
 * twenty of them. Children are resolved on first use and kept, as metrics'
 * fast children (no label hashing per observation either).
 *
 * `worker_type` says what the work was: per-request series carry the leg's
 * phase (the decode pool serves `aggregated` legs and, when the model is
 * disaggregated, `decode` legs); per-worker series carry the worker's
 * configured role; the queue gauges carry what the pool's workers are.
 *
 * Every series exists at zero before the first request, so dashboards and
 * rate() see the whole fleet: the pool's overhead and queue series when it is
 * built; when a worker joins, its ranks' load gauges, its TTFT/ITL and the
 * per-request series of the legs it serves. The per-slot load gauges are
 * written from the pool's bookkeeping at each scrape (`readLoad`), so they
 * show the scheduler's state rather than its state at the last dispatch; a
 * worker that leaves takes its load gauges with it.
 */
import { slotKey, type WorkerRank, type WorkerRole } from '../../common/index.js';
import {
  FastCounterChild as CounterChild,
  FastHistogramChild as HistogramChild,
  type KvgateMetrics,
} from '../../metrics/index.js';

/** What PoolMetrics reads of the pool: each member's configured role (and whether a decode worker serves alone). */
type PoolRoles = ReadonlyMap<number, { readonly role: WorkerRole; readonly servesAggregated?: boolean | undefined }>;

/** Writes one slot's load into its gauges; called for every slot at each scrape. */
type LoadReader = (g: WorkerGauges, slot: WorkerRank) => void;

const STAGES = ['block_hashing', 'indexer_find_matches', 'scheduling', 'total'] as const;

export class PoolMetrics {
  readonly hashing;
  readonly matching;
  readonly scheduling;
  readonly total;
  readonly #m: KvgateMetrics;
  readonly #model: string;
  readonly #role: WorkerRole;
  readonly #members: PoolRoles;
  readonly #legs = new Map<WorkerRole, LegMetrics>();
  readonly #latency = new Map<string, LatencyMetrics>();
  readonly #workers = new Map<string, SlotGauges>();
  readonly #unsubscribe: () => void;
  #queueLabel: WorkerRole | undefined;
  #queueRequests = 0;
  #queueIslTokens = 0;

  constructor(m: KvgateMetrics, model: string, role: WorkerRole, members: PoolRoles, readLoad: LoadReader) {
    this.#m = m;
    this.#model = model;
    this.#role = role;
    this.#members = members;
    for (const stage of STAGES) m.overhead.zero({ model, stage });
    this.hashing = new HistogramChild(m.overhead, { model, stage: 'block_hashing' });
    this.matching = new HistogramChild(m.overhead, { model, stage: 'indexer_find_matches' });
    this.scheduling = new HistogramChild(m.overhead, { model, stage: 'scheduling' });
    this.total = new HistogramChild(m.overhead, { model, stage: 'total' });
    this.#publishQueue();
    this.#unsubscribe = m.onScrape(() => {
      for (const g of this.#workers.values()) readLoad(g, g.slot);
    });
  }

  /** The per-request series of one kind of leg (created at zero). */
  leg(phase: WorkerRole): LegMetrics {
    let lm = this.#legs.get(phase);
    if (lm === undefined) {
      const m = this.#m;
      const l = { model: this.#model, worker_type: phase };
      for (const c of [m.requests, m.requestsStarted, m.nonMaxOverlapSelections, m.localityLostBlocks, m.backpressure])
        c.inc(l, 0);
      for (const outcome of ['exact', 'over', 'under']) m.predictionExact.inc({ ...l, outcome }, 0);
      for (const h of [m.isl, m.osl, m.predictedKvHitRate, m.predictionErrorTokens]) h.zero(l);
      lm = {
        requests: new CounterChild(m.requests, l),
        requestsStarted: new CounterChild(m.requestsStarted, l),
        isl: new HistogramChild(m.isl, l),
        osl: new HistogramChild(m.osl, l),
        kvHitRate: new HistogramChild(m.predictedKvHitRate, l),
        nonMaxOverlap: new CounterChild(m.nonMaxOverlapSelections, l),
        localityLostBlocks: new CounterChild(m.localityLostBlocks, l),
        backpressure: new CounterChild(m.backpressure, l),
        predictionError: new HistogramChild(m.predictionErrorTokens, l),
        exact: new CounterChild(m.predictionExact, { ...l, outcome: 'exact' }),
        over: new CounterChild(m.predictionExact, { ...l, outcome: 'over' }),
        under: new CounterChild(m.predictionExact, { ...l, outcome: 'under' }),
      };
      this.#legs.set(phase, lm);
    }
    return lm;
  }

  /** TTFT and ITL of one kind of leg on one worker (created at zero; dropped when the worker leaves). */
  latency(phase: WorkerRole, workerId: number): LatencyMetrics {
    const key = `${phase}:${workerId}`;
    let lat = this.#latency.get(key);
    if (lat === undefined) {
      const l = { model: this.#model, worker_type: phase, worker_id: String(workerId) };
      this.#m.ttft.zero(l);
      this.#m.itl.zero(l);
      lat = { ttft: new HistogramChild(this.#m.ttft, l), itl: new HistogramChild(this.#m.itl, l) };
      this.#latency.set(key, lat);
    }
    return lat;
  }

  /** The pool's queue depth, labelled by what its workers are; a relabelled pool zeroes its old series. */
  /** A request of `tenant` joined (+1) or left (-1) the router queue. */
  tenantQueued(tenant: string, delta: number): void {
    this.#m.tenantQueued.labels({ tenant }).inc(delta);
  }

  setQueue(pendingRequests: number, pendingIslTokens: number): void {
    this.#queueRequests = pendingRequests;
    this.#queueIslTokens = pendingIslTokens;
    this.#publishQueue();
  }

  /**
   * A worker joined (it is in the pool's members already): its ranks' load gauges, its TTFT/ITL and
   * the per-request series of the legs it serves exist from now on, at zero until it works.
   */
  addWorker(workerId: number, dpStart: number, dpSize: number): void {
    for (let r = dpStart; r < dpStart + dpSize; r++) this.#slot({ workerId, dpRank: r });
    for (const phase of this.#phasesOf(workerId)) {
      this.leg(phase);
      this.latency(phase, workerId);
    }
    // A first decode worker turns the decode pool's queue label from aggregated to decode.
    this.#publishQueue();
  }

  /**
   * The worker left the pool: its bookings left with it (the scheduler dropped them), and its load
   * gauges go too, so a scrape neither reports a worker that is gone nor its last booked load. Its
   * resolved TTFT/ITL children are dropped (its legs still in flight keep their own): ids come and go
   * with the fleet, and a worker back under the same id, its series removed meanwhile once it drained
   * (metrics' `forgetWorker`), gets them at zero again.
   */
  forgetWorker(workerId: number): void {
    for (const key of [...this.#latency.keys()]) if (key.endsWith(`:${workerId}`)) this.#latency.delete(key);
    const m = this.#m;
    for (const [key, g] of [...this.#workers]) {
      if (g.slot.workerId !== workerId) continue;
      this.#workers.delete(key);
      const l = g.labels;
      for (const gauge of [
        m.workerActiveRequests,
        m.workerActivePrefillTokens,
        m.workerActiveDecodeBlocks,
        m.workerIndexBlocks,
      ])
        gauge.remove(l);
    }
  }

  /** Stops writing the load gauges at scrape (the pool is closed). */
  close(): void {
    this.#unsubscribe();
  }

  /** Per-slot load gauges, resolved once, labelled with the worker's configured role, created at zero. */
  #slot(slot: WorkerRank): SlotGauges {
    const key = slotKey(slot.workerId, slot.dpRank);
    let g = this.#workers.get(key);
    if (g === undefined) {
      const role = this.#members.get(slot.workerId)?.role ?? this.#poolLabel();
      const labels = {
        model: this.#model,
        worker_id: String(slot.workerId),
        dp_rank: String(slot.dpRank),
        worker_type: role,
      };
      const m = this.#m;
      g = {
        slot,
        labels,
        activeRequests: m.workerActiveRequests.labels(labels),
        activePrefillTokens: m.workerActivePrefillTokens.labels(labels),
        activeDecodeBlocks: m.workerActiveDecodeBlocks.labels(labels),
        indexBlocks: m.workerIndexBlocks.labels(labels),
      };
      for (const gauge of [g.activeRequests, g.activePrefillTokens, g.activeDecodeBlocks, g.indexBlocks]) gauge.set(0);
      this.#workers.set(key, g);
    }
    return g;
  }

  /** The kinds of leg a member serves: its role's, and aggregated legs for a decode worker that serves alone. */
  #phasesOf(workerId: number): WorkerRole[] {
    const w = this.#members.get(workerId);
    if (w === undefined) return [];
    return w.role === 'decode' && w.servesAggregated === true ? ['decode', 'aggregated'] : [w.role];
  }

  #publishQueue(): void {
    const label = this.#poolLabel();
    const m = this.#m;
    if (this.#queueLabel !== undefined && this.#queueLabel !== label) {
      const old = { model: this.#model, worker_type: this.#queueLabel };
      m.queuePendingRequests.set(old, 0);
      m.queuePendingIslTokens.set(old, 0);
    }
    this.#queueLabel = label;
    const l = { model: this.#model, worker_type: label };
    m.queuePendingRequests.set(l, this.#queueRequests);
    m.queuePendingIslTokens.set(l, this.#queueIslTokens);
  }

  /** The prefill pool is `prefill`; the decode pool is `decode` once it holds a decode worker, else `aggregated`. */
  #poolLabel(): WorkerRole {
    if (this.#role === 'prefill') return 'prefill';
    for (const w of this.#members.values()) if (w.role === 'decode') return 'decode';
    return 'aggregated';
  }
}

interface Observer {
  observe(v: number): void;
}
interface Incrementer {
  inc(by?: number): void;
}

interface LegMetrics {
  readonly requests: Incrementer;
  readonly requestsStarted: Incrementer;
  readonly isl: Observer;
  readonly osl: Observer;
  readonly kvHitRate: Observer;
  readonly nonMaxOverlap: Incrementer;
  /** Blocks the non-max-overlap selections gave up (best overlap - chosen overlap). */
  readonly localityLostBlocks: Incrementer;
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

interface SlotGauges extends WorkerGauges {
  readonly slot: WorkerRank;
  readonly labels: { model: string; worker_id: string; dp_rank: string; worker_type: WorkerRole };
}
