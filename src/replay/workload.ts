/**
 * From validated trace records to the requests a replay sends: arrival times
 * (as recorded, or spread evenly within runs of equal timestamps, divided by
 * the speedup), the slice (skip and count) and prompt-length caps (both
 * reported, never silent), and the trace's infinite-cache hit-rate bound.
 *
 * Capping a prompt at `maxIsl` keeps its leading blocks, so the prefix
 * structure of the trace survives; the bound is computed on the capped
 * workload, which is what the engines see.
 */
import type { SessionHint } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import type { LoadedTrace, TraceRecord } from './trace.js';

export type ArrivalMode = 'as-recorded' | 'spread';

export const ARRIVAL_MODES: readonly ArrivalMode[] = ['as-recorded', 'spread'];

/** One request of a replay. */
export interface ReplayRequest {
  /** 0-based position in the workload (the request id in results). */
  readonly index: number;
  /** Line of the trace it came from. */
  readonly line: number;
  /** Arrival in ms from the start of the replay (speedup applied). */
  readonly arrivalMs: number;
  readonly inputLength: number;
  readonly outputLength: number;
  /** Trace block ids covering `inputLength` (cut when capped). */
  readonly hashIds: readonly number[];
  /** The recorded input length when `maxIsl` cut this prompt. */
  readonly cappedFrom?: number;
  /**
   * Closed loop (generated workloads): sent `pauseMs` after the last of these requests (by index,
   * all earlier) ended; `arrivalMs` is then only a nominal time that orders the bounds.
   */
  readonly after?: { readonly requests: readonly number[]; readonly pauseMs: number };
  /**
   * Generated agent workloads: the session the request belongs to as its client names it (`x-session-id`, and a
   * subagent's `x-parent-session-id`); the replay pins it with `sessionPins` on.
   */
  readonly session?: SessionHint;
}

export interface WorkloadOptions {
  arrival?: ArrivalMode;
  /** Arrival times are divided by this (2 = twice the request rate). */
  speedup?: number;
  /** Leave out the first N valid records (replay a later slice; arrivals start at the first kept one). */
  skipRequests?: number;
  /** Keep only the first N valid records (after `skipRequests`). */
  maxRequests?: number;
  /** Cut prompts longer than this many tokens (keeping their leading blocks). */
  maxIsl?: number;
}

export interface Workload {
  readonly requests: readonly ReplayRequest[];
  readonly traceBlockSize: number;
  readonly arrival: ArrivalMode;
  readonly speedup: number;
  /** Arrival of the last request, ms. */
  readonly spanMs: number;
  /** Valid records left out by `skipRequests` and `maxRequests`. */
  readonly droppedByMaxRequests: number;
  readonly capping: {
    readonly maxIsl: number | null;
    readonly requestsCapped: number;
    readonly tokensRemoved: number;
  };
}

function positive(name: string, v: number | undefined, integer: boolean): void {
  if (v === undefined) return;
  if (!(v > 0) || !Number.isFinite(v) || (integer && !Number.isSafeInteger(v))) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `${name} must be a positive ${integer ? 'integer' : 'number'}, got ${v}`,
    );
  }
}

/**
 * Each request's root session start (ms), by index: a request sent after others (a turn, a subagent, a parent
 * resuming after its subagents) has the start of the first request it follows, which leads back to the session tree's
 * first request; a request that follows none (every trace request) starts its own. This is the engine `priority` a
 * router with session-start priority gives each request.
 */
export function sessionStarts(requests: readonly ReplayRequest[]): number[] {
  const starts: number[] = [];
  for (const r of requests) starts.push(r.after === undefined ? r.arrivalMs : starts[r.after.requests[0]!]!);
  return starts;
}

/**
 * Arrival offsets (ms, before speedup) for records in trace order. In
 * `spread` mode a run of n records sharing one timestamp t is placed at
 * t + i x w / n, where w is the gap to the next distinct timestamp (for the
 * last run, the median gap between distinct timestamps, or 0 if there is
 * only one).
 */
export function arrivalOffsets(records: readonly TraceRecord[], mode: ArrivalMode): number[] {
  const t0 = records.length > 0 ? records[0]!.timestampMs : 0;
  if (mode === 'as-recorded') return records.map((r) => r.timestampMs - t0);
  const runs: { start: number; count: number; ts: number }[] = [];
  for (let i = 0; i < records.length; i++) {
    const ts = records[i]!.timestampMs;
    const last = runs[runs.length - 1];
    if (last !== undefined && last.ts === ts) last.count++;
    else runs.push({ start: i, count: 1, ts });
  }
  const gaps = runs
    .slice(1)
    .map((r, k) => r.ts - runs[k]!.ts)
    .sort((a, b) => a - b);
  const medianGap = gaps.length === 0 ? 0 : gaps[Math.floor(gaps.length / 2)]!;
  const out = new Array<number>(records.length);
  for (let k = 0; k < runs.length; k++) {
    const run = runs[k]!;
    const width = k + 1 < runs.length ? runs[k + 1]!.ts - run.ts : medianGap;
    for (let i = 0; i < run.count; i++) out[run.start + i] = run.ts - t0 + (i * width) / run.count;
  }
  return out;
}

/**
 * Builds the replay workload from a loaded trace.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for a non-positive speedup, maxRequests or maxIsl.
 */
export function buildWorkload(trace: LoadedTrace, opts: WorkloadOptions = {}): Workload {
  const arrival = opts.arrival ?? 'as-recorded';
  if (!ARRIVAL_MODES.includes(arrival)) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `arrival mode must be one of ${ARRIVAL_MODES.join(', ')}, got ${String(arrival)}`,
    );
  }
  const speedup = opts.speedup ?? 1;
  positive('speedup', speedup, false);
  positive('maxRequests', opts.maxRequests, true);
  positive('maxIsl', opts.maxIsl, true);
  const skip = opts.skipRequests ?? 0;
  if (!Number.isSafeInteger(skip) || skip < 0)
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `skipRequests must be an integer >= 0, got ${skip}`);
  const kept = trace.records.slice(skip, opts.maxRequests === undefined ? undefined : skip + opts.maxRequests);
  if (kept.length === 0)
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `skipRequests ${skip} leaves none of the trace's ${trace.records.length} requests`,
    );
  const offsets = arrivalOffsets(kept, arrival);
  const bs = trace.traceBlockSize;
  const maxIsl = opts.maxIsl ?? null;
  let requestsCapped = 0;
  let tokensRemoved = 0;
  const requests: ReplayRequest[] = kept.map((r, index) => {
    const base = { index, line: r.line, arrivalMs: offsets[index]! / speedup, outputLength: r.outputLength };
    if (maxIsl === null || r.inputLength <= maxIsl) return { ...base, inputLength: r.inputLength, hashIds: r.hashIds };
    requestsCapped++;
    tokensRemoved += r.inputLength - maxIsl;
    return {
      ...base,
      inputLength: maxIsl,
      hashIds: r.hashIds.slice(0, Math.ceil(maxIsl / bs)),
      cappedFrom: r.inputLength,
    };
  });
  return {
    requests,
    traceBlockSize: bs,
    arrival,
    speedup,
    spanMs: requests.length > 0 ? requests[requests.length - 1]!.arrivalMs : 0,
    droppedByMaxRequests: trace.records.length - kept.length,
    capping: { maxIsl, requestsCapped, tokensRemoved },
  };
}

/**
 * A finite-cache reference (not a bound): the token hit rate of ONE
 * LRU-managed prefix cache with `capacityTokens` (all engines' caches pooled)
 * serving the workload in arrival order. Tracked per trace block (an id's
 * chunk is cached whole once any request held it), a request hits its leading
 * run of cached ids (rounded down to engine blocks), then every one of its
 * blocks becomes most recent. It ignores blocks pinned by running requests and
 * generated tokens, so a router spreading load over N separate caches lands
 * below it; it tells how much of the infinite-cache bound the cache size alone
 * rules out.
 */
export function pooledLruHitRate(
  requests: readonly ReplayRequest[],
  traceBlockSize: number,
  engineBlockSize: number,
  capacityTokens: number,
): number {
  positive('engineBlockSize', engineBlockSize, true);
  const capacity = Math.floor(capacityTokens / traceBlockSize);
  /** id -> tokens of its chunk held; Map order = recency (oldest first). */
  const lru = new Map<number, number>();
  let prompt = 0;
  let hit = 0;
  for (const r of requests) {
    prompt += r.inputLength;
    let prefix = 0;
    for (let j = 0; j < r.hashIds.length; j++) {
      const own = Math.min(traceBlockSize, r.inputLength - j * traceBlockSize);
      const had = lru.get(r.hashIds[j]!);
      if (had === undefined) break;
      prefix += Math.min(had, own);
      if (had < traceBlockSize) break;
    }
    hit += Math.floor(prefix / engineBlockSize) * engineBlockSize;
    for (let j = 0; j < r.hashIds.length; j++) {
      const id = r.hashIds[j]!;
      const own = Math.min(traceBlockSize, r.inputLength - j * traceBlockSize);
      const had = lru.get(id) ?? 0;
      lru.delete(id);
      lru.set(id, Math.max(had, own));
    }
    if (lru.size > capacity) {
      const it = lru.keys();
      while (lru.size > capacity) lru.delete(it.next().value!);
    }
  }
  return prompt === 0 ? 0 : hit / prompt;
}

/** The hit rate an infinitely large prefix cache shared by all engines would reach on a workload. */
export interface HitRateBound {
  /**
   * Prompt tokens an engine with block size `engineBlockSize` could have found
   * cached (leading full engine blocks already materialised by an earlier
   * request) over all prompt tokens. Directly comparable with an engine's
   * measured cached_tokens / prompt_tokens.
   */
  readonly tokens: number;
  /** Trace blocks already seen in an earlier request over all trace blocks (the trace README's figure). */
  readonly traceBlocks: number;
  /** Tokens of those trace blocks over all prompt tokens (the README's "by tokens"). */
  readonly traceTokens: number;
  readonly engineBlockSize: number;
  /**
   * Per request (by index), the prompt tokens counted in `tokens`: what an infinite cache could
   * have served it. Windowed like the engines' hits, it is the bound over time.
   */
  readonly reusableTokensPerRequest: readonly number[];
}

/**
 * Computes the infinite-cache bound in one pass over the requests in arrival
 * order, from block ids alone (no hashing): an id stands for its whole prefix,
 * so a request can reuse the leading run of ids seen before, up to the most
 * tokens of each chunk any earlier request materialised, cut to its own length
 * and rounded down to whole engine blocks.
 */
export function hitRateBound(
  requests: readonly ReplayRequest[],
  traceBlockSize: number,
  engineBlockSize: number,
): HitRateBound {
  positive('engineBlockSize', engineBlockSize, true);
  /** Most tokens of each chunk any earlier request held. */
  const materialised = new Map<number, number>();
  let promptTokens = 0;
  let reusableTokens = 0;
  let blocks = 0;
  let seenBlocks = 0;
  let seenBlockTokens = 0;
  const perRequest: number[] = [];
  for (const r of requests) {
    const ids = r.hashIds;
    promptTokens += r.inputLength;
    blocks += ids.length;
    let prefix = 0;
    let leading = true;
    for (let j = 0; j < ids.length; j++) {
      const own = Math.min(traceBlockSize, r.inputLength - j * traceBlockSize);
      const had = materialised.get(ids[j]!);
      if (had !== undefined) {
        seenBlocks++;
        seenBlockTokens += own;
      }
      if (leading) {
        if (had === undefined) leading = false;
        else {
          prefix += Math.min(had, own);
          if (had < traceBlockSize) leading = false;
        }
      }
    }
    const reusable = Math.floor(prefix / engineBlockSize) * engineBlockSize;
    perRequest.push(reusable);
    reusableTokens += reusable;
    for (let j = 0; j < ids.length; j++) {
      const own = Math.min(traceBlockSize, r.inputLength - j * traceBlockSize);
      const had = materialised.get(ids[j]!) ?? 0;
      if (own > had) materialised.set(ids[j]!, own);
    }
  }
  return {
    tokens: promptTokens === 0 ? 0 : reusableTokens / promptTokens,
    traceBlocks: blocks === 0 ? 0 : seenBlocks / blocks,
    traceTokens: promptTokens === 0 ? 0 : seenBlockTokens / promptTokens,
    engineBlockSize,
    reusableTokensPerRequest: perRequest,
  };
}
