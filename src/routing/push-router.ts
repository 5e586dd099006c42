/**
 * PushRouter: decides, books, dispatches and guards one leg of a request
 * against one pool of workers (Dynamo's KvPushRouter in KV mode, PushRouter in
 * the simple modes, DirectRoutingRouter in direct mode).
 *
 * Lifecycle contract (the bookkeeping must return to zero on every path):
 *   select (pins by phase, else best match; may wait in the router queue)
 *   -> book (before dispatch, so a dispatch failure still frees the slot)
 *   -> dispatch over undici
 *   -> guard: first output marks prefill complete and records TTFT; output
 *      blocks are tracked when enabled; usage's cached tokens are compared with
 *      the prediction; the booking is freed exactly once on end, upstream
 *      error, client disconnect (iterator `return()` or signal) or dispatch
 *      failure.
 * A connection failure before any byte was sent is retried on the next-best
 * worker (bounded by `maxRetries`, never for a pinned request); nothing is
 * retried once the engine has the request.
 */
import type { Clock, Rng } from '../core/clock.js';
import { outputBlockDecay, rejectionError, type RequestPhase, type RequestTracker, type RoutingDecision, type WorkerType } from '../core/index.js';
import type { WorkerInfo } from '../discovery/index.js';
import {
  EMPTY_LEG, EngineHttpError, dpRankLeg, mergeLegs, readChunkInfo,
  type EngineClient, type EngineEvent, type EngineEventStream, type EngineLeg, type ChunkInfo,
} from '../engines/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import type { PromptHashes } from '../wasm/index.js';
import { directPin, resolveDpRank } from './direct-router.js';
import { resolvePin, type KvRouter, type RoutingHints } from './kv-router.js';
import { createSimpleRouter, type Candidate, type SimpleRouter, type SimpleRouterMode } from './simple-routers.js';

export type RouterMode = 'kv' | SimpleRouterMode | 'direct';

export const ROUTER_MODES: readonly RouterMode[] = ['kv', 'round-robin', 'random', 'power-of-two', 'least-loaded', 'direct'];

/** One leg of a request, ready to route. */
export interface LegRequest {
  /** Context id; unique among this router's in-flight legs. */
  readonly requestId: string;
  /** Engine path: /v1/chat/completions or /v1/completions. */
  readonly path: string;
  /** The client's body, forwarded as sent (plus `leg` fields). */
  readonly body: Readonly<Record<string, unknown>>;
  readonly stream: boolean;
  readonly isl: number;
  readonly hashes: PromptHashes;
  readonly hints: RoutingHints;
  readonly routerConfigOverride?: Readonly<Record<string, unknown>> | undefined;
  readonly phase: RequestPhase;
  /** Extra body fields and headers for this leg (P/D handoff). */
  readonly leg?: EngineLeg | undefined;
  readonly signal: AbortSignal;
  readonly tracker?: RequestTracker | undefined;
  /** Arrival time on the router clock (TTFT is measured from here). */
  readonly receivedAt: number;
  /** Called once the request is on a socket to the engine (the bootstrap path waits for it). */
  readonly onDispatched?: (() => void) | undefined;
}

/** Where a leg goes. */
export interface Selection {
  readonly worker: WorkerInfo;
  readonly dpRank: number;
  /** Predicted cached blocks on the chosen worker (0 outside KV mode). */
  readonly overlapBlocks: number;
  /** True when a pin chose the worker. */
  readonly pinned: boolean;
  readonly decision: RoutingDecision | undefined;
}

export type LegBody =
  | { readonly kind: 'sse'; readonly events: AsyncIterable<EngineEvent> }
  | { readonly kind: 'json'; readonly bytes: Uint8Array; readonly json: unknown };

export interface LegResponse {
  readonly selection: Selection;
  readonly status: number;
  readonly body: LegBody;
}

export interface PushRouterOptions {
  readonly model: string;
  readonly workerType: WorkerType;
  readonly mode: RouterMode;
  readonly blockSize: number;
  /** The KV-aware chooser (mode `kv`), with its own bookkeeping. */
  readonly kvRouter?: KvRouter | undefined;
  readonly engine: EngineClient;
  readonly metrics?: KvgateMetrics | undefined;
  readonly clock: Clock;
  readonly rng: Rng;
  /** Re-dispatches after a connect failure before any byte was sent (default 2). */
  readonly maxRetries?: number | undefined;
  /** The dispatch path saw a worker unreachable (health probing can act at once). */
  readonly onWorkerUnreachable?: ((workerId: number) => void) | undefined;
  /** A leg was sent to (worker, rank): KV-event liveness starts watching. */
  readonly onDispatch?: ((workerId: number, dpRank: number) => void) | undefined;
}

const slotKey = (workerId: number, dpRank: number): string => `${workerId}:${dpRank}`;

/**
 * The labelled metric children one pool touches per request, resolved once:
 * a prom-client `labels()` call hashes its label object, and a request would
 * otherwise make about twenty of them.
 */
class PoolMetrics {
  readonly requests; readonly requestsStarted; readonly isl; readonly osl; readonly itl; readonly ttft;
  readonly kvHitRate; readonly nonMaxOverlap; readonly backpressure; readonly queueRequests; readonly queueIslTokens;
  readonly predictionError; readonly exact; readonly over; readonly under;
  readonly hashing; readonly matching; readonly scheduling; readonly total;
  readonly #m: KvgateMetrics;
  readonly #model: string;
  readonly #workerType: string;
  readonly #workers = new Map<string, WorkerGauges>();

  constructor(m: KvgateMetrics, model: string, workerType: string) {
    this.#m = m;
    this.#model = model;
    this.#workerType = workerType;
    const l = { model, worker_type: workerType };
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
      const l = { model: this.#model, worker_id: String(workerId), dp_rank: String(dpRank), worker_type: this.#workerType };
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

  forgetWorker(workerId: number): void {
    for (const key of [...this.#workers.keys()]) if (key.startsWith(`${workerId}:`)) this.#workers.delete(key);
  }
}

interface WorkerGauges {
  readonly activeRequests: { set(v: number): void };
  readonly activePrefillTokens: { set(v: number): void };
  readonly activeDecodeBlocks: { set(v: number): void };
  readonly indexBlocks: { set(v: number): void };
}

export class PushRouter {
  readonly model: string;
  readonly workerType: WorkerType;
  readonly mode: RouterMode;
  readonly blockSize: number;
  readonly kvRouter: KvRouter | undefined;
  readonly #engine: EngineClient;
  readonly #metrics: KvgateMetrics | undefined;
  readonly #pm: PoolMetrics | undefined;
  readonly #clock: Clock;
  readonly #maxRetries: number;
  readonly #simple: SimpleRouter | undefined;
  readonly #workers = new Map<number, WorkerInfo>();
  /** Simple and direct modes: in-flight legs per slot (KV mode keeps its own bookkeeping). */
  readonly #active = new Map<string, number>();
  readonly #onWorkerUnreachable: ((workerId: number) => void) | undefined;
  readonly #onDispatch: ((workerId: number, dpRank: number) => void) | undefined;
  #inflight = 0;

  constructor(opts: PushRouterOptions) {
    this.model = opts.model;
    this.workerType = opts.workerType;
    this.mode = opts.mode;
    this.blockSize = opts.blockSize;
    this.kvRouter = opts.kvRouter;
    this.#engine = opts.engine;
    this.#metrics = opts.metrics;
    this.#pm = opts.metrics === undefined ? undefined : new PoolMetrics(opts.metrics, opts.model, opts.workerType);
    this.#clock = opts.clock;
    this.#maxRetries = opts.maxRetries ?? 2;
    this.#onWorkerUnreachable = opts.onWorkerUnreachable;
    this.#onDispatch = opts.onDispatch;
    if (opts.mode === 'kv' && opts.kvRouter === undefined) throw new KvgateError('KVG_ERR_INVALID_CONFIG', 'router mode kv needs a KvRouter');
    const load = { activeRequests: (w: number, r: number) => this.#active.get(slotKey(w, r)) ?? 0 };
    this.#simple = opts.mode === 'kv' || opts.mode === 'direct' ? undefined : createSimpleRouter(opts.mode, { rng: opts.rng, load });
  }

  // ------------------------------------------------------------ membership

  addWorker(w: WorkerInfo): void {
    this.#workers.set(w.id, w);
    this.kvRouter?.addWorker(w.id, {
      dataParallelStartRank: w.dpStart,
      dataParallelSize: w.dpSize,
      ...(w.maxNumBatchedTokens !== undefined ? { maxNumBatchedTokens: w.maxNumBatchedTokens } : {}),
      ...(w.totalKvBlocks !== undefined ? { totalKvBlocks: w.totalKvBlocks } : {}),
    });
  }

  removeWorker(id: number): void {
    if (!this.#workers.delete(id)) return;
    this.kvRouter?.removeWorker(id);
    this.#pm?.forgetWorker(id);
    for (const key of [...this.#active.keys()]) if (key.startsWith(`${id}:`)) this.#active.delete(key);
  }

  workers(): WorkerInfo[] {
    return [...this.#workers.values()];
  }

  worker(id: number): WorkerInfo | undefined {
    return this.#workers.get(id);
  }

  get size(): number {
    return this.#workers.size;
  }

  /** Legs dispatched and not yet finished. */
  get inflight(): number {
    return this.#inflight;
  }

  /** In-flight legs per slot as this router booked them (all modes). */
  activeRequests(workerId: number, dpRank: number): number {
    if (this.kvRouter !== undefined) return this.kvRouter.load(workerId, dpRank)?.activeRequests ?? 0;
    return this.#active.get(slotKey(workerId, dpRank)) ?? 0;
  }

  // ------------------------------------------------------------ selection

  /**
   * Chooses the worker for a leg. `query` books nothing (query-only mode and
   * the prefill router's peek). Throws KvgateErrors: pins (UNKNOWN_WORKER,
   * INVALID_DP_RANK, MISSING_WORKER_ID in direct mode), NO_WORKERS,
   * BACKPRESSURE / OVERLOADED (503), CLIENT_ABORTED while queued.
   */
  async select(req: LegRequest, mode: 'book' | 'query', exclude?: ReadonlySet<number>): Promise<Selection> {
    if (this.#workers.size === 0) throw new KvgateError('KVG_ERR_NO_WORKERS', `no ${this.workerType} worker is available for model ${this.model}`);
    if (this.mode === 'kv') return this.#selectKv(req, mode, exclude);
    const pin = this.mode === 'direct' ? directPin(req.phase, req.hints) : resolvePin(req.phase, req.hints);
    let chosen: Candidate;
    let pinned = false;
    if (pin !== undefined) {
      const w = this.#workers.get(pin.workerId);
      if (w === undefined) throw new KvgateError('KVG_ERR_UNKNOWN_WORKER', `worker ${pin.workerId} is not a ${this.workerType} worker of model ${this.model}`, { workerId: pin.workerId });
      chosen = { workerId: w.id, dpRank: resolveDpRank({ workerId: w.id, dpStart: w.dpStart, dpSize: w.dpSize }, pin.dpRank) };
      pinned = true;
    } else {
      const candidates = this.#candidates(req.hints.allowedWorkerIds, exclude);
      chosen = mode === 'query' ? this.#simple!.peek(candidates) : this.#simple!.select(candidates);
    }
    if (mode === 'book') this.#active.set(slotKey(chosen.workerId, chosen.dpRank), this.activeRequests(chosen.workerId, chosen.dpRank) + 1);
    return { worker: this.#workers.get(chosen.workerId)!, dpRank: chosen.dpRank, overlapBlocks: 0, pinned, decision: undefined };
  }

  #candidates(allowed: RoutingHints['allowedWorkerIds'], exclude: ReadonlySet<number> | undefined): Candidate[] {
    const allow = allowed === undefined ? undefined : allowed instanceof Set ? allowed : new Set(allowed as readonly number[]);
    const out: Candidate[] = [];
    for (const w of this.#workers.values()) {
      if (exclude?.has(w.id) || (allow !== undefined && !allow.has(w.id))) continue;
      for (let r = 0; r < w.dpSize; r++) out.push({ workerId: w.id, dpRank: w.dpStart + r });
    }
    if (out.length === 0) throw new KvgateError('KVG_ERR_NO_WORKERS', `no eligible ${this.workerType} worker for model ${this.model}`);
    return out;
  }

  async #selectKv(req: LegRequest, mode: 'book' | 'query', exclude: ReadonlySet<number> | undefined): Promise<Selection> {
    const kv = this.kvRouter!;
    let hints = req.hints;
    if (exclude !== undefined && exclude.size > 0) {
      const allowed = this.#candidates(hints.allowedWorkerIds, exclude).map((c) => c.workerId);
      hints = { ...hints, allowedWorkerIds: new Set(allowed) };
    }
    const request = {
      requestId: req.requestId, hashes: req.hashes, isl: req.isl, phase: req.phase, routing: hints,
      ...(req.routerConfigOverride !== undefined ? { routerConfigOverride: req.routerConfigOverride } : {}),
    };
    let decision: RoutingDecision;
    if (mode === 'query') {
      decision = kv.findBestMatch(request, { mode: 'query' });
    } else {
      const outcome = kv.schedule(request);
      if (outcome.status === 'rejected') {
        this.#pm?.backpressure.inc();
        throw rejectionError(outcome.rejection);
      }
      if (outcome.status === 'queued') {
        this.#observeQueue();
        const ticket = outcome.ticket;
        const onAbort = (): void => void ticket.cancel();
        req.signal.addEventListener('abort', onAbort, { once: true });
        if (req.signal.aborted) ticket.cancel();
        const result = await ticket.admitted.finally(() => req.signal.removeEventListener('abort', onAbort));
        this.#observeQueue();
        if (result.status === 'cancelled') throw new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client went away while the request was queued');
        if (result.status === 'failed') throw result.error;
        decision = result.decision;
      } else {
        decision = outcome.decision;
      }
      this.#observeDecision(decision);
    }
    const w = this.#workers.get(decision.workerId);
    if (w === undefined) {
      // The scheduler knows a worker this router dropped: release and refuse.
      if (decision.booked) kv.free(req.requestId);
      throw new KvgateError('KVG_ERR_NO_WORKERS', `worker ${decision.workerId} left while the request was routed`);
    }
    return { worker: w, dpRank: decision.dpRank, overlapBlocks: decision.overlapBlocks, pinned: decision.pinned, decision };
  }

  #observeDecision(d: RoutingDecision): void {
    const m = this.#pm;
    if (m === undefined) return;
    m.requestsStarted.inc();
    m.hashing.observe(d.timing.hashingMs);
    m.matching.observe(d.timing.matchingMs);
    m.scheduling.observe(d.timing.schedulingMs);
    m.total.observe(d.timing.totalMs);
    if (d.requiredBlocks > 0) m.kvHitRate.observe(d.overlapBlocks / d.requiredBlocks);
    let maxOverlap = 0;
    for (const c of d.candidates) maxOverlap = Math.max(maxOverlap, c.overlapBlocks);
    if (!d.pinned && d.overlapBlocks < maxOverlap) m.nonMaxOverlap.inc();
  }

  #observeQueue(): void {
    if (this.#pm === undefined || this.kvRouter === undefined) return;
    this.#pm.queueRequests.set(this.kvRouter.pendingRequests);
    this.#pm.queueIslTokens.set(this.kvRouter.pendingIslTokens);
  }

  /** Undoes a booking (idempotent per leg through the guard). */
  #release(req: LegRequest, sel: Selection): void {
    if (this.kvRouter !== undefined) {
      this.kvRouter.free(req.requestId, { workerId: sel.worker.id, dpRank: sel.dpRank });
    } else {
      const key = slotKey(sel.worker.id, sel.dpRank);
      const n = (this.#active.get(key) ?? 0) - 1;
      if (n > 0) this.#active.set(key, n);
      else this.#active.delete(key);
    }
    this.#publishLoad(sel.worker.id, sel.dpRank);
  }

  #publishLoad(workerId: number, dpRank: number): void {
    if (this.#pm === undefined) return;
    const g = this.#pm.worker(workerId, dpRank);
    const load = this.kvRouter?.load(workerId, dpRank);
    g.activeRequests.set(load?.activeRequests ?? this.activeRequests(workerId, dpRank));
    if (load !== undefined) {
      g.activePrefillTokens.set(load.activePrefillTokens);
      g.activeDecodeBlocks.set(load.activeDecodeBlocks);
      g.indexBlocks.set(this.kvRouter!.index.blockCount(workerId, dpRank));
    }
  }

  // ------------------------------------------------------------ dispatch

  /**
   * Selects, books, dispatches and guards a leg. Resolves once the engine's
   * response has started. Engine 4xx answers are returned with their status
   * (the client gets the engine's own error); every other failure throws a
   * KvgateError after releasing the booking.
   */
  async dispatch(req: LegRequest, preselected?: Selection): Promise<LegResponse> {
    const exclude = new Set<number>();
    for (let attempt = 0; ; attempt++) {
      if (req.signal.aborted) {
        // A preselected selection arrives booked: give the booking back.
        if (attempt === 0 && preselected !== undefined) this.#release(req, preselected);
        throw new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client went away before dispatch');
      }
      const sel = attempt === 0 && preselected !== undefined ? preselected : await this.select(req, 'book', exclude);
      const guard = new LegGuard(this, req, sel);
      this.#inflight++;
      this.#publishLoad(sel.worker.id, sel.dpRank);
      req.tracker?.recordWorker(sel.worker.id, sel.dpRank);
      req.tracker?.recordPrefillStart();
      this.#onDispatch?.(sel.worker.id, sel.dpRank);
      const w = sel.worker;
      const leg = mergeLegs(w.dpSize > 1 || w.dpStart > 0 ? dpRankLeg(w.dialect, sel.dpRank) : EMPTY_LEG, req.leg ?? EMPTY_LEG);
      try {
        const res = await this.#engine.dispatch(w.url, req.path, req.body, {
          signal: req.signal,
          stream: req.stream,
          extraFields: leg.fields,
          headers: { ...leg.headers, 'x-request-id': req.requestId },
          ...(req.onDispatched !== undefined ? { onDispatched: req.onDispatched } : {}),
        });
        this.#pm?.requests.inc();
        this.#pm?.isl.observe(req.isl);
        if (res.kind === 'json') {
          guard.onOutput(readChunkInfo(res.json));
          guard.finish(true);
          return { selection: sel, status: res.status, body: { kind: 'json', bytes: res.body, json: res.json } };
        }
        return { selection: sel, status: res.status, body: { kind: 'sse', events: guardedEvents(res, guard) } };
      } catch (err) {
        guard.finish(false);
        if (err instanceof EngineHttpError && err.upstreamStatus < 500) {
          return { selection: sel, status: err.upstreamStatus, body: { kind: 'json', bytes: err.upstreamBody, json: err.upstreamJson } };
        }
        const retryable = isKvgateError(err, 'KVG_ERR_ENGINE_UNREACHABLE') || isKvgateError(err, 'KVG_ERR_ENGINE_NOT_REGISTERED');
        if (retryable) this.#onWorkerUnreachable?.(w.id);
        if (retryable && !sel.pinned && attempt < this.#maxRetries && !req.signal.aborted) {
          exclude.add(w.id);
          this.#metrics?.retries.labels({ model: this.model, reason: (err as KvgateError).code }).inc();
          continue;
        }
        if (isKvgateError(err)) this.#metrics?.requestErrors.labels({ model: this.model, code: err.code }).inc();
        throw err;
      }
    }
  }

  /** @internal used by LegGuard */
  _legEnded(req: LegRequest, sel: Selection): void {
    this.#inflight--;
    this.#release(req, sel);
  }

  /** @internal used by LegGuard */
  _metrics(): PoolMetrics | undefined {
    return this.#pm;
  }

  /** @internal used by LegGuard */
  _now(): number {
    return this.#clock.now();
  }
}

/**
 * Watches one dispatched leg and keeps the bookkeeping honest: prefill
 * complete on the first output, output blocks, prediction error from usage,
 * metrics, and exactly one release.
 */
class LegGuard {
  readonly #router: PushRouter;
  readonly #req: LegRequest;
  readonly #sel: Selection;
  #firstAt: number | undefined;
  #osl = 0;
  #usageOsl: number | undefined;
  #blocks: number;
  #finished = false;
  #compared = false;

  constructor(router: PushRouter, req: LegRequest, sel: Selection) {
    this.#router = router;
    this.#req = req;
    this.#sel = sel;
    this.#blocks = Math.ceil(req.isl / router.blockSize);
  }

  onOutput(info: ChunkInfo): void {
    const router = this.#router;
    const kv = router.kvRouter;
    const produced = info.tokenIds ?? info.outputChoices;
    if (produced > 0) {
      if (this.#firstAt === undefined) {
        this.#firstAt = router._now();
        kv?.markPrefillCompleted(this.#req.requestId);
        this.#req.tracker?.recordFirstToken();
        router._metrics()?.ttft.observe((this.#firstAt - this.#req.receivedAt) / 1000);
      }
      this.#osl += produced;
      if (kv !== undefined && kv.config.routerTrackOutputBlocks) {
        const blocks = Math.ceil((this.#req.isl + this.#osl) / router.blockSize);
        const decay = outputBlockDecay(this.#osl, this.#req.hints.expectedOutputTokens);
        while (this.#blocks < blocks) {
          this.#blocks++;
          kv.addOutputBlock(this.#req.requestId, decay);
        }
      }
    }
    if (info.usage !== undefined) {
      if (info.usage.completionTokens !== undefined) this.#usageOsl = info.usage.completionTokens;
      if (info.usage.cachedTokens !== undefined) this.#comparePrediction(info.usage.cachedTokens);
    }
  }

  /** The engine's own count of prefix-cache hits against what the router predicted. */
  #comparePrediction(cachedTokens: number): void {
    const router = this.#router;
    if (this.#compared || router.mode !== 'kv') return;
    this.#compared = true;
    const m = router._metrics();
    if (m === undefined) return;
    // An engine always computes at least the prompt's last token, so a fully
    // cached block-aligned prompt reports one block less (vLLM's rule).
    const usableBlocks = Math.min(this.#sel.overlapBlocks, Math.floor(Math.max(0, this.#req.isl - 1) / router.blockSize));
    const predicted = usableBlocks * router.blockSize;
    const error = cachedTokens - predicted;
    m.predictionError.observe(error);
    (error === 0 ? m.exact : error < 0 ? m.over : m.under).inc();
  }

  finish(dispatched: boolean): void {
    if (this.#finished) return;
    this.#finished = true;
    const router = this.#router;
    router._legEnded(this.#req, this.#sel);
    this.#req.tracker?.recordFinish();
    const m = router._metrics();
    if (!dispatched || m === undefined) return;
    const osl = this.#usageOsl ?? this.#osl;
    if (osl > 0) m.osl.observe(osl);
    if (this.#firstAt !== undefined && osl >= 2) m.itl.observe((router._now() - this.#firstAt) / (osl - 1) / 1000);
  }
}

/** Passes the engine's events through untouched while the guard watches them; releases on every exit. */
async function* guardedEvents(stream: EngineEventStream, guard: LegGuard): AsyncGenerator<EngineEvent> {
  let completed = false;
  try {
    for await (const ev of stream) {
      if (!ev.done && ev.json !== undefined) guard.onOutput(readChunkInfo(ev.json));
      yield ev;
    }
    completed = true;
  } finally {
    guard.finish(true);
    if (!completed) stream.cancel();
  }
}
