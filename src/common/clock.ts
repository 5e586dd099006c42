/**
 * Time and randomness are injected into core logic so it stays deterministic
 * under test and can run in virtual time (offline replay).
 */

/** A monotonic clock in milliseconds. */
export interface Clock {
  now(): number;
}

/** The process's monotonic clock (performance.now()). */
export const systemClock: Clock = { now: () => performance.now() };

/** A clock that only moves when told to: for tests and discrete-event simulation. */
export class ManualClock implements Clock {
  #now: number;
  constructor(start = 0) {
    this.#now = start;
  }
  now(): number {
    return this.#now;
  }
  advance(ms: number): void {
    if (!(ms >= 0)) throw new RangeError(`ManualClock.advance: ms must be >= 0, got ${ms}`);
    this.#now += ms;
  }
  set(ms: number): void {
    if (!(ms >= this.#now)) throw new RangeError(`ManualClock.set: time cannot go backwards (${ms} < ${this.#now})`);
    this.#now = ms;
  }
}

/** A source of uniform doubles in [0, 1). */
export type Rng = () => number;

/** Seeded PRNG (mulberry32): deterministic for a seed, fast, 32-bit state. */
export function seededRng(seed: number): Rng {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * murmur3's 32-bit finaliser: a bijective avalanche mix, for deterministic
 * pseudo-random draws keyed by position (no state to carry). The result is a
 * signed int32, which V8 keeps unboxed; `>>> 0` makes it unsigned.
 */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h | 0;
}
