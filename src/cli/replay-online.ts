/**
 * Online replay: for each policy, a fresh fleet of mocker engines (real
 * HTTP, real ZMQ KV events, real P/D protocols; in this process), the real
 * gateway (`kvgate serve` with a generated config, in this process), and the
 * load generator streaming the workload at its arrival times. Measured at the
 * client: TTFT, ITL, end-to-end latency, engine-reported cached tokens. Engine
 * load is sampled from the engines every `sampleMs`; the router's prediction
 * error comes from the gateway's own metrics
 * (`kvgate_router_prediction_total`, `kvgate_router_prediction_error_tokens`).
 *
 * Every engine, the gateway and the client share this process's event loop:
 * on a small machine their CPU use shows up as latency, which is why online
 * numbers run somewhat above offline ones (the report says by how much).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { destination, pino } from 'pino';
import { request } from 'undici';
import { serve, type ServeHandle } from './serve.js';
import type { EngineDialect, WorkerRole } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { resolveMockerOptions, startMocker, type MockerHandle, type MockerInput } from '../mocker/index.js';
import {
  defaultBucketMs,
  generateLoad,
  LoadTimeline,
  replayEngineOptions,
  round,
  routerModeOf,
  TokenSynthesizer,
  type DisaggProtocol,
  type PolicyRun,
  type PolicySpec,
  type PoolRun,
  type ReplayConfig,
  type Workload,
} from '../replay/index.js';

/** The model name the replay's engines serve. */
export const REPLAY_MODEL = 'replay-model';

/** How often engine load is sampled, ms. */
const SAMPLE_MS = 50;
/** How long to wait for the gateway to report ready. */
const READY_TIMEOUT_MS = 15_000;

interface PoolEngines {
  readonly name: PoolRun['name'];
  readonly handles: MockerHandle[];
  readonly workerIds: number[];
  readonly timeline: LoadTimeline;
}

export interface OnlineFleet {
  readonly pools: PoolEngines[];
  readonly gateway: ServeHandle;
  readonly url: string;
  close(): Promise<void>;
}

type OnlineTopology =
  | { readonly kind: 'aggregated'; readonly workers: number }
  | {
      readonly kind: 'disaggregated';
      readonly prefillWorkers: number;
      readonly decodeWorkers: number;
      readonly protocol: DisaggProtocol;
    };

/** What a replay's clients do with their sessions: the gateway's `session_priority`, `session_affinity: pin`. */
interface OnlineSessions {
  readonly priority: boolean;
  readonly pins: boolean;
}

/** The gateway config (Dynamo-named router knobs for kv variants) for a started fleet. */
export function gatewayConfig(
  policy: PolicySpec,
  pools: readonly PoolEngines[],
  blockSize: number,
  flavour: EngineDialect,
  sessions: OnlineSessions = { priority: false, pins: false },
): Record<string, unknown> {
  const workers = pools.flatMap((p) =>
    p.handles.map((h, i) => ({
      id: p.workerIds[i]!,
      url: h.url,
      role: p.name === 'engines' ? 'aggregated' : p.name,
      // Only the KV router reads KV events (the gateway warns about endpoints it would ignore).
      ...(policy.kind === 'kv' ? { kv_events: h.kvEventsEndpoints[0]! } : {}),
      ...(p.name === 'prefill' && flavour === 'sglang' ? { bootstrap_port: h.bootstrapPort } : {}),
    })),
  );
  return {
    listen: { host: '127.0.0.1', port: 0 },
    log: { level: 'warn' },
    // Trace prompts reach 190k tokens; the replay, not the gateway, decides what is too long.
    limits: {
      max_body_bytes: 64 * 1024 * 1024,
      max_prompt_tokens: 4_194_304,
      max_concurrent_requests: 1_000_000,
      request_timeout_ms: 3_600_000,
    },
    models: [
      {
        name: REPLAY_MODEL,
        router_mode: routerModeOf(policy),
        ...(policy.kind === 'kv' && Object.keys(policy.dynamo).length > 0 ? { router: policy.dynamo } : {}),
        block_size: blockSize,
        tokenizer: 'none',
        engine: flavour,
        enforce_disagg: pools.length > 1,
        // The mocker's priority scheduling is vLLM's: lower values first.
        ...(sessions.priority ? { session_priority: 'lower_first' } : {}),
        ...(sessions.pins ? { session_affinity: 'pin' } : {}),
        workers,
      },
    ],
  };
}

async function waitReady(url: string): Promise<void> {
  const deadline = performance.now() + READY_TIMEOUT_MS;
  for (;;) {
    try {
      const res = await request(new URL('/ready', url));
      await res.body.dump();
      if (res.statusCode === 200) return;
    } catch {
      // not listening yet
    }
    if (performance.now() > deadline)
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `the gateway at ${url} did not become ready within ${READY_TIMEOUT_MS} ms`,
      );
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * `kvgate serve` on a config written to a temporary file (removed once read), ready to answer.
 * A gateway that started but never became ready is stopped before the error propagates.
 */
async function startPolicyGateway(config: unknown): Promise<{ gateway: ServeHandle; url: string }> {
  const tmp = mkdtempSync(join(tmpdir(), 'kvgate-replay-'));
  let gateway: ServeHandle | undefined;
  try {
    const file = join(tmp, 'gateway.json');
    writeFileSync(file, JSON.stringify(config));
    gateway = await serve(['--config', file], {
      out: { write: () => true },
      logger: pino({ level: 'warn', base: { svc: 'kvgate' } }, destination(2)),
    });
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  if (gateway === undefined) throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'the gateway did not start');
  const a = gateway.gateway.addresses.public;
  const url = `http://${a.host}:${a.port}`;
  try {
    await waitReady(url);
  } catch (err) {
    await gateway.stop();
    throw err;
  }
  return { gateway, url };
}

/** Starts fresh engines and a gateway for one policy. Everything started is closed on failure. */
export async function startFleet(
  policy: PolicySpec,
  topology: OnlineTopology,
  engineInput: MockerInput,
  seed: number,
  bucketMs: number,
  sessions?: OnlineSessions,
): Promise<OnlineFleet> {
  // The P/D protocol decides the engine flavour: SGLang pairs through bootstrap rooms, vLLM hands over kv_transfer_params.
  const flavour =
    topology.kind === 'disaggregated'
      ? topology.protocol === 'bootstrap'
        ? 'sglang'
        : 'vllm'
      : (engineInput.engine ?? 'vllm');
  const specs: { name: PoolRun['name']; count: number; mode: WorkerRole }[] =
    topology.kind === 'aggregated'
      ? [{ name: 'engines', count: topology.workers, mode: 'aggregated' }]
      : [
          { name: 'prefill', count: topology.prefillWorkers, mode: 'prefill' },
          { name: 'decode', count: topology.decodeWorkers, mode: 'decode' },
        ];
  const pools: PoolEngines[] = [];
  const all: MockerHandle[] = [];
  try {
    let nextId = 1;
    for (const s of specs) {
      const handles: MockerHandle[] = [];
      const workerIds: number[] = [];
      for (let i = 0; i < s.count; i++) {
        const id = nextId++;
        const base = replayEngineOptions(engineInput, seed);
        const h = await startMocker({
          ...base,
          model: REPLAY_MODEL,
          host: '127.0.0.1',
          port: 0,
          kvEvents: true,
          kvEventsPort: 0,
          bootstrapPort: 0,
          mode: s.mode,
          engine: flavour,
          engineHashSeed: BigInt.asUintN(64, (base.engineHashSeed ?? 0n) + BigInt(id)),
        });
        handles.push(h);
        all.push(h);
        workerIds.push(id);
      }
      pools.push({ name: s.name, handles, workerIds, timeline: new LoadTimeline(s.count, bucketMs) });
    }
    const blockSize = resolveMockerOptions(replayEngineOptions(engineInput, seed)).blockSize;
    const { gateway, url } = await startPolicyGateway(gatewayConfig(policy, pools, blockSize, flavour, sessions));
    return {
      pools,
      gateway,
      url,
      async close(): Promise<void> {
        await gateway.stop();
        await Promise.allSettled(all.map((h) => h.close()));
      },
    };
  } catch (err) {
    await Promise.allSettled(all.map((h) => h.close()));
    throw err;
  }
}

/** Parses the gateway's prediction metrics (Prometheus text) into the summary's prediction error. */
export function predictionFromMetrics(text: string): PolicyRun['predictionFromGateway'] {
  const count = (re: RegExp): number => {
    let sum = 0;
    for (const line of text.split('\n')) {
      const m = re.exec(line);
      if (m !== null) sum += Number(m[1]);
    }
    return sum;
  };
  const exact = count(/^kvgate_router_prediction_total\{[^}]*outcome="exact"[^}]*\} (\S+)$/);
  const total = count(/^kvgate_router_prediction_total\{[^}]*\} (\S+)$/);
  const errSum = count(/^kvgate_router_prediction_error_tokens_sum\{[^}]*\} (\S+)$/);
  const errCount = count(/^kvgate_router_prediction_error_tokens_count\{[^}]*\} (\S+)$/);
  if (total === 0) return null;
  // The gateway records engine - predicted; the summary reports predicted - engine.
  return {
    requests: total,
    exact_fraction: round(exact / total),
    mean_signed_tokens: errCount > 0 ? round(-errSum / errCount) : null,
  };
}

/** The engines' counters summed over every rank of every pool. */
function engineTotals(fleet: OnlineFleet): {
  preemptions: number;
  busyMs: number;
  extrapolated: number;
  engines: number;
} {
  const t = { preemptions: 0, busyMs: 0, extrapolated: 0, engines: 0 };
  for (const p of fleet.pools) {
    for (const h of p.handles) {
      for (const r of h.stats().ranks) {
        t.preemptions += r.preemptions;
        t.busyMs += r.busyMs;
        t.extrapolated += r.extrapolatedSteps;
        t.engines++;
      }
    }
  }
  return t;
}

/** One policy online: fresh fleet, load, samples, teardown. */
export async function runOnlinePolicy(
  workload: Workload,
  policy: PolicySpec,
  topology: OnlineTopology,
  cfg: ReplayConfig,
  onProgress: (done: number, total: number) => void,
): Promise<PolicyRun> {
  const bucketMs = defaultBucketMs(workload);
  const sessions = { priority: cfg.sessionPriority === true, pins: cfg.sessionPins === true };
  const fleet = await startFleet(policy, topology, cfg.engine, cfg.seed, bucketMs, sessions);
  const wallStart = performance.now();
  try {
    let t0 = 0;
    const sample = (): void => {
      const t = performance.now() - t0;
      for (const p of fleet.pools) {
        p.handles.forEach((h, row) => {
          let inFlight = 0;
          for (const r of h.stats().ranks) inFlight += r.running + r.waiting + r.transferring;
          p.timeline.set(row, t, inFlight);
        });
      }
    };
    t0 = performance.now();
    const timer = setInterval(sample, SAMPLE_MS);
    let run;
    try {
      run = await generateLoad(workload, {
        url: fleet.url,
        model: REPLAY_MODEL,
        synth: new TokenSynthesizer({ traceBlockSize: workload.traceBlockSize, seed: cfg.seed }),
        requestSeed: (i) => (cfg.seed * 1_000_003 + i) >>> 0,
        bucketMs,
        sessions: sessions.priority || sessions.pins,
        onDone: onProgress,
      });
    } finally {
      clearInterval(timer);
    }
    sample();
    const { preemptions, busyMs, extrapolated, engines } = engineTotals(fleet);
    const metrics = await request(new URL('/metrics', fleet.url));
    const prediction =
      metrics.statusCode === 200 ? predictionFromMetrics(await metrics.body.text()) : (await metrics.body.dump(), null);
    const endMs = run.endMs;
    const pools: PoolRun[] = fleet.pools.map((p) => ({
      name: p.name,
      workerIds: p.workerIds,
      load: p.timeline.finish(endMs),
      buckets: p.timeline.buckets(),
      bucketMs,
    }));
    return {
      name: topology.kind === 'aggregated' ? policy.name : `${policy.name}@${topology.protocol}`,
      outcomes: run.outcomes,
      endMs,
      pools,
      wallMs: performance.now() - wallStart,
      hits: { promptTokens: run.hits.promptTokens, cachedTokens: run.hits.cachedTokens, overTime: run.hits.windowed() },
      preemptions,
      extrapolatedSteps: extrapolated,
      leaseExpired: null,
      engineBusyFraction: endMs > 0 && engines > 0 ? Math.min(1, busyMs / (engines * endMs)) : null,
      predictionFromGateway: prediction,
    };
  } finally {
    await fleet.close();
  }
}

/** Every policy (and P/D protocol) of the config, one after the other. */
export async function runOnlineReplay(
  workload: Workload,
  cfg: ReplayConfig,
  onProgress: (done: number, total: number) => void,
): Promise<PolicyRun[]> {
  const topologies: OnlineTopology[] =
    cfg.topology.kind === 'aggregated'
      ? [{ kind: 'aggregated', workers: cfg.topology.workers }]
      : cfg.topology.protocols.map((protocol) => ({
          kind: 'disaggregated' as const,
          prefillWorkers: (cfg.topology as { prefillWorkers: number }).prefillWorkers,
          decodeWorkers: (cfg.topology as { decodeWorkers: number }).decodeWorkers,
          protocol,
        }));
  const runs: PolicyRun[] = [];
  const per = workload.requests.length;
  const total = per * cfg.policies.length * topologies.length;
  for (const policy of cfg.policies) {
    for (const topology of topologies) {
      const offset = runs.length * per;
      runs.push(await runOnlinePolicy(workload, policy, topology, cfg, (d) => onProgress(offset + d, total)));
    }
  }
  return runs;
}
