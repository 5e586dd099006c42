/**
 * ModelRouter: everything that routes one model, behind the frontend's
 * `ModelRouterPort`. It owns the decode (or aggregated) PushRouter, the
 * model's KV-event subscriptions feeding the KvRouter's prefix index, the
 * periodic tick (expiry, queue drain, liveness), and follows the worker
 * registry as workers come and go. Disaggregated serving plugs in through the
 * PrefillRouter (see prefill-router.ts): prefill workers form their own pool,
 * with their own KvRouter and KV-event subscriptions, built when the first
 * one appears; while it is active, requests run prefill there and decode on
 * the decode pool, otherwise they are served aggregated on the decode pool
 * (or refused under `enforceDisagg`).
 *
 * State ownership: the registry says who exists; the KvRouter's bookkeeping is
 * the authoritative load; the prefix index is advisory and fed by events.
 */
import { seededRng, type KvSlotSnapshot, type RouterMode, type SessionAffinity } from '../common/index.js';
import type { DisaggPolicy, KvRouterOptions } from '../core/index.js';
import type { WorkerHealthView, WorkerInfo, WorkerRegistry } from '../discovery/index.js';
import type { EngineClient } from '../engines/index.js';
import type { KvEventManager, KvEventOptions } from '../events/index.js';
import { KvgateError } from '../errors/index.js';
import { makeRouterContext, type RouterContext } from './context.js';
import { prefillPoolConfig } from './disagg/handoff.js';
import { agentDisaggRefusal, isAgentEndpoint } from './agent-endpoints.js';
import { embeddingsDisaggRefusal } from './embeddings.js';
import { PrefillRouter } from './disagg/prefill-router.js';
import { reportExpiredBookings, reportIndexBytes, subscribeWorker, type KvPoolOptions } from './kv-pool.js';
import { LegBuilder, type LegBuilderOptions } from './leg-builder.js';
import { attachReplica, buildPool, type Pool, type ReplicaPool } from './model-pools.js';
import type { DispatchOutcomeListener } from './push/leg-failures.js';
import type { PushRouter, PushRouterOptions } from './push/push-router.js';
import { followRegistry } from './registry-follower.js';
import type { ModelRouterPort, PreparedRequest, QueryResult, RoutedResponse, WorkerStatus } from './router-port.js';
import { StickySessions, pinsSessions, poolSessions, type SessionLimits } from './sticky-sessions.js';
import { WorkerWatch } from './worker-watch.js';

export interface ModelRouterOptions extends Pick<KvPoolOptions, 'eagle'>, Pick<LegBuilderOptions, 'sessionPriority'> {
  readonly model: string;
  /** The name engines serve the model as: the `model` sent to them (default `model`). */
  readonly servedModelName?: string | undefined;
  readonly mode: RouterMode;
  readonly blockSize: number;
  /** KvRouter knobs (KV mode), validated by the core. */
  readonly routerConfig?: KvRouterOptions | undefined;
  readonly registry: WorkerRegistry;
  readonly engine: EngineClient;
  /** Re-dispatches after a connect failure before any byte was sent (default 2). */
  readonly maxRetries?: number | undefined;
  /** Milliseconds between ticks (expiry, queue drain, liveness gauges); default 1000. 0 disables the timer. */
  readonly tickIntervalMs?: number | undefined;
  /** Silence while serving after which a worker's KV events count as stale (default 30000). */
  readonly kvEventsStaleAfterMs?: number | undefined;
  /** KV-event ingestion bounds (queue, per-turn budget, reorder window, consistency bound); src/events defaults otherwise. */
  readonly kvEvents?: KvEventOptions | undefined;
  /** The health prober's view of a worker (for /admin/models, the state gauge and down lines). */
  readonly workerHealth?: ((workerId: number) => WorkerHealthView | undefined) | undefined;
  /** Told when a dispatch found a worker unreachable (health probing). */
  readonly onWorkerUnreachable?: ((workerId: number) => void) | undefined;
  /** Told how each dispatch ended: why it failed (5xx, connection failure), or undefined (outlier detection). */
  readonly onDispatchOutcome?: DispatchOutcomeListener | undefined;
  /** Refuse requests (and hide the model) instead of serving them aggregated while no prefill worker is available. */
  readonly enforceDisagg?: boolean | undefined;
  /** Per request, disaggregated or aggregated while prefill workers are available (default: always disaggregated). */
  readonly disaggPolicy?: DisaggPolicy | undefined;
  /** Sliding TTL of a sticky prefill worker for a session without its own timeout (default 300 000 ms). */
  readonly prefillSessionTtlMs?: number | undefined;
  /** Sliding TTL of a sticky aggregated/decode session without its own `timeout` (default 300 s). */
  readonly sessionTtlMs?: number | undefined;
  /** Per engine leg: first-output and stream-idle deadlines (ms; 0 or undefined: none). See `PushRouterOptions.legTimeouts`. */
  readonly legTimeouts?: PushRouterOptions['legTimeouts'];
  /** Request migration of aggregated streams (`migration_limit`, `migration_max_seq_len`); default off. */
  readonly migration?: PushRouterOptions['migration'];
  /** Bounds of each pool's sticky sessions: the longest TTL (requested timeouts are clamped) and the number kept (LRU). */
  readonly sessionLimits?: SessionLimits | undefined;
  /** Whether a request's session pins it, in both pools (default: `cost` in KV mode, else `pin`); see `SessionAffinity`. */
  readonly sessionAffinity?: SessionAffinity | undefined;
  /** Replica sync: told of each KV pool (its KvRouter and its sticky sessions) once it is built. */
  readonly attachReplica?: ((pool: ReplicaPool) => void) | undefined;
  /** A peer replica's prefix index by pool (warm start): each pool's KV-event subscriptions start from it. */
  readonly kvSeeds?: ((role: 'decode' | 'prefill') => readonly KvSlotSnapshot[] | undefined) | undefined;
}

/** Why a model without enforce_disagg still cannot be served aggregated. */
const NO_FALLBACK =
  'no prefill worker is available and its decode workers are decode-only (none has serves_aggregated)';

export class ModelRouter implements ModelRouterPort {
  readonly model: string;
  readonly blockSize: number;
  readonly readsTokenIds = false; // routing reads a prompt's length and hashes; engines tokenize their own body
  readonly mode: RouterMode;
  /** The decode (aggregated) pool. */
  readonly decode: PushRouter;
  /** KV-event ingestion for the decode pool (KV mode with events). */
  readonly events: KvEventManager | undefined;
  /** Disaggregated serving: the prefill pool and its lifecycle. */
  readonly prefill: PrefillRouter;
  /** Sticky sessions of aggregated requests: session id -> decode worker (x-session-id / nvext.session_control). */
  readonly sessions: StickySessions;
  /** `session_affinity`: `pin` hands both pools the session (their sticky workers pin it); `cost` hands them none. */
  readonly #pinSessions: boolean;
  readonly #pinned = (req: PreparedRequest) => (this.#pinSessions ? req.hints.session : undefined);
  #opts: ModelRouterOptions;
  readonly #ctx: RouterContext;
  #prefillPool: Pool | undefined;
  readonly #registry: WorkerRegistry;
  readonly #unfollow: () => void;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  /** The request as its leg, its pins checked first. */
  readonly #legs: LegBuilder;
  /** Worker state changes: logs, gauges, the /admin/models view. */
  readonly #watch: WorkerWatch;

  /**
   * `ctx` is handed to every router and KV-event manager built here (default: process clock, time-seeded rng, no logs or metrics).
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for invalid router knobs (the field is named).
   */
  constructor(opts: ModelRouterOptions, ctx: RouterContext = makeRouterContext({ rng: seededRng(Date.now() >>> 0) })) {
    this.model = opts.model;
    this.blockSize = opts.blockSize;
    this.mode = opts.mode;
    this.#registry = opts.registry;
    this.#ctx = ctx;
    this.#opts = opts;
    this.#legs = new LegBuilder(opts, ctx);
    // The model's own series exist from the start, at zero (the pools register theirs).
    ctx.metrics?.disaggFallbacks.inc({ model: opts.model }, 0);
    ctx.metrics?.kvTransferEstimated.zero({ model: opts.model });
    this.#watch = new WorkerWatch(opts.model, opts.registry, ctx, opts.workerHealth, () => this.unavailable());
    const decode = buildPool('decode', this.#opts, ctx, this.#watch);
    this.sessions = poolSessions(ctx, opts.model, decode.push.role, opts.sessionTtlMs, opts.sessionLimits);
    this.#pinSessions = pinsSessions(opts.sessionAffinity, opts.mode);
    this.decode = decode.push;
    this.events = decode.events;
    attachReplica('decode', decode, this.sessions, this.#opts.attachReplica);
    this.prefill = new PrefillRouter(
      {
        model: opts.model,
        mode: opts.mode,
        enforceDisagg: opts.enforceDisagg,
        policy: opts.disaggPolicy,
        decode: this.decode,
        createPool: () => {
          const pool = (this.#prefillPool = buildPool('prefill', this.#opts, this.#ctx, this.#watch));
          attachReplica('prefill', pool, this.prefill.sessions, this.#opts.attachReplica);
          return pool.push;
        },
        sessionTtlMs: opts.prefillSessionTtlMs,
        sessionLimits: opts.sessionLimits,
        maxRetries: opts.maxRetries,
      },
      ctx,
    );
    this.#unfollow = followRegistry(opts.registry, opts.model, {
      // A prefill worker the pool refused (its bootstrap endpoint: logged there) is not routed to: not up.
      added: (w) => this.#watch[this.#workerAdded(w) ? 'up' : 'notRouted'](w),
      removed: (w, keepKv, why) => {
        this.#workerRemoved(w, why === 'unavailable');
        this.#watch.down(w, why === 'unavailable', keepKv);
      },
      forgotten: (w) => this.#workerRemoved(w, false),
      // New engine facts of a routable worker (capacity, KV trust): its pool re-registers it in place
      // (bookings, index entries and subscriptions stay).
      updated: (w) => {
        const pool = w.role === 'prefill' ? this.prefill.pool : this.decode;
        if (pool?.worker(w.id) !== undefined) pool.addWorker(w);
      },
      // Its subscription keeps the index slot current (gaps replay; an engine restart clears it, as for any worker).
      keepsKv: (w) =>
        w.kvEvents !== undefined && (w.role === 'prefill' ? this.prefillEvents : this.events) !== undefined,
    });
    for (const w of opts.registry.available(this.model)) this.#workerAdded(w);
    this.#watch.servable(); // where the model starts: its gauge set, no line
    const interval = opts.tickIntervalMs ?? 1000;
    if (interval > 0) {
      this.#timer = setInterval(() => this.tick(), interval);
      this.#timer.unref();
    }
  }

  /** The prefill pool's KV-event ingestion (after activation, KV mode with events). */
  get prefillEvents(): KvEventManager | undefined {
    return this.#prefillPool?.events;
  }

  /** Adds the worker to its pool; false when the pool refused it. */
  #workerAdded(w: WorkerInfo): boolean {
    let events: KvEventManager | undefined;
    if (w.role === 'prefill') {
      if (!this.prefill.addWorker(w)) return false;
      events = this.#prefillPool?.events;
    } else {
      this.decode.addWorker(w);
      this.sessions.releaseWorker(w.id);
      events = this.events;
    }
    if (events !== undefined) subscribeWorker(events, w, this.#ctx);
    return true;
  }

  /**
   * Takes the worker out of routing. `hold` (marked down, every mode, KV events or not) keeps for its return its bookings
   * (load, not KV state), session pins and, in KV mode, index slot: fed by its KV events, or the router's approximate
   * entries (KvScheduler.removeWorker says why). Without `hold` (it left) all go; a held one's subscription stays open.
   */
  #workerRemoved(w: WorkerInfo, hold: boolean): void {
    if (w.role === 'prefill') {
      // The pool going inactive is logged and counted there, with what becomes of the requests.
      this.prefill.removeWorker(w.id, hold);
      if (!hold) void this.#prefillPool?.events?.remove(w.id);
      return;
    }
    if (hold) this.sessions.holdWorker(w.id);
    else this.sessions.unbindWorker(w.id);
    this.decode.removeWorker(w.id, hold);
    if (!hold) void this.events?.remove(w.id);
  }

  /**
   * New router knobs (a configuration reload) for the requests routed from now on, in both pools;
   * in-flight requests, bookkeeping and indexes stay. A prefill pool built later takes them too.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG (invalid knob, or a structural one changed), before anything changed.
   */
  reconfigure(routerConfig: KvRouterOptions): void {
    const prefillKv = this.#prefillPool?.push.kvRouter;
    const decodeKv = this.decode.kvRouter;
    if (decodeKv === undefined) return;
    const before = decodeKv.config;
    decodeKv.reconfigure(routerConfig);
    try {
      prefillKv?.reconfigure(prefillPoolConfig(routerConfig));
    } catch (err) {
      decodeKv.reconfigure(before);
      throw err;
    }
    this.#opts = { ...this.#opts, routerConfig };
  }

  /** Periodic work: bookkeeping expiry, approximate TTLs, queue drain, liveness gauges. */
  tick(): void {
    if (this.#closed) return;
    reportExpiredBookings(this.#ctx, this.model, this.decode.role, this.decode.kvRouter?.tick());
    reportExpiredBookings(this.#ctx, this.model, 'prefill', this.prefill.tick());
    this.sessions.sweep();
    this.#watch.tickHealth();
    for (const pool of [{ push: this.decode, events: this.events }, this.#prefillPool]) {
      if (pool !== undefined) this.#watch.tickEvents(pool.push.workers(), pool.events);
    }
    const m = this.#ctx.metrics;
    if (m === undefined) return;
    for (const kv of [this.decode.kvRouter, this.#prefillPool?.push.kvRouter])
      if (kv !== undefined) reportIndexBytes(this.#ctx, this.model, kv.workerType, kv);
    m.sessions.labels({ model: this.model, worker_type: this.decode.role }).set(this.sessions.size);
    if (this.prefill.pool !== undefined)
      m.sessions.labels({ model: this.model, worker_type: 'prefill' }).set(this.prefill.sessions.size);
  }

  workerStatus(): WorkerStatus[] {
    return this.#watch.status((w) => (w.role === 'prefill' ? this.#prefillPool?.events : this.events));
  }

  /**
   * Decode workers are available and, under `enforceDisagg`, so is a prefill worker (Dynamo's `can_serve_requests`);
   * without an active prefill pool, some decode worker must be able to serve alone.
   */
  canServe(): boolean {
    return this.unavailable() === undefined;
  }

  /**
   * Why the model cannot serve (undefined when it can), the error the frontend answers with: no decode
   * worker; or no prefill worker while the model may not be served aggregated, because of `enforceDisagg`
   * or because every decode worker is decode-only (none has `serves_aggregated`).
   */
  unavailable(): KvgateError | undefined {
    if (this.#closed || this.decode.size === 0) {
      return new KvgateError('KVG_ERR_MODEL_UNAVAILABLE', `model ${this.model} has no worker available right now`, {
        param: 'model',
      });
    }
    if (!this.prefill.canServeRequests()) return this.#notActivated();
    if (this.prefill.state !== 'active' && !this.prefill.fallbackPossible()) return this.#notActivated(true);
    return undefined;
  }

  /**
   * KVG_ERR_PREFILL_NOT_ACTIVATED: no prefill worker, and the model may not be served aggregated, because of
   * `enforceDisagg` or (`decodeOnly`) because no decode worker can serve alone. One code for both (docs/errors.md).
   */
  #notActivated(decodeOnly = false): KvgateError {
    const message = decodeOnly
      ? `model ${this.model}: ${NO_FALLBACK}`
      : `model ${this.model} requires disaggregated serving (enforce_disagg) and no prefill worker is available`;
    return new KvgateError('KVG_ERR_PREFILL_NOT_ACTIVATED', message, { model: this.model });
  }

  /** The LoRA adapters this model serves now: its available aggregated or decode workers' (configured, or in their /v1/models). */
  adapters(): string[] {
    return this.#registry.adapters(this.model, ['aggregated', 'decode']);
  }

  async route(req: PreparedRequest): Promise<RoutedResponse> {
    if (this.#closed) throw new KvgateError('KVG_ERR_NO_WORKERS', `model ${this.model} is shutting down`);
    this.#legs.checkPins(req.hints);
    const d = this.#disaggregated(true) ? this.prefill.decide(req.promptTokens) : undefined;
    if (d?.disaggregate === true) {
      if (isAgentEndpoint(req.endpoint)) throw agentDisaggRefusal(this.model, req.endpoint);
      if (req.endpoint === 'embeddings') throw embeddingsDisaggRefusal(this.model);
      const out = await this.prefill.route(this.#legs.leg(req), this.#pinned(req));
      return {
        worker: out.worker,
        prefillWorker: out.prefillWorker,
        status: out.status,
        body: out.body,
        disagg: d.header,
      };
    }
    const session = this.#pinned(req);
    let leg = this.#legs.leg(req);
    const sticky =
      leg.routing.backendInstanceId === undefined && leg.routing.decodeWorkerId === undefined
        ? this.sessions.stickySlot(session, (id) => this.decode.eligible(id, leg.routing))
        : undefined;
    if (sticky !== undefined)
      leg = { ...leg, routing: { ...leg.routing, backendInstanceId: sticky.workerId, dpRank: sticky.dpRank } };
    let res;
    try {
      res = await this.decode.dispatch(leg, undefined, this.prefill.decodeOnlyWorkers());
    } catch (err) {
      // A sticky worker that refused (overloaded, unreachable) no longer holds the session; a client abort changes nothing.
      if (sticky !== undefined) this.sessions.refused(session, err);
      throw err;
    }
    const worker = res.selection.slot;
    this.sessions.served(session, worker);
    return {
      worker,
      disagg: d?.header,
      status: res.status,
      body:
        res.body.kind === 'sse' ? { kind: 'sse', events: res.body.events } : { kind: 'json', bytes: res.body.bytes },
    };
  }

  async query(req: PreparedRequest): Promise<QueryResult> {
    this.#legs.checkPins(req.hints);
    if (this.#disaggregated(false) && this.prefill.decide(req.promptTokens).disaggregate) {
      const q = await this.prefill.query(this.#legs.leg(req, true), this.#pinned(req));
      return {
        worker: q.decode.slot,
        overlapBlocks: q.decode.overlapBlocks,
        prefillWorker: q.prefill.slot,
        prefillOverlapBlocks: q.prefill.overlapBlocks,
      };
    }
    const sel = await this.decode.select(this.#legs.leg(req, true), 'query', this.prefill.decodeOnlyWorkers());
    return { worker: sel.slot, overlapBlocks: sel.overlapBlocks };
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#unfollow();
    this.decode.close();
    this.#prefillPool?.push.close();
    await Promise.all([this.events?.close(), this.#prefillPool?.events?.close()]);
  }

  /**
   * True when the request runs disaggregated. With no prefill worker it is
   * served aggregated on the decode pool, unless `enforceDisagg` refuses it.
   */
  #disaggregated(countFallback: boolean): boolean {
    const state = this.prefill.state;
    if (state === 'active') return true;
    if (this.prefill.enforceDisagg) throw this.#notActivated();
    // Decode-only engines answer a request without a handoff as the client's error: fall back nowhere.
    if (!this.prefill.fallbackPossible()) throw this.#notActivated(true);
    if (state === 'inactive' && countFallback) this.#ctx.metrics?.disaggFallbacks.labels({ model: this.model }).inc();
    return false;
  }
}
