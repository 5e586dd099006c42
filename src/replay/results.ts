/**
 * What a replay measured, per request and per policy, and its summary in the
 * shape scripts read (`--json`):
 *
 *   {"policies": {"<name>": {"ttft_ms": {"mean", "p50", "p90", "p99"}, "itl_ms": {...},
 *     "e2e_ms": {...}, "throughput_tok_s", "requests_per_s", "hit_rate", "hit_rate_bound",
 *     "load_imbalance", "prediction_error", ...}}, "meta": {...}}
 *
 * Definitions (offline: virtual ms; online: ms at the client):
 * - TTFT = first generated token - arrival; E2E = last token - arrival;
 *   ITL of a request = (E2E - TTFT) / (output tokens - 1), for requests with
 *   at least 2 output tokens; distributions are over requests.
 * - throughput = output tokens / (last finish - first arrival); requests/s the same over completed requests.
 * - hit rate = engine-reported cached prompt tokens / prompt tokens (prefill engines in P/D).
 * - hit_rate_bound = the workload's infinite-cache bound at the engines' block size (workload.ts).
 * - load imbalance = max over engines of their time-averaged in-flight requests / mean over engines (timeline.ts).
 * - prediction error = router-predicted cached tokens (overlap x block size) - engine-reported cached tokens, kv policies only.
 * - TTFT bands = the completed requests ranked by TTFT, cut into the slowest 1 %, the next 9 % and the rest, and what
 *   each band's requests had in common (ttft-bands.ts).
 */
import { distribution, type Distribution } from './stats.js';
import type { LoadBucket, LoadSummary } from './timeline.js';
import { isCompleted, ttftBands, type TtftBand } from './ttft-bands.js';

/** One request's life in a replay. Times are ms from the start of the replay. */
export interface RequestOutcome {
  readonly index: number;
  /** Offline: the trace arrival; online: when the request was actually sent. */
  arrivalMs: number;
  readonly promptTokens: number;
  readonly expectedOutputTokens: number;
  outputTokens: number;
  firstTokenMs: number | null;
  finishMs: number | null;
  /** The (prefill) engine first scheduled the request; admitted - arrival is its engine queue wait. */
  admittedMs: number | null;
  /** Engine-reported prompt tokens served from its prefix cache (prefill engine in P/D). */
  cachedTokens: number | null;
  /** The router's predicted overlap in tokens (kv policies), else null. */
  predictedCachedTokens: number | null;
  /** Aggregated: the engine; P/D: the decode engine. */
  workerId: number | null;
  prefillWorkerId: number | null;
  error: string | null;
  /** P/D: the prefill leg finished (its response reached the router). */
  prefillDoneMs: number | null;
  /** P/D: the decode leg was handed to its engine. */
  decodeStartMs: number | null;
  /** P/D: the timing model's KV transfer time for this request (uncached tokens on the decode engine x bytes per token / bandwidth). */
  transferEstimateMs: number | null;
}

export function newOutcome(
  index: number,
  arrivalMs: number,
  promptTokens: number,
  expectedOutputTokens: number,
): RequestOutcome {
  return {
    index,
    arrivalMs,
    promptTokens,
    expectedOutputTokens,
    outputTokens: 0,
    firstTokenMs: null,
    finishMs: null,
    admittedMs: null,
    cachedTokens: null,
    predictedCachedTokens: null,
    workerId: null,
    prefillWorkerId: null,
    error: null,
    prefillDoneMs: null,
    decodeStartMs: null,
    transferEstimateMs: null,
  };
}

/** A pool of engines whose load is balanced together (all engines, or the prefill / decode pools). */
export interface PoolRun {
  readonly name: 'engines' | 'prefill' | 'decode';
  readonly workerIds: readonly number[];
  readonly load: LoadSummary;
  /** In-flight requests per engine, averaged over fixed buckets of `bucketMs`. */
  readonly buckets: readonly LoadBucket[];
  readonly bucketMs: number;
  /** The pool's prefix index (a kv policy's, offline); absent for other policies and online runs. */
  readonly index?: IndexUse | undefined;
}

/**
 * What a kv policy's prefix index held over a run (offline), with a hybrid model's KV-cache group indexes and the
 * storage tiers beside it: what an operator sizes `router_index_memory_budget_mib` from. With router replicas, the
 * largest replica's peak (each holds its own index, under its own budget) and the evictions of all of them.
 */
export interface IndexUse {
  /** The budget the index was held to (bytes), or null without one. */
  readonly budgetBytes: number | null;
  /** The most bytes the indexes held together, read each virtual second and at the end. */
  readonly peakBytes: number;
  /** (block, slot) entries evicted under the budget. */
  readonly evictedEntries: number;
}

/** Engine-reported prefix hits of a run. */
export interface HitSummary {
  readonly promptTokens: number;
  readonly cachedTokens: number;
  /** [ms, hit rate over a sliding window ending there]. */
  readonly overTime: readonly (readonly [number, number])[];
}

/**
 * Everything one policy's run produced; input to `summarizePolicy` and the
 * charts. Plain data (structured-cloneable), so runs can come back from
 * worker threads.
 */
export interface PolicyRun {
  readonly name: string;
  readonly outcomes: readonly RequestOutcome[];
  /** Last event of the run, ms. */
  readonly endMs: number;
  readonly pools: readonly PoolRun[];
  readonly hits: HitSummary;
  /** Wall-clock time the run took, ms. */
  readonly wallMs: number;
  /** Engine preemptions (recomputations under memory pressure), summed over engines; null when unknown (online). */
  readonly preemptions: number | null;
  /** Steps whose timing was extrapolated beyond a measured GPU profile, summed; null when unknown. */
  readonly extrapolatedSteps: number | null;
  /** P/D: prefill leases that expired before the decode engine pulled the KV; null when aggregated. */
  readonly leaseExpired: number | null;
  /** Fraction of the run the engines spent computing steps (mean over engines); null when unknown. */
  readonly engineBusyFraction: number | null;
  /** Online: the router's prediction error as the gateway's metrics counted it (the client cannot see predictions). */
  readonly predictionFromGateway?: PredictionFromGateway | null;
  /** Offline: the router replicas the run had (one, unless `--replicas`). */
  readonly replicas?: ReplicaRun;
}

export interface ReplicaRun {
  readonly count: number;
  /** Peers' bookings were applied (kv policies with more than one replica). */
  readonly sync: boolean;
  readonly syncDelayMs: number;
  readonly front: string;
  /** Booking changes applied to peers, summed over receiving replicas. */
  readonly syncDeliveries: number;
}

export interface PredictionFromGateway {
  readonly requests: number;
  readonly exact_fraction: number;
  readonly mean_signed_tokens: number | null;
}

export interface Percentiles {
  mean: number | null;
  p50: number | null;
  p90: number | null;
  p99: number | null;
}

export interface LegSummary {
  prefill_ms: Percentiles;
  prefill_queue_ms: Percentiles;
  kv_transfer_estimated_ms: Percentiles;
  /**
   * Prefill done -> first decode token (Dynamo's kv_transfer_estimated_latency: transfer + decode queue + last prompt
   * token). The decode leg starts when its prefill is done, so this is also the decode leg's own time to first token.
   */
  prefill_done_to_first_token_ms: Percentiles;
  prefill_hit_rate: number;
  prefill_load_imbalance: number;
  decode_load_imbalance: number;
  kv_lease_expired: number;
}

export interface PolicySummary {
  requests: { total: number; completed: number; failed: number };
  ttft_ms: Percentiles;
  itl_ms: Percentiles;
  e2e_ms: Percentiles;
  throughput_tok_s: number;
  requests_per_s: number;
  duration_s: number;
  output_tokens: number;
  hit_rate: number;
  hit_rate_bound: number;
  /** hit_rate / hit_rate_bound. */
  hit_rate_vs_bound: number;
  load_imbalance: number;
  load_imbalance_over_time: number;
  /** Each engine's time-averaged in-flight requests, by worker id. */
  engine_mean_load: Record<string, number>;
  /** Predicted minus engine-reported cached tokens; online, from the gateway's metrics (no per-request absolute error). */
  prediction_error: {
    requests: number;
    mean_abs_tokens: number | null;
    mean_signed_tokens: number | null;
    exact_fraction: number;
  } | null;
  preemptions: number | null;
  extrapolated_steps: number | null;
  /** Mean over engines of the fraction of the run spent computing (offline only). */
  engine_busy_fraction: number | null;
  wall_s: number;
  /** Router replicas: how many, whether they synced their bookings, the sync delay and the front door. */
  replicas: {
    count: number;
    sync: boolean;
    sync_delay_ms: number | null;
    front: string | null;
    sync_deliveries: number;
  };
  /** Each pool's prefix index under a kv policy, offline (`IndexUse`); empty otherwise. */
  prefix_index: { pool: string; budget_bytes: number | null; peak_bytes: number; evicted_entries: number }[];
  /** Where the TTFT goes: the slowest 1 %, the next 9 % and the other 90 % of the completed requests (ttft-bands.ts). */
  ttft_bands: TtftBand[];
  legs?: LegSummary;
  /** First few failures (message with request index). */
  errors?: string[];
}

function nullable(v: number): number | null {
  return Number.isFinite(v) ? round(v) : null;
}

/** Rounds to 4 significant decimals so JSON stays readable and byte-stable. */
export function round(v: number): number {
  if (!Number.isFinite(v)) return v;
  const a = Math.abs(v);
  const digits = a >= 100 ? 2 : a >= 1 ? 3 : 4;
  return Number(v.toFixed(digits));
}

function percentiles(d: Distribution): Percentiles {
  return { mean: nullable(d.mean), p50: nullable(d.p50), p90: nullable(d.p90), p99: nullable(d.p99) };
}

const MAX_ERRORS_LISTED = 10;

function replicaSummary(r: ReplicaRun | undefined): PolicySummary['replicas'] {
  if (r === undefined || r.count === 1)
    return { count: 1, sync: false, sync_delay_ms: null, front: null, sync_deliveries: 0 };
  return {
    count: r.count,
    sync: r.sync,
    sync_delay_ms: r.sync ? r.syncDelayMs : null,
    front: r.front,
    sync_deliveries: r.syncDeliveries,
  };
}

/**
 * The router's predicted cached tokens against what the engine reported, over the requests that have
 * both (offline, every routed one); online, the gateway's own figures when it reports them; else null.
 */
function predictionError(run: PolicyRun): PolicySummary['prediction_error'] {
  const predicted = run.outcomes.filter((o) => o.predictedCachedTokens !== null && o.cachedTokens !== null);
  if (predicted.length > 0) {
    let abs = 0;
    let signed = 0;
    let exact = 0;
    for (const o of predicted) {
      const d = o.predictedCachedTokens! - o.cachedTokens!;
      abs += Math.abs(d);
      signed += d;
      if (d === 0) exact++;
    }
    return {
      requests: predicted.length,
      mean_abs_tokens: round(abs / predicted.length),
      mean_signed_tokens: round(signed / predicted.length),
      exact_fraction: round(exact / predicted.length),
    };
  }
  if (run.predictionFromGateway !== undefined && run.predictionFromGateway !== null)
    return { ...run.predictionFromGateway, mean_abs_tokens: null };
  return null;
}

/**
 * Per-leg figures of a disaggregated run (undefined unless it has a prefill and a decode pool),
 * over the completed requests whose both legs ran. The prompt is computed on the prefill leg, so
 * the run's hit rate is the prefill hit rate.
 */
function legSummary(run: PolicyRun, ok: readonly RequestOutcome[], hitRate: number): LegSummary | undefined {
  const prefillPool = run.pools.find((p) => p.name === 'prefill');
  const decodePool = run.pools.find((p) => p.name === 'decode');
  if (prefillPool === undefined || decodePool === undefined) return undefined;
  const legs = ok.filter((o) => o.prefillDoneMs !== null && o.decodeStartMs !== null);
  return {
    prefill_ms: percentiles(distribution(legs.map((o) => o.prefillDoneMs! - o.arrivalMs))),
    prefill_queue_ms: percentiles(
      distribution(legs.filter((o) => o.admittedMs !== null).map((o) => o.admittedMs! - o.arrivalMs)),
    ),
    kv_transfer_estimated_ms: percentiles(
      distribution(legs.filter((o) => o.transferEstimateMs !== null).map((o) => o.transferEstimateMs!)),
    ),
    prefill_done_to_first_token_ms: percentiles(distribution(legs.map((o) => o.firstTokenMs! - o.prefillDoneMs!))),
    prefill_hit_rate: round(hitRate),
    prefill_load_imbalance: round(prefillPool.load.imbalance),
    decode_load_imbalance: round(decodePool.load.imbalance),
    kv_lease_expired: run.leaseExpired ?? 0,
  };
}

/**
 * Summarises one policy's run against the workload's hit-rate bound. `follows(index)`: the request that request
 * `index` was sent after, where it follows exactly one (closed-loop workloads; none by default).
 */
export function summarizePolicy(
  run: PolicyRun,
  hitRateBound: number,
  follows: (index: number) => number | undefined = () => undefined,
): PolicySummary {
  const ok = run.outcomes.filter(isCompleted);
  const failed = run.outcomes.filter((o) => o.error !== null);
  const ttft = ok.map((o) => o.firstTokenMs! - o.arrivalMs);
  const e2e = ok.map((o) => o.finishMs! - o.arrivalMs);
  const itl = ok.filter((o) => o.outputTokens >= 2).map((o) => (o.finishMs! - o.firstTokenMs!) / (o.outputTokens - 1));
  const outputTokens = ok.reduce((s, o) => s + o.outputTokens, 0);
  const firstArrival = run.outcomes.length > 0 ? Math.min(...run.outcomes.map((o) => o.arrivalMs)) : 0;
  const lastFinish = ok.length > 0 ? Math.max(...ok.map((o) => o.finishMs!)) : firstArrival;
  const spanS = Math.max(1e-9, (lastFinish - firstArrival) / 1000);
  const engineMeanLoad: Record<string, number> = {};
  for (const pool of run.pools)
    pool.workerIds.forEach((w, i) => {
      engineMeanLoad[String(w)] = round(pool.load.perEngineMean[i]!);
    });
  const hitRate = run.hits.promptTokens > 0 ? run.hits.cachedTokens / run.hits.promptTokens : 0;
  const summary: PolicySummary = {
    requests: { total: run.outcomes.length, completed: ok.length, failed: failed.length },
    ttft_ms: percentiles(distribution(ttft)),
    itl_ms: percentiles(distribution(itl)),
    e2e_ms: percentiles(distribution(e2e)),
    throughput_tok_s: round(outputTokens / spanS),
    requests_per_s: round(ok.length / spanS),
    duration_s: round(spanS),
    output_tokens: outputTokens,
    hit_rate: round(hitRate),
    hit_rate_bound: round(hitRateBound),
    hit_rate_vs_bound: round(hitRateBound > 0 ? hitRate / hitRateBound : 0),
    load_imbalance: round(Math.max(...run.pools.map((p) => p.load.imbalance))),
    load_imbalance_over_time: round(Math.max(...run.pools.map((p) => p.load.imbalanceOverTime))),
    engine_mean_load: engineMeanLoad,
    prediction_error: predictionError(run),
    preemptions: run.preemptions,
    extrapolated_steps: run.extrapolatedSteps,
    engine_busy_fraction: run.engineBusyFraction === null ? null : round(run.engineBusyFraction),
    wall_s: round(run.wallMs / 1000),
    replicas: replicaSummary(run.replicas),
    prefix_index: run.pools.flatMap((pool) =>
      pool.index === undefined
        ? []
        : [
            {
              pool: pool.name,
              budget_bytes: pool.index.budgetBytes,
              peak_bytes: pool.index.peakBytes,
              evicted_entries: pool.index.evictedEntries,
            },
          ],
    ),
    ttft_bands: ttftBands(run.outcomes, follows, round),
  };
  const legs = legSummary(run, ok, hitRate);
  if (legs !== undefined) summary.legs = legs;
  if (failed.length > 0)
    summary.errors = failed.slice(0, MAX_ERRORS_LISTED).map((o) => `request ${o.index}: ${o.error!}`);
  return summary;
}
