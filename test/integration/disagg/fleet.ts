/**
 * A disaggregated fleet: real mocker engines in prefill and decode roles
 * (vLLM or SGLang protocol, loopback, OS-chosen ports, KV events on) behind a
 * real ModelRouter, with an EngineClient that records every leg it sends
 * (the body as the engine receives it, headers, when the engine took it, the
 * answer) and can hold a worker's dispatches at a gate.
 */
import {
  EngineClient,
  applyFields,
  type DispatchOptions,
  type EngineResponse,
  type JsonObject,
} from '../../../src/engines/index.js';
import { WorkerRegistry, type WorkerInfo } from '../../../src/discovery/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { startMocker, type MockerHandle, type MockerInput } from '../../../src/mocker/index.js';
import {
  ModelRouter,
  makeRouterContext,
  type ModelRouterOptions,
  type PushRouter,
} from '../../../src/routing/index.js';
import { afterEach } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { isKvgateError, type KvgateError } from '../../../src/errors/index.js';
import { BLOCK, MODEL, drain as drainRouted, until } from '../../helpers/fleet.js';
import type { RoutedResponse } from '../../../src/frontend/router-port.js';

export { BLOCK, MODEL, prepare, randomTokens, until } from '../../helpers/fleet.js';

export interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number };
}

/** Reads a routed response to its end: the SSE payloads (or the JSON body) and the usage. */
export async function drain(res: RoutedResponse): Promise<{ payloads: string[]; usage: Usage | undefined }> {
  return drainRouted(res);
}

export interface SentLeg {
  workerId: number;
  role: 'prefill' | 'decode';
  path: string;
  /** The body the engine received. */
  body: Record<string, unknown>;
  headers: Record<string, string>;
  /** performance.now() when dispatch was called, when the engine took it (socket), when the answer started. */
  calledAt: number;
  acceptedAt: number | undefined;
  answeredAt: number | undefined;
  /** The JSON answer of a non-streaming leg. */
  json: unknown;
  error: unknown;
}

export interface RecordingEngine {
  engine: EngineClient;
  sent: SentLeg[];
  /** Called synchronously when a leg is handed to the client, before any gate. */
  onCall: ((leg: SentLeg) => void) | undefined;
  /** Holds every dispatch to the worker until the returned function is called. */
  hold(workerId: number): () => void;
}

function recordingEngine(workers: () => readonly WorkerInfo[]): RecordingEngine {
  const engine = new EngineClient({ connectTimeoutMs: 2000 });
  const sent: SentLeg[] = [];
  const gates = new Map<number, Promise<void>>();
  const original = engine.dispatch.bind(engine) as (
    u: string,
    p: string,
    b: JsonObject | undefined,
    o?: DispatchOptions,
  ) => Promise<EngineResponse>;
  const patched = async (
    url: string,
    path: string,
    body: JsonObject | undefined,
    options: DispatchOptions = {},
  ): Promise<EngineResponse> => {
    const w = workers().find((x) => x.url === url);
    const leg: SentLeg = {
      workerId: w?.id ?? -1,
      role: w?.role === 'prefill' ? 'prefill' : 'decode',
      path,
      body: applyFields(body ?? {}, options.extraFields),
      headers: { ...options.headers },
      calledAt: performance.now(),
      acceptedAt: undefined,
      answeredAt: undefined,
      json: undefined,
      error: undefined,
    };
    sent.push(leg);
    rec.onCall?.(leg);
    const gate = w === undefined ? undefined : gates.get(w.id);
    if (gate !== undefined) await gate;
    try {
      const res = await original(url, path, body, {
        ...options,
        onDispatched: () => {
          leg.acceptedAt = performance.now();
          options.onDispatched?.();
        },
      });
      leg.answeredAt = performance.now();
      if (res.kind === 'json') leg.json = res.json;
      return res;
    } catch (err) {
      leg.answeredAt = performance.now();
      leg.error = err;
      throw err;
    }
  };
  (engine as unknown as { dispatch: typeof patched }).dispatch = patched;
  const rec: RecordingEngine = {
    engine,
    sent,
    onCall: undefined,
    hold(workerId) {
      let open!: () => void;
      gates.set(workerId, new Promise<void>((r) => (open = r)));
      return () => {
        gates.delete(workerId);
        open();
      };
    },
  };
  return rec;
}

/** The legs sent for one request (both legs carry the request's x-request-id). */
export function legsOf(rec: RecordingEngine, requestId: string): { prefill: SentLeg[]; decode: SentLeg[] } {
  // The router makes each request's id unique (`<client id>~<n>`); the engine sees that id.
  const mine = rec.sent.filter((l) => {
    const id = l.headers['x-request-id'];
    return typeof id === 'string' && (id === requestId || id.startsWith(`${requestId}~`));
  });
  return { prefill: mine.filter((l) => l.role === 'prefill'), decode: mine.filter((l) => l.role === 'decode') };
}

export interface DisaggFleet {
  prefill: MockerHandle[];
  decode: MockerHandle[];
  prefillWorkers: WorkerInfo[];
  decodeWorkers: WorkerInfo[];
  registry: WorkerRegistry;
  rec: RecordingEngine;
  metrics: KvgateMetrics;
  router: ModelRouter;
  /** The prefill pool (the router activates it at construction when prefill workers are registered). */
  pool(): PushRouter;
  mockerOf(workerId: number): MockerHandle;
  close(): Promise<void>;
}

export interface DisaggFleetOptions {
  engine: 'vllm' | 'sglang';
  prefill?: number;
  decode?: number;
  /** Mocker mode of the decode-role engines: `aggregated` imitates vLLM's kv_both (can also serve alone). */
  decodeMode?: 'decode' | 'aggregated';
  mocker?: MockerInput;
  /** Per prefill engine (by index) or for all. */
  prefillMocker?: MockerInput | ((i: number) => MockerInput);
  decodeMocker?: MockerInput | ((i: number) => MockerInput);
  prefillWorker?: Partial<WorkerInfo>;
  decodeWorker?: Partial<WorkerInfo>;
  router?: Partial<Omit<ModelRouterOptions, 'registry' | 'engine' | 'model' | 'blockSize'>>;
}

export const PREFILL_ID = 101;
const DECODE_ID = 201;

export async function startDisaggFleet(opts: DisaggFleetOptions): Promise<DisaggFleet> {
  const base: MockerInput = {
    model: MODEL,
    blockSize: BLOCK,
    speedup: 200,
    engine: opts.engine,
    kvEvents: true,
    kvEventsPort: 0,
    ...opts.mocker,
  };
  const prefill = await Promise.all(
    Array.from({ length: opts.prefill ?? 2 }, (_, i) =>
      startMocker({
        ...base,
        mode: 'prefill',
        seed: 10 + i,
        engineHashSeed: BigInt(500 + i),
        ...(typeof opts.prefillMocker === 'function' ? opts.prefillMocker(i) : opts.prefillMocker),
      }),
    ),
  );
  const decode = await Promise.all(
    Array.from({ length: opts.decode ?? 2 }, (_, i) =>
      startMocker({
        ...base,
        mode: opts.decodeMode ?? 'decode',
        seed: 20 + i,
        engineHashSeed: BigInt(600 + i),
        ...(typeof opts.decodeMocker === 'function' ? opts.decodeMocker(i) : opts.decodeMocker),
      }),
    ),
  );
  const info = (m: MockerHandle, id: number, role: 'prefill' | 'decode'): WorkerInfo => ({
    id,
    model: MODEL,
    url: m.url,
    role,
    dialect: opts.engine,
    dpStart: 0,
    dpSize: m.options.dpSize,
    ...(m.kvEventsEndpoints.length > 0 ? { kvEvents: { endpoint: m.kvEventsEndpoints[0]! } } : {}),
    ...(role === 'prefill' && m.bootstrapPort !== undefined
      ? { bootstrap: { host: m.host, port: m.bootstrapPort } }
      : {}),
    ...(role === 'prefill' ? opts.prefillWorker : opts.decodeWorker),
    // A kv_both decode engine says it can serve alone (the fallback while no prefill worker is up).
    ...(role === 'decode' && opts.decodeMode === 'aggregated' ? { servesAggregated: true } : {}),
  });
  const prefillWorkers = prefill.map((m, i) => info(m, PREFILL_ID + i, 'prefill'));
  const decodeWorkers = decode.map((m, i) => info(m, DECODE_ID + i, 'decode'));
  const all = [...prefillWorkers, ...decodeWorkers];
  const registry = new WorkerRegistry();
  for (const w of all) registry.add(w);
  const rec = recordingEngine(() => all);
  for (const w of all) rec.engine.addWorker(w.url);
  const metrics = new KvgateMetrics({ processMetrics: false });
  const router = new ModelRouter(
    {
      model: MODEL,
      mode: 'kv',
      blockSize: BLOCK,
      registry,
      engine: rec.engine,
      tickIntervalMs: 0,
      ...opts.router,
    },
    makeRouterContext({ metrics, rng: seededRng(7) }),
  );
  const handles = new Map<number, MockerHandle>();
  prefill.forEach((m, i) => handles.set(prefillWorkers[i]!.id, m));
  decode.forEach((m, i) => handles.set(decodeWorkers[i]!.id, m));
  return {
    prefill,
    decode,
    prefillWorkers,
    decodeWorkers,
    registry,
    rec,
    metrics,
    router,
    pool() {
      const p = router.prefill.pool;
      if (p === undefined) throw new Error('the prefill pool was never activated');
      return p;
    },
    mockerOf(id) {
      return handles.get(id)!;
    },
    async close() {
      await router.close();
      await rec.engine.close({ force: true });
      await Promise.all([...prefill, ...decode].map((m) => m.close()));
    },
  };
}

/** In-flight legs and prompt load booked on a pool, summed over its workers' ranks. */
export function booked(pool: PushRouter): {
  requests: number;
  prefillTokens: number;
  inflight: number;
  tracked: number;
  queued: number;
} {
  let requests = 0;
  let prefillTokens = 0;
  for (const w of pool.workers()) {
    for (let r = w.dpStart; r < w.dpStart + w.dpSize; r++) {
      requests += pool.activeRequests({ workerId: w.id, dpRank: r });
      prefillTokens += pool.kvRouter?.load({ workerId: w.id, dpRank: r })?.activePrefillTokens ?? 0;
    }
  }
  return {
    requests,
    prefillTokens,
    inflight: pool.inflight,
    tracked: pool.kvRouter?.activeRequestCount ?? 0,
    queued: pool.kvRouter?.pendingRequests ?? 0,
  };
}

/** The typed error `p` rejects with (a test of a request that must fail). */
export async function errorOf(p: Promise<unknown>): Promise<KvgateError> {
  try {
    await p;
  } catch (err) {
    if (isKvgateError(err)) return err;
    throw err;
  }
  throw new Error('expected the request to fail');
}

/** Every `kvgate_worker_active_*` series of the fleet's registry with a non-zero value. */
export async function nonZeroLoadGauges(f: DisaggFleet): Promise<string[]> {
  const text = await f.metrics.text();
  return text.split('\n').filter((l) => /^kvgate_worker_active_\w+\{/.test(l) && !/ 0$/.test(l));
}

/**
 * Waits until both pools' bookkeeping is drained (legs end asynchronously after the request's own outcome) and,
 * with `gauges`, their load gauges read zero; on a timeout, says what is still booked.
 */
export async function poolsAtZero(f: DisaggFleet, opts: { gauges?: boolean; timeoutMs?: number } = {}): Promise<void> {
  const zero = (b: ReturnType<typeof booked>): boolean =>
    b.requests === 0 && b.inflight === 0 && b.tracked === 0 && b.queued === 0 && b.prefillTokens === 0;
  await until(
    async () =>
      zero(booked(f.pool())) &&
      zero(booked(f.router.decode)) &&
      (opts.gauges !== true || (await nonZeroLoadGauges(f)).length === 0),
    opts.gauges === true ? 'both pools and their load gauges back to zero' : 'both pools back to zero',
    opts.timeoutMs,
  ).catch((err: unknown) => {
    throw new Error(
      `${String(err)}: prefill ${JSON.stringify(booked(f.pool()))}, decode ${JSON.stringify(booked(f.router.decode))}`,
    );
  });
}

/**
 * A test file's fleets, each closed after its test (hangs lifted first): the returned function starts one with one
 * prefill and one decode engine unless `shape` (the file's own defaults, given the test's options) says otherwise.
 * Call it at the file's top level, where it registers the `afterEach`.
 */
export function fleetsPerTest(
  shape: (opts: DisaggFleetOptions) => DisaggFleetOptions = (opts) => opts,
): (opts: DisaggFleetOptions) => Promise<DisaggFleet> {
  const open: DisaggFleet[] = [];
  afterEach(async () => {
    for (const f of open.splice(0)) {
      for (const m of [...f.prefill, ...f.decode]) m.setFaults({ hang: false });
      await f.close();
    }
  });
  return async (opts) => {
    const f = await startDisaggFleet({ prefill: 1, decode: 1, ...shape(opts) });
    open.push(f);
    return f;
  };
}
