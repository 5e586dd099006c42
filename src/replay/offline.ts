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
 */
import { ManualClock, seededRng } from '../core/clock.js';
import { KvgateError } from '../errors/index.js';
import { EngineCore, type CoreRequest, type StepResult } from '../mocker/engine.js';
import { engineCoreOptions, type ResolvedMockerOptions } from '../mocker/options.js';
import { VirtualEngine, type VirtualRequestListener } from '../mocker/virtual-engine.js';
import { createReplayRouter } from './routers.js';
import { policySeed, type PolicySpec, type ReplayRouter, type RouteChoice, type RouteRequest } from './policy.js';
import { newOutcome, type PolicyRun, type PoolRun, type RequestOutcome } from './results.js';
import { HitTimeline, LoadTimeline } from './timeline.js';
import { DEFAULT_VOCAB_SIZE, TokenSynthesizer } from './token-synth.js';
import type { ReplayRequest, Workload } from './workload.js';

export type DisaggProtocol = 'bootstrap' | 'kv_transfer_params';
export const DISAGG_PROTOCOLS: readonly DisaggProtocol[] = ['bootstrap', 'kv_transfer_params'];

export type Topology =
  | { readonly kind: 'aggregated'; readonly workers: number }
  | { readonly kind: 'disaggregated'; readonly prefillWorkers: number; readonly decodeWorkers: number; readonly protocol: DisaggProtocol };

export interface OfflineReplayOptions {
  readonly workload: Workload;
  readonly policy: PolicySpec;
  readonly topology: Topology;
  /** Engine model (all mocker options); `engineHashSeed` should be fixed for byte-identical runs. */
  readonly engine: ResolvedMockerOptions;
  /** Seeds the synthesised tokens, generated tokens and the routers' RNGs. */
  readonly seed: number;
  /** Token ids of synthesised prompts are in [0, vocabSize). */
  readonly vocabSize?: number;
  /** Width of the over-time buckets (charts, load ratio over time); default spanMs / 200, at least 100 ms. */
  readonly bucketMs?: number;
  /** Called as requests complete (or fail). */
  readonly onProgress?: (done: number, total: number) => void;
}

/** Virtual ms between router housekeeping calls (expiry, queue drain). */
const ROUTER_TICK_MS = 1000;

/** Generated tokens are drawn from this many ids (their values do not matter to routing). */
const SAMPLE_VOCAB = 1024;

export function defaultBucketMs(workload: Workload): number {
  return Math.max(100, Math.ceil(workload.spanMs / 200));
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** 32-bit mix of (seed, request index): each request's generated tokens have their own stream. */
function requestSeed(seed: number, index: number): number {
  let h = Math.imul((seed ^ 0x9e3779b9) >>> 0, 0x85ebca6b) ^ index;
  h = Math.imul(h ^ (h >>> 16), 0x7feb352d);
  return (h ^ (h >>> 15)) >>> 0;
}

interface Engine {
  readonly workerId: number;
  /** Position in its pool (load timeline row). */
  readonly row: number;
  readonly pool: PoolState;
  readonly ve: VirtualEngine;
}

interface PoolState {
  readonly name: PoolRun['name'];
  readonly workerIds: number[];
  readonly timeline: LoadTimeline;
  readonly router: ReplayRouter;
}

/**
 * Runs one policy over the workload in virtual time and returns everything
 * measured. Asynchronous only so a router's queue (whose admissions resolve
 * promises) can make progress between events; no wall-clock waiting happens.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an invalid topology.
 */
export async function runOffline(opts: OfflineReplayOptions): Promise<PolicyRun> {
  const wallStart = performance.now();
  const { workload, policy, topology, engine: eng, seed } = opts;
  const counts = topology.kind === 'aggregated' ? [topology.workers] : [topology.prefillWorkers, topology.decodeWorkers];
  for (const c of counts) {
    if (!Number.isSafeInteger(c) || c < 1) throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `every engine pool needs at least 1 worker, got ${c}`);
  }
  const clock = new ManualClock(0);
  const bucketMs = opts.bucketMs ?? defaultBucketMs(workload);
  const synth = new TokenSynthesizer({ traceBlockSize: workload.traceBlockSize, seed, vocabSize: opts.vocabSize ?? DEFAULT_VOCAB_SIZE });
  const sampleTokenIds = Uint32Array.from({ length: SAMPLE_VOCAB }, (_, i) => i);
  const hits = new HitTimeline(bucketMs);
  const rngSeed = policySeed(seed, policy.name);

  const pools: PoolState[] = [];
  const engines: Engine[] = [];
  let nextWorkerId = 0;
  const makePool = (name: PoolRun['name'], size: number, role: 'aggregated' | 'prefill' | 'decode'): PoolState => {
    const workerIds = Array.from({ length: size }, () => nextWorkerId++);
    const router = createReplayRouter(policy, {
      role, workerIds, blockSize: eng.blockSize, clock, rng: seededRng(rngSeed + pools.length),
      maxNumBatchedTokens: eng.maxNumBatchedTokens, totalKvBlocks: eng.numGpuBlocks,
    });
    const pool: PoolState = { name, workerIds, timeline: new LoadTimeline(size, bucketMs), router };
    pools.push(pool);
    return pool;
  };
  if (topology.kind === 'aggregated') makePool('engines', topology.workers, 'aggregated');
  else {
    makePool('prefill', topology.prefillWorkers, 'prefill');
    makePool('decode', topology.decodeWorkers, 'decode');
  }
  for (const pool of pools) {
    pool.workerIds.forEach((workerId, row) => {
      const base = engineCoreOptions(eng, sampleTokenIds);
      // Each engine hashes under its own seed, as separate vLLM processes do.
      const core = new EngineCore({ ...base, engineHashSeed: BigInt.asUintN(64, eng.engineHashSeed + BigInt(workerId)) });
      const ve = new VirtualEngine(core, {
        keepRecords: false,
        onStep: (r: StepResult) => {
          if (r.kvEvents.length > 0) pool.router.applyKvEvents(workerId, r.kvEvents);
        },
      });
      engines[workerId] = { workerId, row, pool, ve };
    });
  }

  const outcomes: RequestOutcome[] = workload.requests.map((r) => newOutcome(r.index, r.arrivalMs, r.inputLength, r.outputLength));
  const total = outcomes.length;
  let done = 0;
  const finish = (): void => {
    done++;
    opts.onProgress?.(done, total);
  };
  const fail = (o: RequestOutcome, err: unknown): void => {
    if (o.error === null) o.error = message(err);
    finish();
  };

  const submit = (e: Engine, req: CoreRequest, at: number, listener: VirtualRequestListener): void => {
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
  };

  const tooLong = (r: ReplayRequest): string | null =>
    r.inputLength + r.outputLength > eng.maxModelLen
      ? `prompt (${r.inputLength}) + max_tokens (${r.outputLength}) exceeds max_model_len ${eng.maxModelLen} (line ${r.line})`
      : null;

  let pendingRoutes = 0;
  /** Runs `then` with the router's choice now, or when a queued request is admitted (at that virtual time). */
  const routeThen = (router: ReplayRouter, req: RouteRequest, candidates: readonly number[],
    then: (c: RouteChoice, at: number) => void, onError: (err: unknown) => void): void => {
    let result: RouteChoice | Promise<RouteChoice>;
    try {
      result = router.route(req, candidates);
    } catch (err) {
      onError(err);
      return;
    }
    if (!(result instanceof Promise)) {
      then(result, clock.now());
      return;
    }
    pendingRoutes++;
    result.then((c) => {
      pendingRoutes--;
      then(c, clock.now());
    }, (err: unknown) => {
      pendingRoutes--;
      onError(err);
    });
  };

  const arriveAggregated = (r: ReplayRequest): void => {
    const o = outcomes[r.index]!;
    const pool = pools[0]!;
    const long = tooLong(r);
    if (long !== null) return fail(o, long);
    const key = String(r.index);
    const tokens = synth.tokens(r.hashIds, r.inputLength);
    routeThen(pool.router, { key, tokens, expectedOutputTokens: r.outputLength }, pool.workerIds, (choice, t) => {
      o.workerId = choice.workerId;
      o.predictedCachedTokens = choice.predictedCachedTokens;
      submit(engines[choice.workerId]!, { id: key, promptTokens: tokens, maxTokens: r.outputLength, seed: requestSeed(seed, r.index) }, t, {
        onAdmitted: (cached, at) => {
          o.admittedMs = at;
          o.cachedTokens = cached;
          hits.record(at, r.inputLength, cached);
        },
        onToken: (_id, index, at) => {
          o.outputTokens = index + 1;
          if (index === 0) {
            o.firstTokenMs = at;
            pool.router.prefillCompleted(key);
          }
        },
        onFinish: (_info, at) => {
          o.finishMs = at;
          pool.router.finished(key);
          finish();
        },
        onError: (err) => {
          pool.router.finished(key);
          fail(o, err);
        },
      });
    }, (err) => fail(o, err));
  };

  let leaseExpired = 0;
  const arriveDisaggregated = (r: ReplayRequest, protocol: DisaggProtocol): void => {
    const o = outcomes[r.index]!;
    const [prefillPool, decodePool] = pools as [PoolState, PoolState];
    const long = tooLong(r);
    if (long !== null) return fail(o, long);
    const key = String(r.index);
    const prefillId = `${key}:prefill`;
    const tokens = synth.tokens(r.hashIds, r.inputLength);
    const decodeReq: RouteRequest = { key, tokens, expectedOutputTokens: r.outputLength };
    /** Decode leg: runs once the prefill is done and the decode worker is known. */
    let decodeChoice: RouteChoice | null = null;
    let prefillDoneAt: number | null = null;
    let prefillEngine: Engine | null = null;
    const startDecode = (): void => {
      if (decodeChoice === null || prefillDoneAt === null || prefillEngine === null) return;
      const pe = prefillEngine;
      const decodeEngine = engines[decodeChoice.workerId]!;
      const at = Math.max(prefillDoneAt, clock.now());
      o.decodeStartMs = at;
      submit(decodeEngine, { id: key, promptTokens: tokens, maxTokens: r.outputLength, seed: requestSeed(seed, r.index), remotePrefill: true }, at, {
        onAdmitted: (cached) => {
          o.transferEstimateMs = decodeEngine.ve.core.transferMs(r.inputLength - cached);
        },
        onToken: (_id, index, tt) => {
          o.outputTokens = index + 1;
          if (index === 0) {
            o.firstTokenMs = tt;
            decodePool.router.prefillCompleted(key);
            // The KV has arrived (the transfer precedes the first token): the prefill engine's lease ends.
            if (!pe.ve.core.pullHeld(prefillId, undefined, tt).ok) leaseExpired++;
          }
        },
        onFinish: (_info, tt) => {
          o.finishMs = tt;
          decodePool.router.finished(key);
          finish();
        },
        onError: (err) => {
          decodePool.router.finished(key);
          pe.ve.core.abort(prefillId);
          fail(o, err);
        },
      });
    };
    const routeDecode = (): void => {
      routeThen(decodePool.router, decodeReq, decodePool.workerIds, (d) => {
        decodeChoice = d;
        o.workerId = d.workerId;
        startDecode();
      }, (err) => {
        if (prefillEngine !== null) prefillEngine.ve.core.abort(prefillId);
        fail(o, err);
      });
    };
    routeThen(prefillPool.router, { key, tokens, expectedOutputTokens: 1 }, prefillPool.workerIds, (p, t) => {
      o.prefillWorkerId = p.workerId;
      o.predictedCachedTokens = p.predictedCachedTokens;
      const pe = engines[p.workerId]!;
      prefillEngine = pe;
      // SGLang's bootstrap path picks both workers up front; vLLM's picks decode after the prefill response.
      if (protocol === 'bootstrap') routeDecode();
      if (o.error !== null) {
        prefillPool.router.finished(key);
        return;
      }
      submit(pe, { id: prefillId, promptTokens: tokens, maxTokens: 1, seed: requestSeed(seed, r.index), holdBlocksMs: eng.kvLeaseMs }, t, {
        onAdmitted: (cached, at) => {
          o.admittedMs = at;
          o.cachedTokens = cached;
          hits.record(at, r.inputLength, cached);
        },
        onToken: (_id, index) => {
          if (index === 0) prefillPool.router.prefillCompleted(key);
        },
        onFinish: (_info, at) => {
          prefillPool.router.finished(key);
          o.prefillDoneMs = at;
          prefillDoneAt = at;
          if (protocol === 'kv_transfer_params') routeDecode();
          else startDecode();
        },
        onError: (err) => {
          prefillPool.router.finished(key);
          if (decodeChoice !== null) decodePool.router.finished(key);
          fail(o, err);
        },
      });
    }, (err) => fail(o, err));
  };

  const arrive = topology.kind === 'aggregated'
    ? arriveAggregated
    : (r: ReplayRequest): void => arriveDisaggregated(r, topology.protocol);

  const requests = workload.requests;
  const ves = engines.map((e) => e.ve);
  let next = 0;
  let endMs = 0;
  let nextTickMs = ROUTER_TICK_MS;
  for (;;) {
    let t = next < requests.length ? requests[next]!.arrivalMs : Infinity;
    for (const ve of ves) {
      const et = ve.nextEventTime();
      if (et !== undefined && et < t) t = et;
    }
    if (t === Infinity) break;
    if (t > clock.now()) clock.set(t);
    endMs = t;
    for (const ve of ves) ve.runUntil(t);
    while (next < requests.length && requests[next]!.arrivalMs <= t) arrive(requests[next++]!);
    if (t >= nextTickMs) {
      for (const p of pools) p.router.tick();
      nextTickMs = t + ROUTER_TICK_MS;
    }
    // Queued requests admitted by a free or a tick settle their promises now, before time moves on.
    if (pendingRoutes > 0) await new Promise<void>((resolve) => setImmediate(resolve));
  }
  if (pendingRoutes > 0) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `${pendingRoutes} request(s) were still queued in the router when every engine went idle`);
  }

  let preemptions = 0;
  let extrapolated = 0;
  let busyMs = 0;
  for (const e of engines) {
    const s = e.ve.core.stats();
    preemptions += s.preemptions;
    extrapolated += s.extrapolatedSteps;
    busyMs += s.busyMs;
  }
  const poolRuns: PoolRun[] = pools.map((p) => {
    const load = p.timeline.finish(endMs);
    return { name: p.name, workerIds: p.workerIds, load, buckets: p.timeline.buckets(), bucketMs };
  });
  return {
    name: topology.kind === 'aggregated' ? policy.name : `${policy.name}@${topology.protocol}`,
    outcomes, endMs, pools: poolRuns, wallMs: performance.now() - wallStart,
    hits: { promptTokens: hits.promptTokens, cachedTokens: hits.cachedTokens, overTime: hits.windowed() },
    preemptions, extrapolatedSteps: extrapolated,
    leaseExpired: topology.kind === 'aggregated' ? null : leaseExpired,
    engineBusyFraction: endMs > 0 ? busyMs / (engines.length * endMs) : 0,
  };
}
