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
 * Disaggregated topologies (P prefill + D decode engines), both protocols:
 * - `bootstrap` (SGLang): at arrival the prefill and the decode worker are
 *   both chosen and booked; prefill runs with max_tokens 1; when it
 *   completes, the decode engine receives the request with its prompt KV
 *   remote and waits the transfer (uncached tokens x kv bytes per token /
 *   bandwidth) before decoding. Simplification: the decode engine reserves
 *   the request's KV blocks when prefill completes, not at arrival.
 * - `kv_transfer_params` (vLLM NIXL, sequential): prefill runs first; only
 *   when its response is back is the decode worker chosen, and it pulls the
 *   KV (same transfer delay).
 * In both, the prefill engine holds the request's blocks (lease `kvLeaseMs`)
 * until the decode engine's first token, which follows the transfer.
 * The prefill router is a KV router with active-block tracking off (Dynamo
 * activates it so); the decode router runs with overlap credit 0, no
 * assumed reuse and no prefill tracking (Dynamo's decode override). Simple
 * policies use the same mode on both pools.
 *
 * `OfflineReplay` owns one run: its pools and engines are built in the
 * constructor, `run()` drives the event loop, and each arrival goes through
 * the aggregated or the disaggregated path. Request state lives in closures
 * over one `RequestOutcome` (aggregated) or one `DisaggFlow` (P/D).
 */
import { ManualClock } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { CoreRequest, FilledMockerOptions, VirtualRequestListener } from '../mocker/index.js';
import { buildPools, generationSeed, type Engine, type PoolState } from './offline-pools.js';
import type { PolicySpec, ReplayRouter, RouteChoice, RouteRequest } from './policy.js';
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
import type { ReplayRequest, Workload } from './workload.js';

export type DisaggProtocol = 'bootstrap' | 'kv_transfer_params';
export const DISAGG_PROTOCOLS: readonly DisaggProtocol[] = ['bootstrap', 'kv_transfer_params'];

export type Topology =
  | { readonly kind: 'aggregated'; readonly workers: number }
  | {
      readonly kind: 'disaggregated';
      readonly prefillWorkers: number;
      readonly decodeWorkers: number;
      readonly protocol: DisaggProtocol;
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
  /** Called as requests complete (or fail). */
  readonly onProgress?: (done: number, total: number) => void;
}

/** Virtual ms between router housekeeping calls (expiry, queue drain). */
const ROUTER_TICK_MS = 1000;

export function defaultBucketMs(workload: Workload): number {
  return Math.max(100, Math.ceil(workload.spanMs / 200));
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** One disaggregated request between its legs: the decode leg starts once the prefill is done and the decode worker is known. */
interface DisaggFlow {
  readonly r: ReplayRequest;
  readonly o: RequestOutcome;
  readonly key: string;
  /** The prefill leg's id on its engine (the decode leg uses `key`). */
  readonly prefillId: string;
  readonly tokens: number[];
  /** The router replica both legs go through. */
  readonly replica: number;
  readonly protocol: DisaggProtocol;
  decodeChoice: RouteChoice | null;
  prefillDoneAt: number | null;
  prefillEngine: Engine | null;
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
  #done = 0;
  /** Routes waiting in a router's queue (their admission settles a promise). */
  #pendingRoutes = 0;
  /** Prefill leases that had expired when the decode leg's KV arrived. */
  #leaseExpired = 0;
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
    this.#engines = built.engines;
    this.#outcomes = workload.requests.map((r) => newOutcome(r.index, r.arrivalMs, r.inputLength, r.outputLength));
  }

  /**
   * Runs the workload and returns everything measured. Asynchronous only so a
   * router's queue (whose admissions resolve promises) can make progress
   * between events; no wall-clock waiting happens.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT when requests are still queued once every engine is idle.
   */
  async run(): Promise<PolicyRun> {
    const topology = this.#opts.topology;
    const arrive =
      topology.kind === 'aggregated'
        ? (r: ReplayRequest): void => this.#arriveAggregated(r)
        : (r: ReplayRequest): void => this.#arriveDisaggregated(r, topology.protocol);
    const endMs = await this.#loop(arrive);
    return this.#result(endMs);
  }

  /** The event loop (see the module comment). Returns the virtual time of the last event. */
  async #loop(arrive: (r: ReplayRequest) => void): Promise<number> {
    const clock = this.#clock;
    const requests = this.#opts.workload.requests;
    const ves = this.#engines.map((e) => e.ve);
    let next = 0;
    let endMs = 0;
    let nextTickMs = ROUTER_TICK_MS;
    for (;;) {
      let t = next < requests.length ? requests[next]!.arrivalMs : Infinity;
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
      while (next < requests.length && requests[next]!.arrivalMs <= t) arrive(requests[next++]!);
      if (t >= nextTickMs) {
        for (const p of this.#pools) p.router.tick();
        nextTickMs = t + ROUTER_TICK_MS;
      }
      // Queued requests admitted by a free or a tick settle their promises now, before time moves on.
      if (this.#pendingRoutes > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    }
    if (this.#pendingRoutes > 0) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `${this.#pendingRoutes} request(s) were still queued in the router when every engine went idle`,
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
      return { name: p.name, workerIds: p.workerIds, load, buckets: p.timeline.buckets(), bucketMs };
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
      leaseExpired: topology.kind === 'aggregated' ? null : this.#leaseExpired,
      engineBusyFraction: endMs > 0 ? busyMs / (this.#engines.length * endMs) : 0,
    };
  }

  // ------------------------------------------------------------ shared by both paths

  #finish(): void {
    this.#done++;
    this.#opts.onProgress?.(this.#done, this.#outcomes.length);
  }

  #fail(o: RequestOutcome, err: unknown): void {
    if (o.error === null) o.error = message(err);
    this.#finish();
  }

  /** Submits to an engine, counting the request on its load timeline until it ends. */
  #submit(e: Engine, req: CoreRequest, at: number, listener: VirtualRequestListener): void {
    e.pool.timeline.add(e.row, at, 1);
    const release = (t: number): void => e.pool.timeline.add(e.row, t, -1);
    e.ve.submit(req, at, {
      ...listener,
      onFinish: (info, t) => {
        release(t);
        listener.onFinish?.(info, t);
      },
      onError: (err, t) => {
        release(t);
        listener.onError?.(err, t);
      },
    });
  }

  #tooLong(r: ReplayRequest): string | null {
    const max = this.#opts.engine.maxModelLen;
    return r.inputLength + r.outputLength > max
      ? `prompt (${r.inputLength}) + max_tokens (${r.outputLength}) exceeds max_model_len ${max} (line ${r.line})`
      : null;
  }

  /** Runs `then` with the router's choice now, or when a queued request is admitted (at that virtual time). */
  #routeThen(
    router: ReplayRouter,
    req: RouteRequest,
    candidates: readonly number[],
    then: (c: RouteChoice, at: number) => void,
    onError: (err: unknown) => void,
  ): void {
    let result: RouteChoice | Promise<RouteChoice>;
    try {
      result = router.route(req, candidates);
    } catch (err) {
      onError(err);
      return;
    }
    if (!(result instanceof Promise)) {
      then(result, this.#clock.now());
      return;
    }
    this.#pendingRoutes++;
    result.then(
      (c) => {
        this.#pendingRoutes--;
        then(c, this.#clock.now());
      },
      (err: unknown) => {
        this.#pendingRoutes--;
        onError(err);
      },
    );
  }

  /**
   * Records a leg's admission on the engine that computes the prompt: the hit it got, counted
   * at the request's arrival (as the load generator does online and as the infinite-cache bound
   * is windowed), so hits and bound over time compare the same requests.
   */
  #admitted(o: RequestOutcome, r: ReplayRequest, cached: number, at: number): void {
    o.admittedMs = at;
    o.cachedTokens = cached;
    this.#hits.record(r.arrivalMs, r.inputLength, cached);
  }

  // ------------------------------------------------------------ aggregated

  #arriveAggregated(r: ReplayRequest): void {
    const o = this.#outcomes[r.index]!;
    const pool = this.#pools[0]!;
    const long = this.#tooLong(r);
    if (long !== null) return this.#fail(o, long);
    const key = String(r.index);
    const tokens = this.#synth.tokens(r.hashIds, r.inputLength);
    const route = { key, tokens, expectedOutputTokens: r.outputLength, replica: this.#front.pick() };
    this.#routeThen(
      pool.router,
      route,
      pool.workerIds,
      (choice, t) => {
        o.workerId = choice.workerId;
        o.predictedCachedTokens = choice.predictedCachedTokens;
        const req: CoreRequest = {
          id: key,
          promptTokens: tokens,
          maxTokens: r.outputLength,
          seed: generationSeed(this.#opts.seed, r.index),
        };
        this.#submit(this.#engines[choice.workerId]!, req, t, {
          onAdmitted: (cached, at) => this.#admitted(o, r, cached, at),
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
            this.#finish();
          },
          onError: (err) => {
            pool.router.finished(key);
            this.#fail(o, err);
          },
        });
      },
      (err) => this.#fail(o, err),
    );
  }

  // ------------------------------------------------------------ disaggregated

  #arriveDisaggregated(r: ReplayRequest, protocol: DisaggProtocol): void {
    const o = this.#outcomes[r.index]!;
    const long = this.#tooLong(r);
    if (long !== null) return this.#fail(o, long);
    const key = String(r.index);
    const flow: DisaggFlow = {
      r,
      o,
      key,
      prefillId: `${key}:prefill`,
      tokens: this.#synth.tokens(r.hashIds, r.inputLength),
      protocol,
      replica: this.#front.pick(),
      decodeChoice: null,
      prefillDoneAt: null,
      prefillEngine: null,
    };
    const prefillPool = this.#pools[0]!;
    this.#routeThen(
      prefillPool.router,
      { key, tokens: flow.tokens, expectedOutputTokens: 1, replica: flow.replica },
      prefillPool.workerIds,
      (p, t) => {
        o.prefillWorkerId = p.workerId;
        o.predictedCachedTokens = p.predictedCachedTokens;
        flow.prefillEngine = this.#engines[p.workerId]!;
        // SGLang's bootstrap path picks both workers up front; vLLM's picks decode after the prefill response.
        if (protocol === 'bootstrap') this.#routeDecode(flow);
        if (o.error !== null) {
          prefillPool.router.finished(key);
          return;
        }
        this.#startPrefill(flow, flow.prefillEngine, t);
      },
      (err) => this.#fail(o, err),
    );
  }

  /** The prefill leg: max_tokens 1, blocks held under the lease for the decode engine. */
  #startPrefill(flow: DisaggFlow, pe: Engine, t: number): void {
    const { r, o, key } = flow;
    const [prefillPool, decodePool] = this.#pools as [PoolState, PoolState];
    const req: CoreRequest = {
      id: flow.prefillId,
      promptTokens: flow.tokens,
      maxTokens: 1,
      seed: generationSeed(this.#opts.seed, r.index),
      holdBlocksMs: this.#opts.engine.kvLeaseMs,
    };
    this.#submit(pe, req, t, {
      onAdmitted: (cached, at) => this.#admitted(o, r, cached, at),
      onToken: (_id, index) => {
        if (index === 0) prefillPool.router.prefillCompleted(key);
      },
      onFinish: (_info, at) => {
        prefillPool.router.finished(key);
        o.prefillDoneMs = at;
        flow.prefillDoneAt = at;
        if (flow.protocol === 'kv_transfer_params') this.#routeDecode(flow);
        else this.#startDecode(flow);
      },
      onError: (err) => {
        prefillPool.router.finished(key);
        if (flow.decodeChoice !== null) decodePool.router.finished(key);
        this.#fail(o, err);
      },
    });
  }

  #routeDecode(flow: DisaggFlow): void {
    const decodePool = this.#pools[1]!;
    const req: RouteRequest = {
      key: flow.key,
      tokens: flow.tokens,
      expectedOutputTokens: flow.r.outputLength,
      replica: flow.replica,
    };
    this.#routeThen(
      decodePool.router,
      req,
      decodePool.workerIds,
      (d) => {
        flow.decodeChoice = d;
        flow.o.workerId = d.workerId;
        this.#startDecode(flow);
      },
      (err) => {
        if (flow.prefillEngine !== null) flow.prefillEngine.ve.core.abort(flow.prefillId);
        this.#fail(flow.o, err);
      },
    );
  }

  /** The decode leg, once both the prefill is done and the decode worker is known; its KV transfer precedes its first token. */
  #startDecode(flow: DisaggFlow): void {
    if (flow.decodeChoice === null || flow.prefillDoneAt === null || flow.prefillEngine === null) return;
    const { r, o, key } = flow;
    const pe = flow.prefillEngine;
    const decodePool = this.#pools[1]!;
    const decodeEngine = this.#engines[flow.decodeChoice.workerId]!;
    const at = Math.max(flow.prefillDoneAt, this.#clock.now());
    o.decodeStartMs = at;
    const req: CoreRequest = {
      id: key,
      promptTokens: flow.tokens,
      maxTokens: r.outputLength,
      seed: generationSeed(this.#opts.seed, r.index),
      remotePrefill: true,
    };
    this.#submit(decodeEngine, req, at, {
      onAdmitted: (cached) => {
        o.transferEstimateMs = decodeEngine.ve.core.transferMs(r.inputLength - cached);
      },
      onToken: (_id, index, tt) => {
        o.outputTokens = index + 1;
        if (index === 0) {
          o.firstTokenMs = tt;
          decodePool.router.prefillCompleted(key);
          // The KV has arrived (the transfer precedes the first token): the prefill engine's lease ends.
          if (!pe.ve.core.pullHeld(flow.prefillId, undefined, tt).ok) this.#leaseExpired++;
        }
        decodePool.router.outputTokens(key, index + 1);
      },
      onFinish: (_info, tt) => {
        o.finishMs = tt;
        decodePool.router.finished(key);
        this.#finish();
      },
      onError: (err) => {
        decodePool.router.finished(key);
        pe.ve.core.abort(flow.prefillId);
        this.#fail(o, err);
      },
    });
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
