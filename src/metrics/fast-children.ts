/**
 * Labelled children of prom-client metrics that do not hash their labels on
 * every observation. prom-client's own children (`metric.labels(...)`) keep
 * the label object and, on each `observe` / `inc`, validate and hash it
 * again and find the bucket's key by number-to-string conversion: about
 * 0.6 µs per histogram observation, a dozen of them per request.
 *
 * A fast child finds its series' entry once and then updates it in place,
 * exactly as prom-client's `observe` / `inc` would (same sum, count and
 * bucket, so `/metrics` reads the same). It relies on prom-client's per-metric
 * `hashMap` of `{ labels, value }` / `{ labels, bucketValues, sum, count }`
 * entries (pinned version; test/metrics/fast-children.test.ts compares the
 * exposition with prom-client's own children), and falls back to
 * prom-client's path whenever the entry is not the one it found (the series
 * was removed or the metric reset), finding it again afterwards.
 */
import type { Counter, Histogram, LabelValues } from 'prom-client';

interface HistogramEntry {
  labels: object;
  bucketValues: Record<string, number>;
  sum: number;
  count: number;
}
interface CounterEntry {
  labels: object;
  value: number;
}
type Internals<E> = { hashMap: Record<string, E> };

function sameLabels(a: object, b: LabelValues<string>): boolean {
  const x = a as Record<string, unknown>;
  const keys = Object.keys(b);
  if (Object.keys(x).length !== keys.length) return false;
  for (const k of keys) if (String(x[k]) !== String(b[k])) return false;
  return true;
}

/** The key and entry of the series `labels` in a metric's hashMap, or undefined when it has none. */
function locate<E extends { labels: object }>(map: Record<string, E>, labels: LabelValues<string>): string | undefined {
  for (const key of Object.keys(map)) if (sameLabels(map[key]!.labels, labels)) return key;
  return undefined;
}

/** One series of a histogram, observed without label hashing. */
export class FastHistogramChild {
  readonly #h: Histogram<string>;
  readonly #labels: LabelValues<string>;
  readonly #bounds: readonly number[];
  /** The bucket keys as prom-client's entries spell them (property keys of the bounds). */
  readonly #keys: readonly string[];
  #map: Record<string, HistogramEntry> | undefined;
  #key: string | undefined;

  constructor(h: Histogram<string>, labels: LabelValues<string>) {
    this.#h = h;
    this.#labels = { ...labels };
    this.#bounds = (h as unknown as { upperBounds: number[] }).upperBounds;
    this.#keys = this.#bounds.map((b) => String(b));
    // Not created here: a series that does not exist yet is created by the first observation.
    this.#find();
  }

  observe(value: number): void {
    const map = (this.#h as unknown as Internals<HistogramEntry>).hashMap;
    const entry = map === this.#map && this.#key !== undefined ? map[this.#key] : undefined;
    if (entry === undefined || !Number.isFinite(value)) {
      // Removed, reset or an invalid value: prom-client's own path (which recreates the series or throws).
      this.#h.observe(this.#labels, value);
      this.#find();
      return;
    }
    entry.sum += value;
    entry.count += 1;
    const bounds = this.#bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        entry.bucketValues[this.#keys[i]!]! += 1;
        return;
      }
    }
  }

  #find(): void {
    this.#map = (this.#h as unknown as Internals<HistogramEntry>).hashMap;
    this.#key = locate(this.#map, this.#labels);
  }
}

/** One series of a counter, incremented without label hashing. */
export class FastCounterChild {
  readonly #c: Counter<string>;
  readonly #labels: LabelValues<string>;
  #map: Record<string, CounterEntry> | undefined;
  #key: string | undefined;

  constructor(c: Counter<string>, labels: LabelValues<string>) {
    this.#c = c;
    this.#labels = { ...labels };
    this.#find();
  }

  inc(by = 1): void {
    const map = (this.#c as unknown as Internals<CounterEntry>).hashMap;
    const entry = map === this.#map && this.#key !== undefined ? map[this.#key] : undefined;
    if (entry === undefined || !Number.isFinite(by) || by < 0) {
      this.#c.inc(this.#labels, by);
      this.#find();
      return;
    }
    entry.value += by;
  }

  #find(): void {
    this.#map = (this.#c as unknown as Internals<CounterEntry>).hashMap;
    this.#key = locate(this.#map, this.#labels);
  }
}
