/**
 * Offline replay: a discrete-event simulation in virtual time. N mocker
 * engine cores (`EngineCore` inside `VirtualEngine`, nothing sleeps) serve a
 * trace while a real router (the policy under test) decides where each
 * request goes; the engines' KV events reach the router's prefix index at the
 * virtual time their step completes, as they would over ZMQ. No sockets, no
 * wall clock: the same seed gives the same numbers.
 *
 * Event loop: the next virtual time t is the earliest of the next trace
 * arrival and every engine's next event (a step completing, a step starting,
 * a KV transfer finishing). Each engine is run up to t (delivering tokens,
 * finishes and KV events at t), then the arrivals at t are routed and
 * submitted. A follow-up submitted during t (a decode leg after its prefill)
 * is picked up by the next iteration at the same t.
 *
 * Disaggregated topologies (P prefill + D decode engines) run each request
 * as a prefill and a decode leg, under SGLang's bootstrap or vLLM's
 * kv_transfer_params protocol: `offline-disagg.ts` says how.
 *
 * `OfflineReplay` owns one run: its pools and engines are built in the
 * constructor, `run()` drives the event loop, and each arrival goes through
 * the aggregated path (here) or the disaggregated one (`DisaggArrivals`),
 * both made of the shared steps of `OfflineLegs`. Request state lives in
 * closures over one `RequestOutcome` (aggregated) or one `DisaggFlow` (P/D).
 */
import { ManualClock } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { CoreRequest, FilledMockerOptions } from '../mocker/index.js';
import { pinsSessions } from '../routing/index.js';
import { ArrivalSchedule } from './arrivals.js';
import type { DisaggPolicy } from '../core/index.js';
import { ConditionalDisagg, PrefillLoadRouter } from './conditional-disagg.js';
import { DisaggArrivals, type DisaggProtocol } from './offline-disagg.js';
import { OfflineLegs, type Arrival } from './offline-legs.js';
import { buildPools, generationSeed, type Engine, type PoolState } from './offline-pools.js';
import { routerModeOf, type PolicySpec } from './policy.js';
import { PoolPins } from './session-pins.js';
import { newOutcome, type PolicyRun, type PoolRun, type RequestOutcome } from './results.js';
import {
  FrontDoor,
  replicaSuffix,
  ReplicaSet,
  SINGLE_ROUTER,
  validateReplicaOptions,
  type ReplicaOptions,
} from './router-replicas.js';
import { HitTimeline } from './timeline.js';
import { DEFAULT_VOCAB_SIZE, TokenSynthesizer } from './token-synth.js';
import { sessionStarts, type ReplayRequest, type Workload } from './workload.js';

export type Topology =
  | { readonly kind: 'aggregated'; readonly workers: number }
  | {
      readonly kind: 'disaggregated';
      readonly prefillWorkers: number;
      readonly decodeWorkers: number;
      readonly protocol: DisaggProtocol;
      /** Per request, disaggregated or served whole on a decode engine (`conditional-disagg.ts`); default always. */
      readonly disaggPolicy?: DisaggPolicy;
    };

export interface OfflineReplayOptions {
  readonly workload: Workload;
  readonly policy: PolicySpec;
  readonly topology: Topology;
  /** Engine model (all mocker options); `engineHashSeed` should be fixed for byte-identical runs. */
  readonly engine: FilledMockerOptions;
  /** Seeds the synthesised tokens, generated tokens and the routers' RNGs. */
  readonly seed: number;
  /** Token ids of synthesised prompts are in [0, vocabSize). */
  readonly vocabSize?: number;
  /** Width of the over-time buckets (charts, load ratio over time); default spanMs / 200, at least 100 ms. */
  readonly bucketMs?: number;
  /** Router replicas behind a front door, with or without booking sync (default: one router). */
  readonly replicas?: ReplicaOptions;
  /**
   * Session-start priority (the gateway's `session_priority`): each request's legs carry its root session's start as
   * the engine `priority`, for engines in priority scheduling (`engine.schedulingPolicy`). Default off. The sessions'
   * clients name them, so a policy without a cost model also pins them, as the gateway does.
   */
  readonly sessionPriority?: boolean;
  /**
   * Clients name their sessions (`ReplayRequest.session`, as `x-session-id` and `x-parent-session-id`) and the gateway
   * pins them (`session_affinity: pin`): in each pool, a session's requests go to the worker that served it there, an
   * unbound subagent's to its parent's, whatever the load.
   */
  readonly sessionPins?: boolean;
  /** Called as requests complete (or fail). */
  readonly onProgress?: (done: number, total: number) => void;
}

/** Virtual ms between router housekeeping calls (expiry, queue drain). */
const ROUTER_TICK_MS = 1000;

export function defaultBucketMs(workload: Workload): number {
  return Math.max(100, Math.ceil(workload.spanMs / 200));
}

/**
 * One policy over one workload and topology, in virtual time. Build it, then
 * `run()` once.
 */
class OfflineReplay {
  readonly #opts: OfflineReplayOptions;
  readonly #clock = new ManualClock(0);
  readonly #bucketMs: number;
  readonly #synth: TokenSynthesizer;
  readonly #hits: HitTimeline;
  readonly #pools: readonly PoolState[];
  /** By worker id. */
  readonly #engines: readonly Engine[];
  readonly #outcomes: RequestOutcome[];
  readonly #replicas: ReplicaOptions;
  readonly #front: FrontDoor;
  readonly #legs: OfflineLegs;
  /** With session pins: each pool's sticky sessions (by pool, as `#pools`), on the virtual clock. */
  readonly #pins: readonly PoolPins[] | undefined;
  readonly #schedule: ArrivalSchedule;
  /** The P/D path; null for an aggregated topology. */
  readonly #disagg: DisaggArrivals | null;
  /** The P/D topology's per-request policy; null: every request disaggregated. */
  readonly #conditional: ConditionalDisagg | null = null;
  /** Wall-clock start (performance.now()), setup included. */
  readonly #wallStart = performance.now();

  /** @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an invalid topology. */
  constructor(opts: OfflineReplayOptions) {
    const { workload, topology, seed } = opts;
    const counts =
      topology.kind === 'aggregated' ? [topology.workers] : [topology.prefillWorkers, topology.decodeWorkers];
    for (const c of counts) {
      if (!Number.isSafeInteger(c) || c < 1)
        throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `every engine pool needs at least 1 worker, got ${c}`);
    }
    if (topology.kind === 'aggregated' && opts.policy.disaggOrder !== undefined) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `policy ${opts.policy.name}: a P/D order needs a disaggregated topology (--prefill-workers, --decode-workers)`,
      );
    }
    // Clients that name their sessions (to be pinned, or for their priority) are pinned as the gateway would: with
    // `session_affinity: pin`, or by the policy's mode's default affinity.
    const named = opts.sessionPins === true || opts.sessionPriority === true;
    const pinned = named && pinsSessions(opts.sessionPins === true ? 'pin' : undefined, routerModeOf(opts.policy));
    this.#replicas = opts.replicas ?? SINGLE_ROUTER;
    validateReplicaOptions(this.#replicas);
    this.#front = new FrontDoor(this.#replicas, seed);
    this.#opts = opts;
    this.#bucketMs = opts.bucketMs ?? defaultBucketMs(workload);
    this.#synth = new TokenSynthesizer({
      traceBlockSize: workload.traceBlockSize,
      seed,
      vocabSize: opts.vocabSize ?? DEFAULT_VOCAB_SIZE,
    });
    this.#hits = new HitTimeline(this.#bucketMs);
    const built = buildPools(opts, this.#clock, this.#bucketMs);
    this.#pools = built.pools;
    if (topology.kind === 'disaggregated' && topology.disaggPolicy !== undefined) {
      const prefill = built.pools[0]!;
      const load = new PrefillLoadRouter(prefill.router);
      this.#pools = [{ ...prefill, router: load }, ...built.pools.slice(1)];
      this.#conditional = new ConditionalDisagg(topology.disaggPolicy, load, prefill.workerIds);
    }
    this.#engines = built.engines;
    this.#pins = pinned ? this.#pools.map((p) => new PoolPins(this.#clock, p.workerIds)) : undefined;
    this.#schedule = new ArrivalSchedule(workload.requests);
    this.#outcomes = workload.requests.map((r) => newOutcome(r.index, r.arrivalMs, r.inputLength, r.outputLength));
    this.#legs = new OfflineLegs({
      clock: this.#clock,
      maxModelLen: opts.engine.maxModelLen,
      hits: this.#hits,
      outcomes: this.#outcomes,
      onProgress: opts.onProgress,
      onEnded: (index, at) => this.#schedule.ended(index, at),
      priorities: opts.sessionPriority === true ? sessionStarts(workload.requests) : undefined,
    });
    this.#disagg =
      topology.kind === 'aggregated'
        ? null
        : new DisaggArrivals({
            legs: this.#legs,
            clock: this.#clock,
            pools: this.#pools as [PoolState, PoolState],
            engines: this.#engines,
            protocol: topology.protocol,
            order: opts.policy.disaggOrder,
            seed,
            kvLeaseMs: opts.engine.kvLeaseMs,
            pins: this.#pins === undefined ? undefined : [this.#pins[0]!, this.#pins[1]!],
          });
  }

  /**
   * Runs the workload and returns everything measured. Asynchronous only so a
   * router's queue (whose admissions resolve promises) can make progress
   * between events; no wall-clock waiting happens.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT when requests are still queued once every engine is idle.
   */
  async run(): Promise<PolicyRun> {
    const endMs = await this.#loop();
    return this.#result(endMs);
  }

  /** The event loop (see the module comment). Returns the virtual time of the last event. */
  async #loop(): Promise<number> {
    const clock = this.#clock;
    const schedule = this.#schedule;
    const ves = this.#engines.map((e) => e.ve);
    let endMs = 0;
    let nextTickMs = ROUTER_TICK_MS;
    for (;;) {
      let t = schedule.nextTime();
      for (const ve of ves) {
        const et = ve.nextEventTime();
        if (et !== undefined && et < t) t = et;
      }
      for (const p of this.#pools) t = Math.min(t, p.router.nextEventTime?.() ?? Infinity);
      if (t === Infinity) break;
      if (t > clock.now()) clock.set(t);
      endMs = t;
      for (const ve of ves) ve.runUntil(t);
      for (const p of this.#pools) p.router.runUntil?.(t);
      for (let due = schedule.popDue(t); due !== undefined; due = schedule.popDue(t)) this.#arrive(due.r, due.at);
      if (t >= nextTickMs) {
        for (const p of this.#pools) p.router.tick();
        nextTickMs = t + ROUTER_TICK_MS;
      }
      // Queued requests admitted by a free or a tick settle their promises now, before time moves on.
      if (this.#legs.pendingRoutes > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    if (this.#legs.pendingRoutes > 0) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `${this.#legs.pendingRoutes} request(s) were still queued in the router when every engine went idle`,
      );
    }
    return endMs;
  }

  #result(endMs: number): PolicyRun {
    const { policy, topology } = this.#opts;
    let preemptions = 0;
    let extrapolated = 0;
    let busyMs = 0;
    for (const e of this.#engines) {
      const s = e.ve.core.stats();
      preemptions += s.preemptions;
      extrapolated += s.extrapolatedSteps;
      busyMs += s.busyMs;
    }
    const bucketMs = this.#bucketMs;
    const poolRuns: PoolRun[] = this.#pools.map((p) => {
      const load = p.timeline.finish(endMs);
      const index = p.router.indexUse?.();
      return { name: p.name, workerIds: p.workerIds, load, buckets: p.timeline.buckets(), bucketMs, index };
    });
    const hits = this.#hits;
    const rep = this.#replicas;
    const name = `${policy.name}${replicaSuffix(rep, policy.kind === 'kv')}`;
    const syncDeliveries = this.#pools.reduce(
      (n, p) => n + (p.router instanceof ReplicaSet ? p.router.delivered : 0),
      0,
    );
    return {
      name: topology.kind === 'aggregated' ? name : `${name}@${topology.protocol}`,
      replicas: {
        count: rep.count,
        sync: rep.count > 1 && rep.sync && policy.kind === 'kv',
        syncDelayMs: rep.syncDelayMs,
        front: rep.front,
        syncDeliveries,
      },
      outcomes: this.#outcomes,
      endMs,
      pools: poolRuns,
      wallMs: performance.now() - this.#wallStart,
      hits: { promptTokens: hits.promptTokens, cachedTokens: hits.cachedTokens, overTime: hits.windowed() },
      preemptions,
      extrapolatedSteps: extrapolated,
      leaseExpired: this.#disagg === null ? null : this.#disagg.leaseExpired,
      engineBusyFraction: endMs > 0 ? busyMs / (this.#engines.length * endMs) : 0,
    };
  }

  // ------------------------------------------------------------ arrivals

  /** What both paths do first: fail a request no engine can serve, synthesise its prompt, pick its router replica. */
  #arrive(r: ReplayRequest, at: number): void {
    const o = this.#outcomes[r.index]!;
    o.arrivalMs = at;
    const long = this.#legs.tooLong(r);
    if (long !== null) return this.#legs.fail(o, long);
    const key = String(r.index);
    const tokens = this.#synth.tokens(r.hashIds, r.inputLength);
    const arrival: Arrival = { r, o, key, tokens, replica: this.#front.pick() };
    if (this.#disagg === null) this.#arriveAggregated(arrival, 0);
    else if (this.#conditional?.decide(tokens.length).disaggregate === false) this.#arriveAggregated(arrival, 1);
    else this.#disagg.arrive(arrival);
  }

  /** A request served whole on one engine of pool `p` (0: the aggregated pool; 1: a P/D fleet's decode pool). */
  #arriveAggregated({ r, o, key, tokens, replica }: Arrival, p: 0 | 1): void {
    const legs = this.#legs;
    const pool = this.#pools[p]!;
    const pins = this.#pins?.[p];
    const route = { key, tokens, expectedOutputTokens: r.outputLength, replica };
    legs.routeThen(
      pool.router,
      route,
      pins?.candidates(r.session) ?? pool.workerIds,
      (choice, t) => {
        pins?.served(r.session, choice.workerId);
        o.workerId = choice.workerId;
        o.predictedCachedTokens = choice.predictedCachedTokens;
        const req: CoreRequest = {
          id: key,
          promptTokens: tokens,
          maxTokens: r.outputLength,
          seed: generationSeed(this.#opts.seed, r.index),
        };
        legs.submit(this.#engines[choice.workerId]!, r, req, t, {
          onAdmitted: (cached, at) => legs.admitted(o, r, cached, at),
          onToken: (_id, index, at) => {
            o.outputTokens = index + 1;
            if (index === 0) {
              o.firstTokenMs = at;
              pool.router.prefillCompleted(key);
            }
            pool.router.outputTokens(key, index + 1);
          },
          onFinish: (_info, at) => {
            o.finishMs = at;
            pool.router.finished(key);
            legs.finish(o);
          },
          onError: (err) => {
            pool.router.finished(key);
            legs.fail(o, err);
          },
        });
      },
      (err) => legs.fail(o, err),
    );
  }
}

/**
 * Runs one policy over the workload in virtual time (`new OfflineReplay(opts).run()`).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an invalid topology.
 */
export function runOffline(opts: OfflineReplayOptions): Promise<PolicyRun> {
  try {
    return new OfflineReplay(opts).run();
  } catch (err) {
    return Promise.reject(err);
  }
}
