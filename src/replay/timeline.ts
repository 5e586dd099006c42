/**
 * Per-engine load and prefix-hit accounting over time, for the load-balance
 * figures and the over-time charts.
 *
 * Load is a piecewise-constant value per engine (the replay uses in-flight
 * requests: queued, transferring or running). `set` records a change; the
 * timeline integrates each engine's value exactly (for its time-weighted
 * mean) and into fixed-width buckets (for charts and the instantaneous
 * max/mean ratio). Hits are summed per bucket by the time the engine reported
 * them.
 */

/** Buckets in the sliding windows of the replay's charts over time (hit rate, load imbalance). */
export const WINDOW_BUCKETS = 10;

export interface LoadSummary {
  /** Time-weighted mean load of each engine over [0, endMs]. */
  readonly perEngineMean: readonly number[];
  /**
   * Max over engines of their mean load, divided by the mean over engines:
   * 1 = perfectly even; 1.25 = the busiest engine carried 25 % more than average.
   */
  readonly imbalance: number;
  /** Time-weighted mean over buckets (with any load) of max/mean across engines within the bucket. */
  readonly imbalanceOverTime: number;
}

/** One bucket of a load timeline: its start and each engine's mean load over it. */
export interface LoadBucket {
  readonly startMs: number;
  readonly perEngine: readonly number[];
}

export class LoadTimeline {
  readonly bucketMs: number;
  readonly engines: number;
  readonly #value: Float64Array;
  readonly #since: Float64Array;
  readonly #area: Float64Array;
  /** buckets[b][e] = integral of engine e's load over bucket b. */
  readonly #buckets: Float64Array[] = [];
  #endMs = 0;

  constructor(engines: number, bucketMs: number) {
    if (!(bucketMs > 0)) throw new RangeError(`bucketMs must be > 0, got ${bucketMs}`);
    this.engines = engines;
    this.bucketMs = bucketMs;
    this.#value = new Float64Array(engines);
    this.#since = new Float64Array(engines);
    this.#area = new Float64Array(engines);
  }

  #bucket(b: number): Float64Array {
    while (this.#buckets.length <= b) this.#buckets.push(new Float64Array(this.engines));
    return this.#buckets[b]!;
  }

  /** Integrates engine e's current value from its last change up to `now`. */
  #accrue(e: number, now: number): void {
    const v = this.#value[e]!;
    let t = this.#since[e]!;
    if (now <= t) return;
    this.#area[e]! += v * (now - t);
    if (v !== 0) {
      while (t < now) {
        const b = Math.floor(t / this.bucketMs);
        const until = Math.min(now, (b + 1) * this.bucketMs);
        this.#bucket(b)[e]! += v * (until - t);
        t = until;
      }
    }
    this.#since[e] = now;
    if (now > this.#endMs) this.#endMs = now;
  }

  /** Engine e's load is `value` from `now` on. Times must not go backwards per engine. */
  set(e: number, now: number, value: number): void {
    this.#accrue(e, now);
    this.#since[e] = Math.max(this.#since[e]!, now);
    this.#value[e] = value;
  }

  /** Adds `delta` to engine e's load at `now`. */
  add(e: number, now: number, delta: number): void {
    this.set(e, now, this.#value[e]! + delta);
  }

  current(e: number): number {
    return this.#value[e]!;
  }

  /** Closes every engine's series at `endMs` and summarises. */
  finish(endMs: number): LoadSummary {
    for (let e = 0; e < this.engines; e++) this.#accrue(e, Math.max(endMs, this.#since[e]!));
    const end = Math.max(endMs, this.#endMs);
    const perEngineMean = Array.from(this.#area, (a) => (end > 0 ? a / end : 0));
    const mean = perEngineMean.reduce((s, v) => s + v, 0) / Math.max(1, this.engines);
    const imbalance = mean > 0 ? Math.max(...perEngineMean) / mean : 1;
    let weighted = 0;
    let weight = 0;
    for (const b of this.#buckets) {
      let sum = 0;
      let max = 0;
      for (const v of b) {
        sum += v;
        if (v > max) max = v;
      }
      if (sum <= 0) continue;
      const ratio = max / (sum / this.engines);
      weighted += ratio * sum;
      weight += sum;
    }
    return { perEngineMean, imbalance, imbalanceOverTime: weight > 0 ? weighted / weight : 1 };
  }

  /** Per bucket: [bucket start ms, mean load of each engine in the bucket]. Call after `finish`. */
  buckets(): LoadBucket[] {
    return this.#buckets.map((b, i) => ({
      startMs: i * this.bucketMs,
      perEngine: Array.from(b, (a) => a / this.bucketMs),
    }));
  }
}

/** Prompt and cached tokens per time bucket. */
export class HitTimeline {
  readonly bucketMs: number;
  readonly #prompt: number[] = [];
  readonly #cached: number[] = [];
  promptTokens = 0;
  cachedTokens = 0;

  constructor(bucketMs: number) {
    if (!(bucketMs > 0)) throw new RangeError(`bucketMs must be > 0, got ${bucketMs}`);
    this.bucketMs = bucketMs;
  }

  record(now: number, promptTokens: number, cachedTokens: number): void {
    const b = Math.max(0, Math.floor(now / this.bucketMs));
    while (this.#prompt.length <= b) {
      this.#prompt.push(0);
      this.#cached.push(0);
    }
    this.#prompt[b]! += promptTokens;
    this.#cached[b]! += cachedTokens;
    this.promptTokens += promptTokens;
    this.cachedTokens += cachedTokens;
  }

  get hitRate(): number {
    return this.promptTokens > 0 ? this.cachedTokens / this.promptTokens : 0;
  }

  /**
   * Hit rate over a sliding window of `windowBuckets` buckets ending at each
   * bucket (smooths the few-requests-per-bucket noise): [bucket end ms, rate].
   */
  windowed(windowBuckets = WINDOW_BUCKETS): [number, number][] {
    const out: [number, number][] = [];
    let p = 0;
    let c = 0;
    for (let b = 0; b < this.#prompt.length; b++) {
      p += this.#prompt[b]!;
      c += this.#cached[b]!;
      if (b >= windowBuckets) {
        p -= this.#prompt[b - windowBuckets]!;
        c -= this.#cached[b - windowBuckets]!;
      }
      if (p > 0) out.push([(b + 1) * this.bucketMs, c / p]);
    }
    return out;
  }
}

/**
 * Load imbalance over a sliding window of `windowBuckets` buckets ending at each bucket: [bucket end ms, busiest
 * engine's mean / mean over engines], NaN (a gap in the chart) where the fleet is not loaded. Loaded means the
 * engines average at least half of their mean load over the run's busy span (and at least half a request): max/mean
 * is bounded only by the engine count and reaches it whenever a few requests remain, so in the drain after the last
 * arrival (the backlog finishing on whichever engines hold it) it jumps to the engine count and would set the y
 * axis, while saying nothing of how the router balanced the load it was given. A threshold relative to the run's
 * own load, rather than a fixed one, keeps light and overloaded runs alike to their loaded span.
 */
export function windowedImbalance(
  buckets: readonly LoadBucket[],
  bucketMs: number,
  windowBuckets = WINDOW_BUCKETS,
): [number, number][] {
  const n = buckets[0]?.perEngine.length ?? 0;
  if (n === 0) return [];
  const totals = buckets.map((b) => b.perEngine.reduce((s, v) => s + v, 0));
  const first = totals.findIndex((t) => t > 0);
  const last = totals.findLastIndex((t) => t > 0);
  const runMean = first < 0 ? 0 : totals.slice(first, last + 1).reduce((s, t) => s + t, 0) / (last - first + 1) / n;
  const floor = Math.max(0.5, runMean / 2);
  const acc = new Float64Array(n);
  return buckets.map((b, i) => {
    for (let e = 0; e < n; e++) acc[e]! += b.perEngine[e]!;
    if (i >= windowBuckets) for (let e = 0; e < n; e++) acc[e]! -= buckets[i - windowBuckets]!.perEngine[e]!;
    const width = Math.min(i + 1, windowBuckets);
    const mean = acc.reduce((s, v) => s + v, 0) / n / width;
    const end = (b.startMs + bucketMs) / 1000;
    return [end, mean >= floor ? Math.max(...acc) / width / mean : Number.NaN];
  });
}
