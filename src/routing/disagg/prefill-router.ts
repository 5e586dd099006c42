/**
 * PrefillRouter: disaggregated serving for one model (Dynamo's PrefillRouter). It
 * owns the prefill pool and runs each request's prefill there before its
 * decode goes to the decode pool (see disagg-request.ts for one request's
 * flow and its failure rules).
 *
 * Lifecycle (as Dynamo's), driven by the registry through `addWorker` /
 * `removeWorker`:
 *
 *   pending ──first prefill worker──> active ──last one gone──> inactive
 *                                       ^                          │
 *                                       └──── one comes back ──────┘
 *
 * Activation builds the prefill pool once (the host's factory: in KV mode a
 * KvRouter of worker type "prefill" without active-block tracking, so it
 * scores on overlap and prompt load only; a simple router otherwise); an
 * inactive router keeps it. Only an active router takes requests; otherwise
 * the host serves them aggregated on the decode pool, or refuses them under
 * `enforceDisagg`. `canServeRequests()` gates whether the model is listed.
 * Each switch between active and inactive is a log line (info when active,
 * warn when inactive, saying what becomes of the requests) and a count in
 * `kvgate_prefill_pool_transitions_total{to}`; `kvgate_prefill_pool_active`
 * follows the state (both at zero from construction).
 *
 * Choosing the prefill worker (Dynamo's `resolve_prefill_worker`): the
 * session's sticky worker first (dropped if it left, is no longer eligible for
 * the request: allowed ids, required taints, or the scheduler refuses it), then a pinned `prefill_worker_id` (with `prefill_dp_rank`, else
 * `dp_rank`), then the router's best. In KV mode the choice goes through the
 * scheduler with its queue and backpressure, so the prefill slot is booked
 * where it is chosen.
 */
import { setActiveSpanAttribute, type RouterMode, type SessionHint, type WorkerRank } from '../../common/index.js';
import type { WorkerInfo } from '../../discovery/index.js';
import { ALWAYS_DISAGGREGATE, decideDisagg, type DisaggDecision, type DisaggPolicy } from '../../core/index.js';
import { KvgateError, isKvgateError } from '../../errors/index.js';
import type { RouterContext } from '../context.js';
import { directPin } from '../pins.js';
import type { PushRouter } from '../push/push-router.js';
import { retryBeforeFirstByte } from '../push/retry.js';
import { midStreamBlocker } from '../push/continuation.js';
import { migratingEvents, migrationHooks } from '../push/migration.js';
import type { EngineEvent } from '../../engines/index.js';
import type { LegRequest, Selection } from '../push/types.js';
import type { KvRouter } from '../kv-router.js';
import { poolSessions, type SessionLimits, type StickySessions } from '../sticky-sessions.js';
import { DisaggRequest } from './disagg-request.js';
import { bootstrapProblem, decodeOverrideOf } from './handoff.js';
import type { DisaggOutcome, DisaggSseEvent } from './types.js';

export type PrefillState = 'pending' | 'active' | 'inactive';

export interface PrefillRouterOptions {
  readonly model: string;
  readonly mode: RouterMode;
  /** Refuse requests (and hide the model) rather than serve them aggregated when no prefill worker is available. */
  readonly enforceDisagg?: boolean | undefined;
  /** The decode pool (its KvRouter is the decode router). */
  readonly decode: PushRouter;
  /** Builds the prefill pool at first activation (called once). */
  readonly createPool: () => PushRouter;
  /** Sliding TTL of a sticky session without its own `timeout` (default 300 s). */
  readonly sessionTtlMs?: number | undefined;
  /** Bounds of the sticky sessions (longest TTL, number kept). */
  readonly sessionLimits?: SessionLimits | undefined;
  /** Re-runs of a request whose prefill worker could not be reached (nothing sent), on another one (default 2). */
  readonly maxRetries?: number | undefined;
  /** Per request, whether to disaggregate while the pool is active (default: always). */
  readonly policy?: DisaggPolicy | undefined;
}

/** What a query-only request would do: both workers, nothing booked. */
export interface DisaggQuery {
  readonly prefill: Selection;
  readonly decode: Selection;
}

export class PrefillRouter {
  readonly model: string;
  readonly mode: RouterMode;
  readonly enforceDisagg: boolean;
  readonly sessions: StickySessions;
  readonly #decode: PushRouter;
  readonly #createPool: () => PushRouter;
  readonly #ctx: RouterContext;
  readonly #maxRetries: number;
  readonly #policy: DisaggPolicy;
  #pool: PushRouter | undefined;
  #state: PrefillState = 'pending';
  #activations = 0;

  constructor(opts: PrefillRouterOptions, ctx: RouterContext) {
    this.model = opts.model;
    this.mode = opts.mode;
    this.enforceDisagg = opts.enforceDisagg === true;
    this.#decode = opts.decode;
    this.#createPool = opts.createPool;
    this.#ctx = ctx;
    this.#maxRetries = opts.maxRetries ?? 2;
    this.#policy = opts.policy ?? ALWAYS_DISAGGREGATE;
    this.sessions = poolSessions(ctx, opts.model, 'prefill', opts.sessionTtlMs, opts.sessionLimits);
    // The model's pool series exist from the start, at zero (pending: no prefill worker yet).
    ctx.metrics?.prefillPoolActive.labels({ model: opts.model }).set(0);
    for (const to of ['active', 'inactive'] as const)
      ctx.metrics?.prefillPoolTransitions.labels({ model: opts.model, to }).inc(0);
  }

  get state(): PrefillState {
    return this.#state;
  }

  /** The prefill pool (undefined until the first activation). */
  get pool(): PushRouter | undefined {
    return this.#pool;
  }

  /** Times the router went from pending or inactive to active. */
  get activations(): number {
    return this.#activations;
  }

  /**
   * As Dynamo decides: deactivated -> `!enforceDisagg`; otherwise `!enforceDisagg || activated`.
   * Either way a strict-disagg model is listed only while a prefill worker is available.
   */
  canServeRequests(): boolean {
    if (this.#state === 'inactive') return !this.enforceDisagg;
    return !this.enforceDisagg || this.#state === 'active';
  }

  /**
   * A prefill worker became available: activates (building the pool the first time) or reactivates.
   * A worker whose bootstrap endpoint is unusable is refused (false) and logged.
   */
  addWorker(w: WorkerInfo): boolean {
    const problem = bootstrapProblem(w);
    if (problem !== undefined) {
      this.#ctx.logger.warn(
        { workerId: w.id, url: w.url, role: w.role },
        `prefill worker ${w.id} not used: ${problem}`,
      );
      return false;
    }
    this.#pool ??= this.#createPool();
    this.#pool.addWorker(w);
    this.sessions.releaseWorker(w.id);
    if (this.#state !== 'active') {
      this.#activations++;
      this.#switch('active', w.id, w.url, 'requests run disaggregated');
    }
    return true;
  }

  /**
   * A prefill worker became unavailable: `hold` (marked down) holds its sessions (see `StickySessions.holdWorker`)
   * and its bookings (`PushRouter.removeWorker`), else (it left, also when already down) they go; the last one
   * deactivates the router.
   */
  removeWorker(id: number, hold = false): void {
    if (hold) this.sessions.holdWorker(id);
    else this.sessions.unbindWorker(id);
    const pool = this.#pool;
    if (pool === undefined) return;
    const w = pool.worker(id);
    // One held earlier is no longer in the pool: what was kept for it goes.
    if (w === undefined) return pool.removeWorker(id, hold);
    pool.removeWorker(id, hold);
    if (pool.size > 0) return;
    const then = this.enforceDisagg
      ? 'requests are refused (enforce_disagg) until one returns'
      : this.fallbackPossible()
        ? 'requests are served aggregated on the decode pool until one returns'
        : 'none of its decode workers serves alone: the model is unavailable until one returns';
    this.#switch('inactive', id, w.url, then);
  }

  /** Moves to `to` (active or inactive), logged (the worker that moved it, the pool's size) and counted. */
  #switch(to: 'active' | 'inactive', workerId: number, url: string, then: string): void {
    const from = this.#state;
    this.#state = to;
    const m = this.#ctx.metrics;
    m?.prefillPoolActive.labels({ model: this.model }).set(to === 'active' ? 1 : 0);
    m?.prefillPoolTransitions.labels({ model: this.model, to }).inc();
    const line = { from, to, workerId, url, prefillWorkers: this.#pool?.size ?? 0 };
    if (to === 'active')
      this.#ctx.logger.info(line, `prefill pool active: prefill worker ${workerId} available; ${then}`);
    else this.#ctx.logger.warn(line, `prefill pool inactive: its last prefill worker ${workerId} is gone; ${then}`);
  }

  /** Some decode-pool worker can serve a request without a prefill (aggregated, or a decode worker that says so). */
  fallbackPossible(): boolean {
    for (const w of this.#decode.members.values()) if (w.role !== 'decode' || w.servesAggregated === true) return true;
    return false;
  }

  /** Decode-pool workers that cannot serve a request alone: an aggregated leg (policy or fallback) never goes there. */
  decodeOnlyWorkers(): ReadonlySet<number> | undefined {
    let out: Set<number> | undefined;
    for (const w of this.#decode.members.values())
      if (w.role === 'decode' && w.servesAggregated !== true) (out ??= new Set()).add(w.id);
    return out;
  }

  /**
   * The model's disaggregation policy for a request of `promptTokens`, while the pool is active. When no decode-pool
   * worker can serve alone, the request is disaggregated whatever the policy says. Counted per decision and reason
   * (`kvgate_router_disagg_decisions_total`); `header` is the `x-kvgate-disagg` response header.
   */
  decide(promptTokens: number): DisaggDecision & { readonly header: string } {
    let d = decideDisagg(this.#policy, promptTokens, () => this.#prefillLoad());
    if (!d.disaggregate && !this.fallbackPossible()) d = { disaggregate: true, reason: 'always' };
    const decision = d.disaggregate ? 'disaggregated' : 'aggregated';
    this.#ctx.metrics?.disaggDecisions.labels({ model: this.model, decision, reason: d.reason }).inc();
    const header = `${decision}; reason=${d.reason}`;
    setActiveSpanAttribute('kvgate.disagg', header);
    return { ...d, header };
  }

  /** Queued prefill tokens of the least-loaded prefill rank (the prefill pool's load estimate; KV mode). */
  #prefillLoad(): number {
    const loads = this.#pool?.kvRouter?.loads() ?? [];
    return loads.length === 0 ? 0 : Math.min(...loads.map((l) => l.activePrefillTokens));
  }

  /** Session expiry and the prefill scheduler's periodic work (its outcome: undefined without a KV-routed pool). */
  tick(): ReturnType<KvRouter['tick']> | undefined {
    this.sessions.sweep();
    return this.#pool?.kvRouter?.tick();
  }

  /**
   * Runs a request disaggregated. `leg` is the request as the host would
   * route it aggregated (its phase is ignored). Resolves when the decode
   * answer has started.
   *
   * A request whose prefill worker could not be reached (a connect failure:
   * nothing was sent to any engine) runs again from the start on another
   * prefill worker, like the push router's retry before any byte; not when the
   * request pins its prefill worker, nor when it brings its own tracker (whose
   * write-once attribution already names the unreachable worker).
   *
   * A streamed answer whose decode engine fails migratably after output reached the client goes on from the
   * tokens generated so far (migration.ts, the decode pool's `migration_limit`): a new disaggregated request for
   * the prompt's ids and those tokens, the failed decode workers excluded. It needs the decode engines' token ids.
   * @throws KvgateError KVG_ERR_PREFILL_NOT_ACTIVATED (no prefill worker), KVG_ERR_MISSING_WORKER_ID (direct mode
   *   without a prefill worker id), KVG_ERR_BACKPRESSURE / KVG_ERR_OVERLOADED (503), KVG_ERR_PREFILL_FAILED,
   *   KVG_ERR_NO_DISAGGREGATED_PARAMS, KVG_ERR_CLIENT_ABORTED, and the decode leg's errors.
   */
  async route(leg: LegRequest, session?: SessionHint): Promise<DisaggOutcome> {
    this.#check(leg);
    const policy = this.#decode.migration;
    // Only streamed answers migrate here: a continuation's chunks are spliced into the client's stream.
    const migrates = policy.limit > 0 && leg.stream && midStreamBlocker(leg.body) === undefined;
    const exclude = new Set<number>();
    const out = await this.#run(leg, session, migrates, exclude);
    if (!migrates || out.body.kind !== 'sse' || out.status >= 400) return out;
    const hooks = migrationHooks({
      ctx: this.#ctx,
      model: this.model,
      role: this.#decode.role,
      requestId: leg.requestId,
      policy,
      exclude,
      pinned: leg.routing.decodeWorkerId !== undefined,
      // The continuation is a new disaggregated request (prefill of the prompt and the tokens so far, then decode
      // elsewhere): a decode engine takes its KV only through a handoff. Its own tracker: this one's phases are over.
      redispatch: async (next) => {
        const res = await this.#run({ ...next, tracker: undefined }, session, true, exclude);
        if (res.body.kind === 'sse' && res.status < 400)
          return { events: engineEvents(res.body.events), workerId: res.worker.workerId };
        throw new KvgateError('KVG_ERR_ENGINE_FAILED', `the continuation was refused (${res.status})`, {
          upstreamStatus: res.status,
        });
      },
    });
    return {
      ...out,
      body: { kind: 'sse', events: migratingEvents(leg, engineEvents(out.body.events), out.worker.workerId, hooks) },
    };
  }

  /** One disaggregated run of `leg`, re-run on another prefill worker when its prefill worker could not be reached. */
  #run(
    leg: LegRequest,
    session: SessionHint | undefined,
    tokenIds: boolean,
    decodeExclude: ReadonlySet<number>,
  ): Promise<DisaggOutcome> {
    const policy = { model: this.model, maxRetries: this.#maxRetries, signal: leg.signal, metrics: this.#ctx.metrics };
    return retryBeforeFirstByte(policy, async ({ exclude, retryElsewhere }) => {
      const deps = {
        model: this.model,
        pool: this.#pool!,
        decode: this.#decode,
        sessions: this.sessions,
        decodeExclude,
        tokenIds,
        resolve: (l: LegRequest, s: SessionHint | undefined, m: 'book' | 'query') => this.#resolve(l, s, m, exclude),
      };
      const request = new DisaggRequest(deps, this.#ctx, leg, session);
      try {
        return await request.run();
      } catch (err) {
        const unreachable = request.unreachableWorker;
        // Not when the request pins its prefill worker, nor when it brings its own tracker (already attributed).
        if (unreachable !== undefined && leg.routing.prefillWorkerId === undefined && leg.tracker === undefined)
          retryElsewhere(unreachable, 'prefill_unreachable');
        throw err;
      }
    });
  }

  /** Query-only: the prefill and decode workers this request would get; books nothing. */
  async query(leg: LegRequest, session?: SessionHint): Promise<DisaggQuery> {
    this.#check(leg);
    const prefill = await this.#resolve({ ...leg, phase: 'prefill' }, session, 'query');
    const decode = await this.#decode.select(
      {
        ...leg,
        phase: 'decode',
        routing: {
          ...leg.routing,
          prefillWorkerId: prefill.slot.workerId,
          prefillDpRank: prefill.slot.dpRank,
          routerConfigOverride: decodeOverrideOf(leg.routing.routerConfigOverride),
        },
      },
      'query',
    );
    return { prefill, decode };
  }

  #check(leg: LegRequest): void {
    if (this.#state !== 'active' || this.#pool === undefined) {
      throw new KvgateError('KVG_ERR_PREFILL_NOT_ACTIVATED', `no prefill worker is available for model ${this.model}`, {
        model: this.model,
      });
    }
    if (this.mode === 'direct') {
      directPin('prefill', leg.routing);
      // Checked before any prefill runs, so a request that cannot be decoded costs no prefill.
      directPin('decode', leg.routing);
    }
  }

  /**
   * Sticky session worker, else the pinned prefill worker, else the router's best (booked unless `query`),
   * never one of `exclude` (workers this request could not reach). Scored without the client's
   * router-config override (as Dynamo queries its prefill router).
   */
  async #resolve(
    client: LegRequest,
    session: SessionHint | undefined,
    mode: 'book' | 'query',
    exclude?: ReadonlySet<number>,
  ): Promise<Selection> {
    const pool = this.#pool!;
    // The prefill worker is chosen with the pool's own knobs: a client's router-config override is for its decode.
    const routing = { ...client.routing, routerConfigOverride: undefined };
    const leg = { ...client, routing };
    const eligible = (id: number): boolean => pool.eligible(id, routing) && exclude?.has(id) !== true;
    // A query changes no router state: it passes over a binding this request excludes instead of dropping it.
    let sticky: WorkerRank | undefined;
    if (routing.prefillWorkerId === undefined && session !== undefined) {
      if (mode === 'book') sticky = this.sessions.stickySlot(session, eligible);
      else {
        const bound = this.sessions.lookup(session.id);
        if (bound !== undefined && eligible(bound.workerId)) sticky = bound;
      }
    }
    if (sticky !== undefined) {
      try {
        const sel = await pool.select(
          { ...leg, routing: { ...routing, prefillWorkerId: sticky.workerId, prefillDpRank: sticky.dpRank } },
          mode,
        );
        if (mode === 'book') this.sessions.touch(session!.id);
        return sel;
      } catch (err) {
        if (isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED') || isKvgateError(err, 'KVG_ERR_BACKPRESSURE')) throw err;
        // The scheduler refuses the sticky worker (overloaded, rank gone): fall back to the best match (a booked
        // request moves the session; a query leaves it).
        if (mode === 'book') this.sessions.refused(session, err);
        this.#ctx.logger.warn(
          {
            requestId: leg.requestId,
            session: session!.id,
            workerId: sticky.workerId,
            err: String(err),
          },
          'sticky prefill worker refused; choosing another',
        );
      }
    }
    return pool.select(leg, mode, exclude);
  }
}

/** The decode stream's events as parsed engine events (kvgate's patched ones carry only their data). */
async function* engineEvents(events: AsyncIterable<DisaggSseEvent>): AsyncGenerator<EngineEvent> {
  for await (const ev of events) {
    if ('json' in ev && 'done' in ev) {
      yield ev as EngineEvent;
      continue;
    }
    const done = ev.data === '[DONE]';
    let json: unknown;
    try {
      json = done ? undefined : JSON.parse(ev.data);
    } catch {
      json = undefined;
    }
    yield {
      raw: Buffer.from(ev.raw ?? `data: ${ev.data}\n\n`),
      data: ev.data,
      event: undefined,
      id: undefined,
      json,
      done,
    };
  }
}
