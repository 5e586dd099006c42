/**
 * Where a run's time to first token goes. On a busy fleet the mean TTFT is made by a few requests: on the
 * agentic workload with more sessions than the engines' KV holds, the slowest tenth of the turns carried about
 * four fifths of the summed TTFT. So the completed requests are ranked by TTFT, slowest first, and cut into
 * bands: the slowest 1 %, the next 9 %, the other 90 %. Each band says what share of the summed TTFT it holds and
 * what its requests had in common: how long they waited for an engine to admit them, how much of their prompt
 * the engine had to compute, how often they left the engine of the request they followed, and how much of the
 * cache the router predicted the engine no longer had when it admitted them.
 *
 * JSON (`--json`, per policy): `"ttft_bands": [{"band": "slowest 1 %", "requests", "ttft_share", "ttft_mean_ms",
 * "engine_wait_mean_ms", "prompt_tokens_mean", "uncached_tokens_mean", "moved_share",
 * "cache_shortfall_tokens_mean"}, ...]`; a figure no request of the band has is null.
 */
import type { RequestOutcome } from './results.js';

export interface TtftBand {
  readonly band: string;
  readonly requests: number;
  /** The band's share of the TTFT summed over every completed request. */
  readonly ttft_share: number | null;
  readonly ttft_mean_ms: number | null;
  /** Admission by the (prefill) engine minus arrival: the engine queue. Null where admissions are not recorded (online). */
  readonly engine_wait_mean_ms: number | null;
  readonly prompt_tokens_mean: number | null;
  /** Prompt tokens minus the engine-reported cached ones: what the engine computed. */
  readonly uncached_tokens_mean: number | null;
  /**
   * Of the band's requests that follow exactly one earlier request (a session's next turn, a subagent's first),
   * the share served by another engine than that request. Null where none does (open-loop traces).
   */
  readonly moved_share: number | null;
  /**
   * The router's predicted cached tokens minus the engine-reported ones, mean over the band's requests with a
   * prediction (kv policies): positive where the engine no longer held what the router counted on, such as a
   * context evicted while its request waited in the engine's queue.
   */
  readonly cache_shortfall_tokens_mean: number | null;
}

/** A completed request: no error, a first token and a finish (what `summarizePolicy` counts as completed too). */
export function isCompleted(o: RequestOutcome): boolean {
  return o.error === null && o.firstTokenMs !== null && o.finishMs !== null;
}

/** The bands' bounds, as shares of the requests ranked slowest first. */
const BANDS: readonly { readonly band: string; readonly from: number; readonly to: number }[] = [
  { band: 'slowest 1 %', from: 0, to: 0.01 },
  { band: 'next 9 %', from: 0.01, to: 0.1 },
  { band: 'other 90 %', from: 0.1, to: 1 },
];

/**
 * The bands of `outcomes` (completed requests only), which hold request `i`'s outcome at position `i`, as a
 * replay records them. `follows(index)` is the request that request `index` was sent after, where it follows
 * exactly one (closed-loop workloads), else undefined. `round` shapes each figure.
 */
export function ttftBands(
  outcomes: readonly RequestOutcome[],
  follows: (index: number) => number | undefined,
  round: (v: number) => number,
): TtftBand[] {
  const ttftOf = (o: RequestOutcome): number => o.firstTokenMs! - o.arrivalMs;
  const done = outcomes.filter(isCompleted);
  const ranked = done.map((o) => ({ o, ttft: ttftOf(o) })).sort((a, b) => b.ttft - a.ttft);
  const total = ranked.reduce((s, r) => s + r.ttft, 0);
  const n = ranked.length;
  return BANDS.map(({ band, from, to }) => {
    const rows = ranked.slice(Math.floor(from * n), Math.floor(to * n));
    const mean = (values: readonly number[]): number | null =>
      values.length === 0 ? null : round(values.reduce((s, v) => s + v, 0) / values.length);
    const sum = rows.reduce((s, r) => s + r.ttft, 0);
    let followers = 0;
    let moved = 0;
    for (const { o } of rows) {
      const prev = follows(o.index);
      const before = prev === undefined ? undefined : outcomes[prev];
      if (before === undefined || before.workerId === null || o.workerId === null) continue;
      followers++;
      if (before.workerId !== o.workerId) moved++;
    }
    const admitted = rows.filter((r) => r.o.admittedMs !== null);
    const reported = rows.filter((r) => r.o.cachedTokens !== null);
    const predicted = reported.filter((r) => r.o.predictedCachedTokens !== null);
    return {
      band,
      requests: rows.length,
      ttft_share: total > 0 && rows.length > 0 ? round(sum / total) : null,
      ttft_mean_ms: mean(rows.map((r) => r.ttft)),
      engine_wait_mean_ms: mean(admitted.map((r) => r.o.admittedMs! - r.o.arrivalMs)),
      prompt_tokens_mean: mean(rows.map((r) => r.o.promptTokens)),
      uncached_tokens_mean: mean(reported.map((r) => r.o.promptTokens - r.o.cachedTokens!)),
      moved_share: followers > 0 ? round(moved / followers) : null,
      cache_shortfall_tokens_mean: mean(predicted.map((r) => r.o.predictedCachedTokens! - r.o.cachedTokens!)),
    };
  });
}
