/**
 * KV mode: the KvRouter scores overlap and load, queues or rejects under
 * pressure, and keeps the authoritative bookkeeping; this selector adapts it
 * to the push router (exclusions, the queue wait, decision metrics).
 */
import { rejectionError, type RoutingDecision } from '../../core/index.js';
import type { WorkerRank, WorkerRole } from '../../common/index.js';
import type { WorkerInfo } from '../../discovery/index.js';
import { KvgateError } from '../../errors/index.js';
import type { KvRouter } from '../kv-router.js';
import type { PoolMetrics, WorkerGauges } from './pool-metrics.js';
import { eligibleSlots, type PoolMembers, type LegSelector } from './selector.js';
import type { LegRequest, Selection } from './types.js';

export class KvSelector implements LegSelector {
  readonly #pool: PoolMembers;
  readonly #kv: KvRouter;
  readonly #pm: PoolMetrics | undefined;

  constructor(pool: PoolMembers, kv: KvRouter, pm: PoolMetrics | undefined) {
    this.#pool = pool;
    this.#kv = kv;
    this.#pm = pm;
  }

  addWorker(w: WorkerInfo): void {
    this.#kv.addWorker(w.id, {
      dataParallelStartRank: w.dpStart,
      dataParallelSize: w.dpSize,
      ...(w.maxNumBatchedTokens !== undefined ? { maxNumBatchedTokens: w.maxNumBatchedTokens } : {}),
      ...(w.totalKvBlocks !== undefined ? { totalKvBlocks: w.totalKvBlocks } : {}),
      ...(w.taints !== undefined ? { taints: w.taints } : {}),
      // An engine found to use another block size or tokenizer caches blocks the router cannot name.
      kvOverlap: w.kvMismatch === undefined,
    });
  }

  removeWorker(id: number, hold = false): void {
    this.#kv.removeWorker(id, hold);
  }

  async select(req: LegRequest, mode: 'book' | 'query', exclude: ReadonlySet<number> | undefined): Promise<Selection> {
    const kv = this.#kv;
    let request = req;
    if (exclude !== undefined && exclude.size > 0) {
      const allowed = eligibleSlots(this.#pool, req.routing, exclude).map((c) => c.workerId);
      request = { ...req, routing: { ...req.routing, allowedWorkerIds: new Set(allowed) } };
    }
    let decision: RoutingDecision;
    if (mode === 'query') {
      decision = kv.findBestMatch(request, { mode: 'query' });
      if (decision.requiredBlocks > 0)
        this.#pm?.leg(req.phase).kvHitRate.observe(decision.overlapBlocks / decision.requiredBlocks);
    } else {
      decision = await this.#schedule(request);
      this.#observeDecision(req.phase, decision);
    }
    const w = this.#pool.members.get(decision.workerId);
    if (w === undefined) {
      // The scheduler knows a worker this router dropped: release and refuse.
      if (decision.booked) kv.free(req.requestId);
      throw new KvgateError('KVG_ERR_NO_WORKERS', `worker ${decision.workerId} left while the request was routed`);
    }
    const slot = { workerId: w.id, dpRank: decision.dpRank };
    return { slot, worker: w, overlapBlocks: decision.overlapBlocks, pinned: decision.pinned, decision };
  }

  /** Books now, or waits in the router queue until admitted; the client going away cancels the wait. */
  async #schedule(req: LegRequest): Promise<RoutingDecision> {
    const outcome = this.#kv.schedule(req);
    if (outcome.status === 'routed') return outcome.decision;
    if (outcome.status === 'rejected') {
      this.#pm?.leg(req.phase).backpressure.inc();
      throw rejectionError(outcome.rejection);
    }
    this.#observeQueue();
    const tenant = req.routing.tenant?.tenant;
    if (tenant !== undefined) this.#pm?.tenantQueued(tenant, 1);
    const ticket = outcome.ticket;
    const onAbort = (): void => void ticket.cancel();
    req.signal.addEventListener('abort', onAbort, { once: true });
    if (req.signal.aborted) ticket.cancel();
    const result = await ticket.admitted.finally(() => req.signal.removeEventListener('abort', onAbort));
    if (tenant !== undefined) this.#pm?.tenantQueued(tenant, -1);
    this.#observeQueue();
    if (result.status === 'cancelled')
      throw new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client went away while the request was queued');
    if (result.status === 'failed') throw result.error;
    return result.decision;
  }

  release(req: LegRequest, sel: Selection): void {
    this.#kv.free(req.requestId, sel.slot);
  }

  activeRequests(slot: WorkerRank): number {
    return this.#kv.load(slot)?.activeRequests ?? 0;
  }

  publishLoad(g: WorkerGauges, slot: WorkerRank): void {
    const load = this.#kv.load(slot);
    // A slot the scheduler no longer knows (its worker left with legs in flight) holds nothing:
    // every gauge goes to zero, not only the request count.
    g.activeRequests.set(load?.activeRequests ?? 0);
    g.activePrefillTokens.set(load?.activePrefillTokens ?? 0);
    g.activeDecodeBlocks.set(load?.activeDecodeBlocks ?? 0);
    if (load !== undefined) g.indexBlocks.set(this.#kv.index.blockCount(slot.workerId, slot.dpRank));
  }

  #observeDecision(phase: WorkerRole, d: RoutingDecision): void {
    const m = this.#pm;
    if (m === undefined) return;
    const lm = m.leg(phase);
    lm.requestsStarted.inc();
    // The decision times in milliseconds; the overhead histogram is in seconds.
    m.hashing.observe(d.timing.hashingMs / 1000);
    m.matching.observe(d.timing.matchingMs / 1000);
    m.scheduling.observe(d.timing.schedulingMs / 1000);
    m.total.observe(d.timing.totalMs / 1000);
    if (d.requiredBlocks > 0) lm.kvHitRate.observe(d.overlapBlocks / d.requiredBlocks);
    // The scheduler's own maximum over the candidates: reading `d.candidates` would build one object per candidate.
    const maxOverlap = d.maxOverlapBlocks;
    if (!d.pinned && d.overlapBlocks < maxOverlap) {
      lm.nonMaxOverlap.inc();
      lm.localityLostBlocks.inc(maxOverlap - d.overlapBlocks);
    }
  }

  #observeQueue(): void {
    this.#pm?.setQueue(this.#kv.pendingRequests, this.#kv.pendingIslTokens);
  }
}
