/**
 * Exponential back-off with jitter, for retrying a service outside kvgate
 * (etcd) that stopped answering.
 *
 * The n-th delay (n from 0) is drawn uniformly from [step / 2, step], where
 * step = min(maxMs, minMs * 2^n). The fixed half keeps retries at least that
 * far apart, so a line logged per attempt stays rare however long the outage
 * lasts; the random half spreads a fleet of clients that lost the service at
 * the same moment, so they do not all come back in the same instant.
 * `reset()` after a success starts again from `minMs`.
 */
import type { Rng } from './clock.js';

export class Backoff {
  readonly #minMs: number;
  readonly #maxMs: number;
  readonly #rng: Rng;
  #attempts = 0;

  /** @throws RangeError unless 0 < minMs <= maxMs. */
  constructor(minMs: number, maxMs: number, rng: Rng) {
    if (!(minMs > 0 && maxMs >= minMs))
      throw new RangeError(`Backoff: need 0 < minMs <= maxMs, got ${minMs} and ${maxMs}`);
    this.#minMs = minMs;
    this.#maxMs = maxMs;
    this.#rng = rng;
  }

  /** Failed attempts since the last reset. */
  get attempts(): number {
    return this.#attempts;
  }

  /** Counts a failed attempt and returns the whole milliseconds to wait before the next one. */
  next(): number {
    // 2^n grows past maxMs long before it could overflow; min() caps it there.
    const step = Math.min(this.#maxMs, this.#minMs * 2 ** Math.min(this.#attempts, 52));
    this.#attempts++;
    return Math.round(step / 2 + (step / 2) * this.#rng());
  }

  /** A success: the next failure waits `minMs` again. */
  reset(): void {
    this.#attempts = 0;
  }
}
