/**
 * PushRouter: decides, books, dispatches and guards one leg of a request
 * against one pool of workers (Dynamo's KvPushRouter in KV mode, PushRouter in
 * the simple modes, DirectRoutingRouter in direct mode). The modes differ only
 * in the `LegSelector` (selector.ts); everything else here is shared.
 *
 * Lifecycle contract (the bookkeeping must return to zero on every path):
 *   select (pins by phase, else best match; may wait in the router queue)
 *   -> book (before dispatch, so a dispatch failure still frees the slot)
 *   -> dispatch over undici (a leg of more than one token streams with usage and
 *      a `stream: false` client gets the answer assembled from the chunks, so the
 *      guard sees the first token when it happens; leg-dispatch.ts's `legStreams`)
 *   -> guard (leg-guard.ts): first output marks prefill complete and records
 *      TTFT; output blocks are tracked when enabled; usage's cached tokens are
 *      compared with the prediction; the booking is freed exactly once on end,
 *      upstream error, client disconnect (iterator `return()` or signal) or
 *      dispatch failure.
 * A connection failure before any byte was sent is retried on the next-best worker (retry.ts: bounded by
 * `maxRetries`, never for a pinned request); nothing is retried once the engine has the request.
 */
import {
  clientSpan,
  traceLinkOf,
  inSpan,
  spanFailed,
  type RouterMode,
  type RoutingHints,
  type WorkerRank,
  type WorkerRole,
} from '../../common/index.js';
import type { WorkerInfo } from '../../discovery/index.js';
import {
  EngineHttpError,
  clientWantsUsage,
  isMigratable,
  readChunkInfo,
  refusalBody,
  type EngineClient,
  type EngineResponse,
} from '../../engines/index.js';
import { KvgateError, isKvgateError } from '../../errors/index.js';
import type { RouterContext } from '../context.js';
import type { KvRouter } from '../kv-router.js';
import { assembledAnswer } from './assembled-answer.js';
import { DirectSelector } from './direct-selector.js';
import { KvSelector } from './kv-selector.js';
import { legDispatchOptions, type LegTimeouts } from './leg-dispatch.js';
import {
  isConnectionFailure,
  noteLegFailure,
  reportOutcome,
  retryReason,
  type DispatchOutcomeListener,
} from './leg-failures.js';
import { LegGuard, guardedEvents } from './leg-guard.js';
import { PoolMetrics } from './pool-metrics.js';
import { retryBeforeFirstByte, type RetryScope } from './retry.js';
import { carriesRequiredTaints, type PoolMembers, type LegSelector } from './selector.js';
import { SimpleSelector } from './simple-selector.js';
import { routingLogLine, selectionAttributes } from './trace-attributes.js';
import type { LegRequest, LegResponse, Selection } from './types.js';
import { isAgentPath, midStreamBlocker } from './continuation.js';
import { migratingEvents, migrationHooks, type MigrationHooks, type MigrationPolicy } from './migration.js';

const NO_MIGRATION: MigrationPolicy = { limit: 0 };

/** The span `inSpan` hands its function. */
type RouteSpan = Parameters<Parameters<typeof inSpan>[1]>[0];

export interface PushRouterOptions {
  readonly model: string;
  readonly role: WorkerRole;
  readonly mode: RouterMode;
  readonly blockSize: number;
  /** The KV-aware chooser (mode `kv`), with its own bookkeeping. */
  readonly kvRouter?: KvRouter | undefined;
  readonly engine: EngineClient;
  /** Re-dispatches after a connect failure before any byte was sent (default 2). */
  readonly maxRetries?: number | undefined;
  /** The dispatch path saw a worker unreachable (health probing can act at once). */
  readonly onWorkerUnreachable?: ((workerId: number) => void) | undefined;
  /**
   * A dispatch ended (outlier detection): `error` says why it failed (a 5xx status or event, a connection failure, a malformed
   * answer, a missed deadline), undefined for an answer below 500 (a stream's at its clean end); client cancels are not told.
   */
  readonly onDispatchOutcome?: DispatchOutcomeListener | undefined;
  /** A leg was sent to (worker, rank): KV-event liveness starts watching. */
  readonly onDispatch?: ((slot: WorkerRank) => void) | undefined;
  /**
   * Progress deadlines per leg (ms; 0 or undefined: none). `firstByteMs` bounds dispatch to first output on
   * streamed legs, unstreamed one-token legs (prefills, one-token requests) and embeddings;
   * `streamIdleMs` bounds the silence between two SSE events.
   */
  readonly legTimeouts?: LegTimeouts | undefined;
  /** Request migration of aggregated legs (migration.ts); default off. */
  readonly migration?: MigrationPolicy | undefined;
}

export class PushRouter implements PoolMembers {
  readonly model: string;
  readonly role: WorkerRole;
  readonly mode: RouterMode;
  readonly blockSize: number;
  readonly kvRouter: KvRouter | undefined;
  readonly #members = new Map<number, WorkerInfo>();
  readonly #ctx: RouterContext;
  readonly #opts: PushRouterOptions;
  readonly #pm: PoolMetrics | undefined;
  readonly #selector: LegSelector;
  #inflight = 0;

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG for mode `kv` without a KvRouter. */
  constructor(opts: PushRouterOptions, ctx: RouterContext) {
    this.model = opts.model;
    this.role = opts.role;
    this.mode = opts.mode;
    this.blockSize = opts.blockSize;
    this.kvRouter = opts.kvRouter;
    this.#ctx = ctx;
    this.#opts = opts;
    // The load gauges are read from the selector's bookkeeping at scrape time.
    this.#pm =
      ctx.metrics === undefined
        ? undefined
        : new PoolMetrics(ctx.metrics, opts.model, opts.role, this.#members, (g, slot) =>
            this.#selector.publishLoad(g, slot),
          );
    if (opts.mode === 'kv') {
      if (opts.kvRouter === undefined)
        throw new KvgateError('KVG_ERR_INVALID_CONFIG', 'router mode kv needs a KvRouter');
      this.#selector = new KvSelector(this, opts.kvRouter, this.#pm);
    } else {
      this.#selector = opts.mode === 'direct' ? new DirectSelector(this) : new SimpleSelector(this, opts.mode, ctx.rng);
    }
  }

  // ------------------------------------------------------------ membership

  addWorker(w: WorkerInfo): void {
    this.#members.set(w.id, w);
    this.#selector.addWorker(w);
    this.#pm?.addWorker(w.id, w.dpStart, w.dpSize);
  }

  /** `hold` (marked down): its bookings stay with its selector for its return; else they go, a held worker's too. */
  removeWorker(id: number, hold = false): void {
    if (this.#members.delete(id)) this.#pm?.forgetWorker(id);
    else if (hold) return;
    this.#selector.removeWorker(id, hold);
  }

  /** The pool's workers by id (what the selectors choose from). */
  get members(): ReadonlyMap<number, WorkerInfo> {
    return this.#members;
  }

  workers(): WorkerInfo[] {
    return [...this.#members.values()];
  }

  worker(id: number): WorkerInfo | undefined {
    return this.#members.get(id);
  }

  get size(): number {
    return this.#members.size;
  }

  /** This pool's migration knobs (limit 0: off). */
  get migration(): MigrationPolicy {
    return this.#opts.migration ?? NO_MIGRATION;
  }

  /** Legs dispatched and not yet finished. */
  get inflight(): number {
    return this.#inflight;
  }

  /**
   * Whether a request that does not name `workerId` may still go there: the worker is in the pool, among the request's
   * `allowedWorkerIds`, and carries every required taint. A sticky session's worker must pass this to keep the
   * session (a session never overrides the request's own restrictions).
   */
  eligible(workerId: number, routing: RoutingHints): boolean {
    const w = this.#members.get(workerId);
    if (w === undefined) return false;
    const allowed = routing.allowedWorkerIds;
    if (
      allowed !== undefined &&
      !(allowed instanceof Set ? allowed.has(workerId) : (allowed as readonly number[]).includes(workerId))
    )
      return false;
    return carriesRequiredTaints(w, routing);
  }

  /** In-flight legs per slot as this router booked them (all modes). */
  activeRequests(slot: WorkerRank): number {
    return this.#selector.activeRequests(slot);
  }

  // ------------------------------------------------------------ selection

  /**
   * Chooses the worker for a leg. `query` books nothing (query-only mode and
   * the prefill router's peek). Throws KvgateErrors: pins (UNKNOWN_WORKER,
   * INVALID_DP_RANK, MISSING_WORKER_ID in direct mode), NO_WORKERS,
   * BACKPRESSURE / OVERLOADED (503), CLIENT_ABORTED while queued.
   */
  select(req: LegRequest, mode: 'book' | 'query', exclude?: ReadonlySet<number>): Promise<Selection> {
    if (this.#members.size === 0)
      return Promise.reject(
        new KvgateError('KVG_ERR_NO_WORKERS', `no ${this.role} worker is available for model ${this.model}`),
      );
    // The decision's span (chosen worker, overlap, cost breakdown); `kvgate.pool` is the leg's phase, not the side.
    return inSpan(
      'kvgate.route',
      (span) => this.#decide(req, mode, exclude, span),
      () => ({ 'kvgate.model': this.model, 'kvgate.pool': req.phase, 'kvgate.router_mode': this.mode }),
    );
  }

  async #decide(
    req: LegRequest,
    mode: 'book' | 'query',
    exclude: ReadonlySet<number> | undefined,
    span: RouteSpan,
  ): Promise<Selection> {
    const sel = await this.#selector.select(req, mode, exclude);
    if (span.isRecording()) span.setAttributes(selectionAttributes(mode, sel));
    const log = this.#ctx.logger;
    if (log.isLevelEnabled?.('debug') === true) {
      const line = routingLogLine(req.requestId, mode, sel);
      // The model's logger names the model (RouterContext): the line adds the decision's facts only.
      log.debug(line.fields, line.msg);
    }
    // A query is observed as a dispatch is (Dynamo observes before returning a query-only answer).
    if (mode === 'query') this.#pm?.leg(req.phase).isl.observe(req.isl);
    return sel;
  }

  // ------------------------------------------------------------ dispatch

  /**
   * Selects, books, dispatches and guards a leg. Resolves once the engine's
   * response has started. Engine 4xx answers are returned with their status
   * (the client gets the engine's message in kvgate's error object, `refusalBody`); every other failure throws a
   * KvgateError after releasing the booking. `preselected` arrives booked; `excluded` workers are never chosen.
   */
  async dispatch(req: LegRequest, preselected?: Selection, excluded?: ReadonlySet<number>): Promise<LegResponse> {
    const policy = this.#opts.migration ?? NO_MIGRATION;
    // Decode legs of a disaggregated request carry a handoff a continuation could not reuse: the PrefillRouter
    // migrates them through a new prefill and decode (prefill-router.ts). An agent API's stream migrates only
    // before its first event, as it is (migration.ts): it asks no token ids.
    const migrates = policy.limit > 0 && req.phase === 'aggregated';
    const resumable = migrates && !isAgentPath(req.path) && midStreamBlocker(req.body) === undefined;
    const exclude = new Set<number>(excluded);
    const first = await this.#attempts(req, preselected, exclude, req.returnTokenIds === true || resumable);
    if (first.body.kind !== 'sse') return first;
    const sel = first.selection;
    const events = migrates
      ? migratingEvents(req, first.body.events, sel.worker.id, () => this.#migrationHooks(req, sel, policy, exclude))
      : first.body.events;
    if (req.stream) return { selection: sel, status: first.status, body: { kind: 'sse', events } };
    try {
      const answer = await assembledAnswer(events, first.status, req.path, this.#opts.engine.maxResponseBytes);
      return { selection: sel, status: answer.status, body: answer.body };
    } catch (err) {
      if (isKvgateError(err)) this.#ctx.metrics?.requestErrors.labels({ model: this.model, code: err.code }).inc();
      throw err;
    }
  }

  /**
   * Dispatches one leg, retried elsewhere while nothing reached the client; `exclude` is the request's failed workers.
   * `tokenIds`: ask for the token ids a migration resumes from (`LegRequest.returnTokenIds`, given apart so the leg is not copied).
   */
  #attempts(
    req: LegRequest,
    preselected: Selection | undefined,
    exclude: Set<number>,
    tokenIds: boolean,
  ): Promise<LegResponse> {
    const policy = {
      model: this.model,
      maxRetries: this.#opts.maxRetries ?? 2,
      signal: req.signal,
      metrics: this.#ctx.metrics,
      exclude,
    };
    return retryBeforeFirstByte(policy, async (scope) => {
      const first = scope.attempt === 0 ? preselected : undefined;
      if (req.signal.aborted) {
        if (first !== undefined) this.#selector.release(req, first);
        throw new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client went away before dispatch');
      }
      if (scope.attempt === 0)
        return this.#send(req, first ?? (await this.select(req, 'book', scope.exclude)), scope, tokenIds);
      // A retry on another worker: its own span around the new decision and the new engine leg.
      return inSpan(
        'kvgate.retry',
        async () => this.#send(req, await this.select(req, 'book', scope.exclude), scope, tokenIds),
        () => ({
          'kvgate.retry.attempt': scope.attempt,
          'kvgate.retry.excluded_workers': [...scope.exclude].join(','),
        }),
      );
    });
  }

  /** What a request's migrating stream asks of this router: re-dispatch, exclusion, counting and logging. */
  #migrationHooks(req: LegRequest, sel: Selection, policy: MigrationPolicy, exclude: Set<number>): MigrationHooks {
    return migrationHooks({
      ctx: this.#ctx,
      model: this.model,
      role: this.role,
      requestId: req.requestId,
      policy,
      pinned: sel.pinned,
      exclude,
      redispatch: async (leg) => {
        const res = await this.#attempts(leg, undefined, exclude, !isAgentPath(leg.path));
        if (res.body.kind === 'sse') return { events: res.body.events, workerId: res.selection.worker.id };
        throw new KvgateError('KVG_ERR_ENGINE_FAILED', `the engine refused the continuation (${res.status})`, {
          upstreamStatus: res.status,
        });
      },
      onExcluded: (workerId, err) => {
        if (isConnectionFailure(err)) this.#opts.onWorkerUnreachable?.(workerId);
      },
    });
  }

  /**
   * One attempt on a booked selection: guard, send, hand back the answer (or fail, asking for a retry when nothing
   * reached the client).
   */
  async #send(req: LegRequest, sel: Selection, scope: RetryScope, tokenIds: boolean): Promise<LegResponse> {
    // The engine leg's span lasts until the booking is released (the answer or stream ended, or failed).
    // A decode leg's span links to its prefill leg's (the prefill's trace link, recorded when it was sent).
    const trace = clientSpan(
      `kvgate.engine.${req.phase}`,
      () => ({
        'kvgate.model': this.model,
        'kvgate.phase': req.phase,
        'kvgate.worker_id': sel.slot.workerId,
        'kvgate.dp_rank': sel.slot.dpRank,
        'kvgate.attempt': scope.attempt,
        // A migrated stream's continuation: its retries count from 0 again, so the migration tells its legs apart.
        'kvgate.migration': req.migration ?? 0,
      }),
      req.phase === 'decode' ? req.tracker?.prefillLink : undefined,
    );
    const link = req.phase === 'prefill' ? traceLinkOf(trace.span) : undefined;
    if (link !== undefined) req.tracker?.recordPrefillLink(link);
    const guard = this.#guard(req, sel, trace.span);
    this.#inflight++;
    req.tracker?.recordWorker(sel.slot);
    req.tracker?.recordPrefillStart();
    this.#opts.onDispatch?.(sel.slot);
    const w = sel.worker;
    const options = legDispatchOptions(req, sel, tokenIds, trace.headers, this.#opts.legTimeouts);
    try {
      const res = await this.#opts.engine.dispatch(w.url, req.path, req.body, options);
      return this.#answered(req, sel, guard, res);
    } catch (err) {
      spanFailed(trace.span, err);
      guard.finish(false);
      guard.failed(err);
      return this.#sendFailed(sel, scope, err);
    }
  }

  /** The guard of one dispatched leg: it releases the booking and ends the leg's span once, and notes a failure. */
  #guard(req: LegRequest, sel: Selection, span: RouteSpan): LegGuard {
    return new LegGuard(
      {
        clock: this.#ctx.clock,
        metrics: this.#pm,
        kvRouter: this.mode === 'kv' ? this.kvRouter : undefined,
        blockSize: this.blockSize,
        release: () => {
          this.#inflight--;
          this.#selector.release(req, sel);
          span.end();
        },
        onError: (err) => {
          spanFailed(span, err);
          noteLegFailure({ ctx: this.#ctx, model: this.model, role: this.role, req, sel }, err);
        },
        onCachedTokens: (tokens) => span.setAttribute('kvgate.cached_tokens', tokens),
        onStreamOutcome: (err) => reportOutcome(this.#opts.onDispatchOutcome, sel.worker.id, err),
      },
      req,
      sel,
    );
  }

  /** The engine took the leg: counted, its answer handed back (JSON read through the guard at once; a stream's outcome told at its end). */
  #answered(req: LegRequest, sel: Selection, guard: LegGuard, res: EngineResponse): LegResponse {
    if (res.kind === 'json') this.#opts.onDispatchOutcome?.(sel.worker.id, undefined);
    const lm = this.#pm?.leg(req.phase);
    lm?.requests.inc();
    lm?.isl.observe(req.isl);
    if (res.kind === 'json') {
      guard.onOutput(readChunkInfo(res.json));
      guard.finish(true);
      return { selection: sel, status: res.status, body: { kind: 'json', bytes: res.body, json: res.json } };
    }
    return {
      selection: sel,
      status: res.status,
      body: { kind: 'sse', events: guardedEvents(res, guard, req.stream && !clientWantsUsage(req.body)) },
    };
  }

  /**
   * The dispatch threw (its guard already released the booking): an engine 4xx is the client's answer; otherwise
   * health is told, and the failure is thrown, asking for a retry elsewhere when it may have one.
   */
  #sendFailed(sel: Selection, scope: RetryScope, err: unknown): LegResponse {
    const w = sel.worker;
    reportOutcome(this.#opts.onDispatchOutcome, w.id, err);
    if (err instanceof EngineHttpError && err.upstreamStatus < 500) {
      // The client gets the engine's status and message in kvgate's error object, never the engine's body or headers.
      const body = refusalBody(err.refusal, w.id);
      return {
        selection: sel,
        status: err.upstreamStatus,
        body: { kind: 'json', bytes: JSON.stringify(body), json: body },
      };
    }
    if (isConnectionFailure(err)) this.#opts.onWorkerUnreachable?.(w.id);
    // Nothing reached the client: a migratable failure (unreachable, reset, no output in time, 500/502/503/504) goes
    // elsewhere.
    if (isMigratable(err) && !sel.pinned && scope.retryElsewhere(w.id, retryReason(err))) throw err;
    if (isKvgateError(err)) this.#ctx.metrics?.requestErrors.labels({ model: this.model, code: err.code }).inc();
    throw err;
  }

  /** Undoes a `select(req, 'book')` whose leg is never dispatched (P/D's decode slot); a dispatched leg's guard does. */
  unbook(req: LegRequest, sel: Selection): void {
    this.#selector.release(req, sel);
  }

  /** Stops reporting this pool's load to the metrics (the model router is closing). */
  close(): void {
    this.#pm?.close();
  }
}
