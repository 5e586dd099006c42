/**
 * Step-time models of the simulated engine. A model maps the shape of one
 * scheduler iteration (which sequences prefill how many tokens over how much
 * cached context, how many decode, KV usage) to GPU milliseconds. The engine
 * core divides by `speedup`; models never see it.
 *
 * - `PolynomialTimingModel`: Dynamo mocker's default.
 *     prefill ms = 4.209989e-7·T² + 1.518344e-2·T + 16.50142, T = uncached tokens
 *                  prefilled in the step, summed over sequences;
 *     decode ms  = max(1, -25.74·p² + 54.01·p + 5.74), p = KV usage (0..1);
 *     a mixed step costs prefill + decode.
 * - `ProfileTimingModel`: measured GPU step times (profiles/*.json, see
 *   profiles/README.md). Between measured points it
 *   interpolates in log space (ln ms against ln(1 + x) on each axis); beyond
 *   them it extrapolates linearly from the two outermost points, and flags the
 *   step as extrapolated so callers can report it.
 *     one prefill (c cached, n new)   = prefill_ms[c][n], interpolated;
 *     k prefills in one step          = sum of each - (k - 1)·fixed, where fixed
 *                                       = prefill_ms[0][smallest n] (weights are read
 *                                       once per step), and at least the largest one;
 *     b decodes, mean context L       = decode_ms[b][L], interpolated;
 *     a mixed step                    = prefills + (decode_ms[b][L] - decode_ms[1][smallest L]).
 */
import { readFileSync, existsSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { StepCostModel } from '../core/index.js';
import { KvgateError } from '../errors/index.js';

export interface PrefillWork {
  /** Tokens of this sequence already in the KV cache before this step. */
  cachedTokens: number;
  /** Tokens of this sequence computed in this step. */
  newTokens: number;
}

/** What one scheduler iteration computes. */
export interface StepShape {
  prefill: readonly PrefillWork[];
  /** Number of sequences decoding one token each. */
  decodeCount: number;
  /** Sum over decoding sequences of their context length (tokens in KV). */
  decodeContextTokens: number;
  /** Fraction of KV blocks held by running requests, 0..1. */
  kvUsage: number;
}

export interface StepTiming {
  /** GPU milliseconds, before the speed-up factor. */
  ms: number;
  /** True when any part of the estimate lies outside the measured points. */
  extrapolated: boolean;
}

export interface TimingModel {
  readonly kind: 'polynomial' | 'profile';
  /** Short label for metrics and replay reports: `polynomial` or `profile:<name>`. */
  readonly label: string;
  /** Descriptive fields (gpu, model, source file) for /metrics info labels. */
  readonly info: Readonly<Record<string, string>>;
  /** KV bytes per token the model implies (for transfer delays), when known. */
  readonly kvBytesPerToken: number | undefined;
  stepMs(shape: StepShape): StepTiming;
}

// ---------------------------------------------------------------- polynomial

export function polynomialPrefillMs(uncachedTokens: number): number {
  const t = uncachedTokens;
  return 4.209989e-7 * t * t + 1.518344e-2 * t + 16.50142;
}

export function polynomialDecodeMs(kvUsage: number): number {
  const p = kvUsage;
  return Math.max(1, -25.74 * p * p + 54.01 * p + 5.74);
}

export class PolynomialTimingModel implements TimingModel {
  readonly kind = 'polynomial' as const;
  readonly label = 'polynomial';
  readonly info = { model: 'polynomial', source: 'dynamo-mocker' };
  readonly kvBytesPerToken = undefined;

  stepMs(shape: StepShape): StepTiming {
    let ms = 0;
    if (shape.prefill.length > 0) {
      let t = 0;
      for (const p of shape.prefill) t += p.newTokens;
      ms += polynomialPrefillMs(t);
    }
    if (shape.decodeCount > 0) ms += polynomialDecodeMs(shape.kvUsage);
    return { ms, extrapolated: false };
  }
}

// ------------------------------------------------------------------- profile

interface Evaluated {
  y: number;
  extrapolated: boolean;
}

const axis = (x: number): number => Math.log1p(x);

/** A measured 1-D curve: log-space interpolation inside, linear extrapolation outside. */
class MeasuredCurve {
  readonly xs: number[];
  readonly ys: number[];

  constructor(points: [number, number][]) {
    points.sort((a, b) => a[0] - b[0]);
    this.xs = points.map((p) => p[0]);
    this.ys = points.map((p) => p[1]);
  }

  at(x: number): Evaluated {
    const { xs, ys } = this;
    const n = xs.length;
    if (n === 1) return { y: ys[0]!, extrapolated: x !== xs[0] };
    if (x < xs[0]! || x > xs[n - 1]!) {
      const [i, j] = x < xs[0]! ? [0, 1] : [n - 2, n - 1];
      const slope = (ys[j]! - ys[i]!) / (xs[j]! - xs[i]!);
      // A falling segment must not extrapolate to zero or below: a step costs something.
      return { y: Math.max(ys[i]! + slope * (x - xs[i]!), Math.min(...ys) * 0.5), extrapolated: true };
    }
    let k = 0;
    while (k < n - 2 && x > xs[k + 1]!) k++;
    const x0 = xs[k]!;
    const x1 = xs[k + 1]!;
    // Measured points are returned as measured (no exp/log round-off).
    if (x === x0) return { y: ys[k]!, extrapolated: false };
    if (x === x1) return { y: ys[k + 1]!, extrapolated: false };
    const f = (axis(x) - axis(x0)) / (axis(x1) - axis(x0));
    return { y: Math.exp(Math.log(ys[k]!) + f * (Math.log(ys[k + 1]!) - Math.log(ys[k]!))), extrapolated: false };
  }
}

/** A 2-D table as rows (outer key) of curves (inner key); rows may cover different ranges. */
class MeasuredSurface {
  readonly #rows: { key: number; curve: MeasuredCurve }[];

  constructor(table: Record<string, Record<string, number>>, what: string) {
    this.#rows = Object.entries(table)
      .map(([k, row]) => {
        const points = Object.entries(row).map(([x, y]) => [Number(x), y] as [number, number]);
        for (const [x, y] of points) {
          if (!Number.isFinite(x) || x < 0 || typeof y !== 'number' || !(y > 0)) {
            throw new KvgateError(
              'KVG_ERR_INVALID_CONFIG',
              `perf profile: ${what}[${k}] has an invalid point (${x}, ${String(y)})`,
              { what },
            );
          }
        }
        if (points.length === 0)
          throw new KvgateError('KVG_ERR_INVALID_CONFIG', `perf profile: ${what}[${k}] is empty`, { what });
        return { key: Number(k), curve: new MeasuredCurve(points) };
      })
      .sort((a, b) => a.key - b.key);
    if (this.#rows.length === 0 || this.#rows.some((r) => !Number.isFinite(r.key) || r.key < 0)) {
      throw new KvgateError('KVG_ERR_INVALID_CONFIG', `perf profile: ${what} must map numeric keys to measured rows`, {
        what,
      });
    }
  }

  at(outer: number, inner: number): Evaluated {
    const rows = this.#rows;
    const n = rows.length;
    if (n === 1) {
      const e = rows[0]!.curve.at(inner);
      return { y: e.y, extrapolated: e.extrapolated || outer !== rows[0]!.key };
    }
    let i: number;
    let j: number;
    const outside = outer < rows[0]!.key || outer > rows[n - 1]!.key;
    if (outer < rows[0]!.key) [i, j] = [0, 1];
    else if (outer > rows[n - 1]!.key) [i, j] = [n - 2, n - 1];
    else {
      i = 0;
      while (i < n - 2 && outer > rows[i + 1]!.key) i++;
      j = i + 1;
    }
    const a = rows[i]!;
    const b = rows[j]!;
    if (outer === a.key) return a.curve.at(inner);
    if (outer === b.key) return b.curve.at(inner);
    const ea = a.curve.at(inner);
    const eb = b.curve.at(inner);
    const extrapolated = outside || ea.extrapolated || eb.extrapolated;
    if (outside) {
      const slope = (eb.y - ea.y) / (b.key - a.key);
      return { y: Math.max(ea.y + slope * (outer - a.key), Math.min(ea.y, eb.y) * 0.5), extrapolated };
    }
    const f = (axis(outer) - axis(a.key)) / (axis(b.key) - axis(a.key));
    return { y: Math.exp(Math.log(ea.y) + f * (Math.log(eb.y) - Math.log(ea.y))), extrapolated };
  }

  /** The smallest measured inner coordinate of the first row, and its value. */
  floor(): number {
    return this.#rows[0]!.curve.ys[0]!;
  }
}

/** The JSON layout of profiles/*.json. */
export interface PerfProfileJson {
  model?: string;
  gpu?: string;
  kv_bytes_per_token?: number;
  prefill_ms: Record<string, Record<string, number>>;
  decode_ms: Record<string, Record<string, number>>;
}

export class ProfileTimingModel implements TimingModel {
  readonly kind = 'profile' as const;
  readonly label: string;
  readonly info: Readonly<Record<string, string>>;
  readonly kvBytesPerToken: number | undefined;
  readonly #prefill: MeasuredSurface;
  readonly #decode: MeasuredSurface;
  readonly #prefillFixed: number;
  readonly #decodeFloor: number;

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG for a malformed profile. */
  constructor(profile: PerfProfileJson, name: string) {
    if (
      typeof profile !== 'object' ||
      profile === null ||
      typeof profile.prefill_ms !== 'object' ||
      typeof profile.decode_ms !== 'object'
    ) {
      throw new KvgateError('KVG_ERR_INVALID_CONFIG', `perf profile ${name}: needs prefill_ms and decode_ms tables`, {
        name,
      });
    }
    this.#prefill = new MeasuredSurface(profile.prefill_ms, 'prefill_ms');
    this.#decode = new MeasuredSurface(profile.decode_ms, 'decode_ms');
    this.#prefillFixed = this.#prefill.floor();
    this.#decodeFloor = this.#decode.floor();
    this.label = `profile:${name}`;
    this.info = { model: 'profile', profile: name, gpu: profile.gpu ?? 'unknown', shape: profile.model ?? 'unknown' };
    this.kvBytesPerToken =
      typeof profile.kv_bytes_per_token === 'number' && profile.kv_bytes_per_token > 0
        ? profile.kv_bytes_per_token
        : undefined;
  }

  /** One sequence prefilling `newTokens` over `cachedTokens` of context. */
  prefillMs(cachedTokens: number, newTokens: number): StepTiming {
    const e = this.#prefill.at(cachedTokens, newTokens);
    return { ms: e.y, extrapolated: e.extrapolated };
  }

  /** One decode step of `batch` sequences with `context` tokens each. */
  decodeMs(batch: number, context: number): StepTiming {
    const e = this.#decode.at(batch, context);
    return { ms: e.y, extrapolated: e.extrapolated };
  }

  stepMs(shape: StepShape): StepTiming {
    let extrapolated = false;
    let prefill = 0;
    if (shape.prefill.length > 0) {
      let sum = 0;
      let largest = 0;
      for (const p of shape.prefill) {
        const t = this.prefillMs(p.cachedTokens, p.newTokens);
        extrapolated ||= t.extrapolated;
        sum += t.ms;
        largest = Math.max(largest, t.ms);
      }
      prefill = Math.max(largest, sum - (shape.prefill.length - 1) * this.#prefillFixed);
    }
    let decode = 0;
    if (shape.decodeCount > 0) {
      const t = this.decodeMs(shape.decodeCount, shape.decodeContextTokens / shape.decodeCount);
      extrapolated ||= t.extrapolated;
      decode = shape.prefill.length > 0 ? Math.max(0, t.ms - this.#decodeFloor) : t.ms;
    }
    return { ms: prefill + decode, extrapolated };
  }
}

/**
 * The router's view of an engine's timing model (core's `StepCostModel`, for the time-unit cost):
 * a measured profile's step times; undefined for the polynomial model, whose decode time follows
 * KV usage rather than the batch, so the router keeps its block-counting cost there.
 */
export function stepCostModelOf(timing: TimingModel): StepCostModel | undefined {
  if (!(timing instanceof ProfileTimingModel)) return undefined;
  return {
    prefillMs: (cached, tokens) => timing.prefillMs(cached, tokens).ms,
    decodeMs: (batch, context) => timing.decodeMs(batch, context).ms,
  };
}

/** The folder of bundled profiles (`profiles/` at the package root). */
function profilesDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, 'profiles');
    if (existsSync(join(candidate, 'h100-llama3.1-8b.json'))) return candidate;
    dir = dirname(dir);
  }
  return resolve('profiles');
}

/** Names of the bundled profiles, e.g. `h100-llama3.1-8b`. */
const BUNDLED_PROFILES = ['h100-llama3.1-8b', 'h200-llama3.1-8b'] as const;

/**
 * Loads a perf profile from a path, or a bundled one by name (`h100-llama3.1-8b`,
 * or just `h100` / `h200`).
 * @throws KvgateError KVG_ERR_INVALID_CONFIG when the file is missing or malformed.
 */
export function loadPerfProfile(fileOrName: string): ProfileTimingModel {
  const bundled = BUNDLED_PROFILES.find((p) => p === fileOrName || p.split('-')[0] === fileOrName);
  const path = bundled !== undefined ? join(profilesDir(), `${bundled}.json`) : resolve(fileOrName);
  let json: PerfProfileJson;
  try {
    json = JSON.parse(readFileSync(path, 'utf8')) as PerfProfileJson;
  } catch (err) {
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `perf profile ${path}: ${(err as Error).message}`,
      { path },
      { cause: err },
    );
  }
  return new ProfileTimingModel(json, basename(path).replace(/\.json$/, ''));
}
