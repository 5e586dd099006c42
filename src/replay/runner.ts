/**
 * `kvgate replay` without the command line: load and validate the trace,
 * build the workload, run every policy (offline: in virtual time, several at
 * once in worker threads when `jobs` > 1; online: against real engines and a
 * real gateway), summarise, and assemble the report with its provenance.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { KvgateError } from '../errors/index.js';
import { kvgateVersion } from '../version.js';
import { MOCKER_DEFAULTS, resolveMockerOptions, type MockerInput } from '../mocker/index.js';
import { runOfflineJob, type OfflineJob, type OfflineWorkerMessage } from './offline-job.js';
import type { DisaggProtocol } from './offline-disagg.js';
import { defaultBucketMs } from './offline.js';
import type { PolicySpec } from './policy.js';
import { SINGLE_ROUTER, validateReplicaOptions, type FrontDoorMode, type ReplicaOptions } from './router-replicas.js';
import { machineInfo, MAX_INVALID_LISTED, sha256, type ReplayReport } from './report.js';
import { round, summarizePolicy, type PolicyRun, type PolicySummary } from './results.js';
import { HitTimeline } from './timeline.js';
import { agenticWorkload, type AgenticOptions } from './agentic.js';
import { parseTrace, type LoadedTrace } from './trace.js';
import { buildWorkload, hitRateBound, pooledLruHitRate, type Workload, type WorkloadOptions } from './workload.js';

export type ReplayMode = 'offline' | 'online';

export type ReplayTopology =
  | { readonly kind: 'aggregated'; readonly workers: number }
  | {
      readonly kind: 'disaggregated';
      readonly prefillWorkers: number;
      readonly decodeWorkers: number;
      readonly protocols: readonly DisaggProtocol[];
    };

export interface ReplayConfig {
  /** The trace file; for a generated workload, its name (`agentic`). */
  readonly trace: string;
  /** Generate the agentic workload instead of reading `trace` (its trace block size is `traceBlockSize`). */
  readonly agentic?: Omit<AgenticOptions, 'traceBlockSize'>;
  readonly traceBlockSize: number;
  readonly strict: boolean;
  readonly workload: WorkloadOptions;
  readonly mode: ReplayMode;
  readonly policies: readonly PolicySpec[];
  readonly topology: ReplayTopology;
  /** Engine model: any mocker option (defaults: the mocker's, with max_model_len = the KV cache's capacity). */
  readonly engine: MockerInput;
  readonly seed: number;
  /** Offline runs executed at once (worker threads); 1 = in this thread. */
  readonly jobs: number;
  /** Router replicas (offline): each count, and each sync setting for counts > 1, is a run of every policy. Default: one router. */
  readonly replicas?: ReplicaSweep;
  /** Session-start priority for every policy (the engines in priority scheduling). Default off. */
  readonly sessionPriority?: boolean;
  /** Generated agent clients name their sessions and the gateway pins them, for every policy, in every pool. */
  readonly sessionPins?: boolean;
}

/** The replica settings a replay runs. */
export interface ReplicaSweep {
  readonly counts: readonly number[];
  readonly sync: readonly boolean[];
  readonly syncDelayMs: number;
  readonly front: FrontDoorMode;
}

export interface ReplayHooks {
  /** The command line, recorded in every result file. */
  readonly command: string;
  /** Progress of the whole replay: `done` of `total` request completions over all runs. */
  readonly onProgress?: (label: string, done: number, total: number) => void;
  /** Runs online replays (injected by the caller that can start engines and a gateway). */
  readonly runOnline?: (
    workload: Workload,
    cfg: ReplayConfig,
    onProgress: (done: number, total: number) => void,
  ) => Promise<PolicyRun[]>;
}

export interface ReplayResult {
  readonly report: ReplayReport;
  readonly runs: readonly PolicyRun[];
  readonly trace: LoadedTrace;
  readonly workload: Workload;
}

/** Engine options as a replay uses them: reproducible hashes, and prompts limited by the cache rather than by 32k. */
export function replayEngineOptions(input: MockerInput, seed: number): MockerInput {
  const numGpuBlocks = input.numGpuBlocks ?? MOCKER_DEFAULTS.numGpuBlocks;
  const blockSize = input.blockSize ?? MOCKER_DEFAULTS.blockSize;
  return {
    ...input,
    maxModelLen: input.maxModelLen ?? numGpuBlocks * blockSize,
    engineHashSeed: input.engineHashSeed ?? BigInt(seed >>> 0),
    seed: input.seed ?? seed,
  };
}

/** The engine model as recorded in result files (resolved values, the timing model by label). */
function engineSummary(input: MockerInput): Record<string, unknown> {
  const o = resolveMockerOptions(input);
  return {
    engine: o.engine,
    num_gpu_blocks: o.numGpuBlocks,
    block_size: o.blockSize,
    max_num_batched_tokens: o.maxNumBatchedTokens,
    max_num_seqs: o.maxNumSeqs,
    scheduling_policy: o.schedulingPolicy,
    eviction_policy: o.evictionPolicy,
    max_model_len: o.maxModelLen,
    speedup: o.speedup,
    timing_model: o.timing.label,
    kv_bytes_per_token: o.kvBytesPerToken,
    kv_transfer_bandwidth_gbps: o.kvTransferBandwidthGBps,
    kv_lease_ms: o.kvLeaseMs,
    seed: o.seed,
    engine_hash_seed: String(o.engineHashSeed),
  };
}

/**
 * The replica settings a policy runs under: each count; counts above 1 once per sync setting for kv
 * policies (load-based ones share nothing, so sync would not change them).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT naming the field.
 */
function replicaVariants(sweep: ReplicaSweep | undefined, kvPolicy: boolean): ReplicaOptions[] {
  if (sweep === undefined) return [SINGLE_ROUTER];
  if (sweep.counts.length === 0)
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'replicas.counts: name at least one count', {
      field: 'replicas.counts',
    });
  if (sweep.sync.length === 0)
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'replicas.sync: name at least one setting', {
      field: 'replicas.sync',
    });
  const out: ReplicaOptions[] = [];
  for (const count of sweep.counts) {
    for (const sync of count === 1 || !kvPolicy ? [sweep.sync[0]!] : sweep.sync) {
      const o: ReplicaOptions = { count, sync, syncDelayMs: sweep.syncDelayMs, front: sweep.front };
      validateReplicaOptions(o);
      out.push(o);
    }
  }
  return out;
}

/** The offline jobs of a config: one per policy (per P/D protocol, per replica setting). */
function offlineJobs(workload: Workload, cfg: ReplayConfig): OfflineJob[] {
  const engine = replayEngineOptions(cfg.engine, cfg.seed);
  const bucketMs = defaultBucketMs(workload);
  const topo = cfg.topology;
  const topologies: OfflineJob['topology'][] =
    topo.kind === 'aggregated'
      ? [{ kind: 'aggregated', workers: topo.workers }]
      : topo.protocols.map((protocol) => ({
          kind: 'disaggregated',
          prefillWorkers: topo.prefillWorkers,
          decodeWorkers: topo.decodeWorkers,
          protocol,
        }));
  const jobs: OfflineJob[] = [];
  for (const policy of cfg.policies) {
    for (const replicas of replicaVariants(cfg.replicas, policy.kind === 'kv')) {
      for (const topology of topologies)
        jobs.push({
          workload,
          policy,
          topology,
          engine,
          seed: cfg.seed,
          bucketMs,
          replicas,
          ...(cfg.sessionPriority === true ? { sessionPriority: true } : {}),
          ...(cfg.sessionPins === true ? { sessionPins: true } : {}),
        });
    }
  }
  return jobs;
}

/** The compiled worker entry next to this module, when there is one (not under a TS test runner). */
function workerEntry(): URL | undefined {
  const url = new URL('./offline-worker.js', import.meta.url);
  return existsSync(fileURLToPath(url)) ? url : undefined;
}

function runInWorker(entry: URL, job: OfflineJob, onProgress: (done: number) => void): Promise<PolicyRun> {
  return new Promise((resolve, reject) => {
    // A larger young generation: the simulation allocates many short-lived objects (about 15 % faster
    // than V8's default on the shared trace, for ~0.3 GB more memory per worker).
    const worker = new Worker(entry, { workerData: job, resourceLimits: { maxYoungGenerationSizeMb: 256 } });
    let settled = false;
    worker.on('message', (m: OfflineWorkerMessage) => {
      if (m.type === 'progress') onProgress(m.done);
      else if (m.type === 'done') {
        settled = true;
        resolve(m.run);
      } else {
        settled = true;
        reject(
          new KvgateError((m.code as 'KVG_ERR_INVALID_ARGUMENT' | undefined) ?? 'KVG_ERR_INVALID_ARGUMENT', m.message),
        );
      }
    });
    worker.on('error', (err) => {
      if (!settled) reject(err);
      settled = true;
    });
    worker.on('exit', (code) => {
      if (!settled) reject(new Error(`offline replay worker exited with code ${code}`));
    });
  });
}

/** Runs jobs, at most `parallel` at once (worker threads when available), results in job order. */
async function runOfflineJobs(
  jobs: readonly OfflineJob[],
  parallel: number,
  onProgress?: (done: number, total: number) => void,
): Promise<PolicyRun[]> {
  const perJob = jobs.map(() => 0);
  const total = jobs.reduce((s, j) => s + j.workload.requests.length, 0);
  const report = (i: number, done: number): void => {
    perJob[i] = done;
    onProgress?.(
      perJob.reduce((s, v) => s + v, 0),
      total,
    );
  };
  const entry = parallel > 1 && jobs.length > 1 ? workerEntry() : undefined;
  const results: PolicyRun[] = new Array<PolicyRun>(jobs.length);
  if (entry === undefined) {
    for (let i = 0; i < jobs.length; i++) results[i] = await runOfflineJob(jobs[i]!, (d) => report(i, d));
    return results;
  }
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < jobs.length) {
      const i = next++;
      results[i] = await runInWorker(entry, jobs[i]!, (d) => report(i, d));
    }
  };
  await Promise.all(Array.from({ length: Math.min(parallel, jobs.length) }, lane));
  return results;
}

/**
 * The infinite-cache bound over time: each request's reusable tokens over its prompt tokens, in
 * the same buckets and sliding window as the engines' hits (by arrival), as [s, rate].
 */
function boundOverTime(workload: Workload, reusable: readonly number[]): [number, number][] {
  const t = new HitTimeline(defaultBucketMs(workload));
  for (const r of workload.requests) t.record(r.arrivalMs, r.inputLength, reusable[r.index]!);
  return t.windowed().map(([ms, rate]) => [round(ms / 1000), round(rate)]);
}

/** The resolved configuration as result files record it. */
function configSummary(cfg: ReplayConfig, workload: Workload, engine: MockerInput): Record<string, unknown> {
  const topo =
    cfg.topology.kind === 'aggregated'
      ? `${cfg.topology.workers} aggregated engines`
      : `${cfg.topology.prefillWorkers} prefill + ${cfg.topology.decodeWorkers} decode engines (${cfg.topology.protocols.join(', ')})`;
  return {
    mode: cfg.mode,
    topology: topo,
    trace: cfg.trace,
    trace_block_size: cfg.traceBlockSize,
    strict: cfg.strict,
    workload: {
      arrival: workload.arrival,
      speedup: workload.speedup,
      skip_requests: cfg.workload.skipRequests ?? 0,
      max_requests: cfg.workload.maxRequests ?? null,
      max_isl: cfg.workload.maxIsl ?? null,
    },
    policies: cfg.policies.map((p) => (p.kind === 'kv' ? { name: p.name, router_config: p.dynamo } : { name: p.name })),
    engine: engineSummary(engine),
    session_priority: cfg.sessionPriority === true,
    session_pins: cfg.sessionPins === true,
    jobs: cfg.jobs,
    replicas:
      cfg.replicas === undefined
        ? null
        : {
            counts: cfg.replicas.counts,
            sync: cfg.replicas.sync,
            sync_delay_ms: cfg.replicas.syncDelayMs,
            front: cfg.replicas.front,
          },
  };
}

/**
 * The trace file, read and validated (its bytes are kept for the report's checksum).
 * @throws KvgateError KVG_ERR_INVALID_TRACE when it cannot be read, is empty, or is strict with bad lines.
 */
function readTrace(cfg: ReplayConfig): { bytes: Buffer; trace: LoadedTrace } {
  let bytes: Buffer;
  try {
    bytes = readFileSync(cfg.trace);
  } catch (err) {
    throw new KvgateError(
      'KVG_ERR_INVALID_TRACE',
      `cannot read trace ${cfg.trace}: ${err instanceof Error ? err.message : String(err)}`,
      { source: cfg.trace },
    );
  }
  const trace = parseTrace(bytes.toString('utf8'), {
    traceBlockSize: cfg.traceBlockSize,
    strict: cfg.strict,
    source: cfg.trace,
  });
  return { bytes, trace };
}

/** The workload: generated (agentic: its options stand in for the trace's bytes) or read from the trace. */
function loadWorkload(cfg: ReplayConfig): { bytes: Buffer; trace: LoadedTrace; workload: Workload } {
  if (cfg.agentic !== undefined) {
    const opts = { ...cfg.agentic, traceBlockSize: cfg.traceBlockSize };
    const workload = agenticWorkload(opts);
    const trace = { records: [], issues: [], linesRead: 0, traceBlockSize: cfg.traceBlockSize };
    return { bytes: Buffer.from(JSON.stringify(opts)), trace, workload };
  }
  const { bytes, trace } = readTrace(cfg);
  return { bytes, trace, workload: buildWorkload(trace, cfg.workload) };
}

/**
 * Every policy's run over the workload: offline as jobs (in worker threads when `jobs` > 1), online
 * through the hooks' runner, reporting progress through the hooks.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for router replicas or Dynamo's P/D order online, or online without a runner.
 */
async function runPolicies(workload: Workload, cfg: ReplayConfig, hooks: ReplayHooks): Promise<PolicyRun[]> {
  if (cfg.mode === 'online' && cfg.replicas?.counts.some((n) => n !== 1) === true) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      'replicas.counts: router replicas are modelled offline only (--mode offline)',
      { field: 'replicas.counts' },
    );
  }
  const ordered = cfg.policies.find((p) => p.disaggOrder !== undefined);
  if (cfg.mode === 'online' && ordered !== undefined) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `policy ${ordered.name}: the gateway books the decode slot first; Dynamo's P/D order is modelled offline only (--mode offline)`,
    );
  }
  const label = `${cfg.mode} replay`;
  const onProgress = (done: number, total: number): void => hooks.onProgress?.(label, done, total);
  if (cfg.mode === 'offline') return runOfflineJobs(offlineJobs(workload, cfg), cfg.jobs, onProgress);
  if (hooks.runOnline === undefined)
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      'online replay needs a runner that can start engines and the gateway',
    );
  return hooks.runOnline(workload, cfg, onProgress);
}

/**
 * Runs a replay end to end.
 * @throws KvgateError KVG_ERR_INVALID_TRACE (unreadable, empty, or strict with bad lines),
 *   KVG_ERR_INVALID_ARGUMENT / KVG_ERR_INVALID_CONFIG for invalid options.
 */
export async function runReplay(cfg: ReplayConfig, hooks: ReplayHooks): Promise<ReplayResult> {
  const { bytes, trace, workload } = loadWorkload(cfg);
  const engine = replayEngineOptions(cfg.engine, cfg.seed);
  const blockSize = engine.blockSize ?? MOCKER_DEFAULTS.blockSize;
  const bound = hitRateBound(workload.requests, workload.traceBlockSize, blockSize);
  const cacheEngines = cfg.topology.kind === 'aggregated' ? cfg.topology.workers : cfg.topology.prefillWorkers;
  const capacityTokens = cacheEngines * (engine.numGpuBlocks ?? MOCKER_DEFAULTS.numGpuBlocks) * blockSize;
  const pooled = pooledLruHitRate(workload.requests, workload.traceBlockSize, blockSize, capacityTokens);

  const runs = await runPolicies(workload, cfg, hooks);
  const policies: Record<string, PolicySummary> = {};
  const follows = (index: number): number | undefined => {
    const after = workload.requests[index]?.after?.requests;
    return after?.length === 1 ? after[0] : undefined;
  };
  for (const run of runs) policies[run.name] = summarizePolicy(run, bound.tokens, follows);
  const report: ReplayReport = {
    meta: {
      command: hooks.command,
      kvgate_version: kvgateVersion(),
      seed: cfg.seed,
      config: configSummary(cfg, workload, engine),
      machine: machineInfo(),
      started_at: new Date().toISOString(),
    },
    workload: {
      trace: cfg.trace,
      trace_sha256: sha256(bytes),
      lines_read: trace.linesRead,
      invalid_lines: trace.issues.length,
      invalid_line_messages: trace.issues.slice(0, MAX_INVALID_LISTED).map((i) => i.message),
      requests: workload.requests.length,
      dropped_by_max_requests: workload.droppedByMaxRequests,
      arrival: workload.arrival,
      speedup: workload.speedup,
      span_s: round(workload.spanMs / 1000),
      request_rate_per_s: round(workload.spanMs > 0 ? workload.requests.length / (workload.spanMs / 1000) : 0),
      max_isl: workload.capping.maxIsl,
      requests_capped: workload.capping.requestsCapped,
      tokens_removed_by_cap: workload.capping.tokensRemoved,
      trace_block_size: workload.traceBlockSize,
      engine_block_size: blockSize,
      hit_rate_bound: round(bound.tokens),
      hit_rate_bound_over_time: boundOverTime(workload, bound.reusableTokensPerRequest),
      hit_rate_bound_trace_blocks: round(bound.traceBlocks),
      pooled_lru_hit_rate: round(pooled),
    },
    policies,
  };
  return { report, runs, trace, workload };
}
