/**
 * A token bucket on an injected clock: `rate` tokens a second refill it up to `burst`. `take` spends when the
 * bucket holds enough, else says how long until it would: the wait a 429's Retry-After reports.
 */
export class TokenBucket {
  #tokens: number;
  #at: number;

  constructor(
    public rate: number,
    public burst: number,
    now: number,
  ) {
    this.#tokens = burst;
    this.#at = now;
  }

  /** New limits (a reload): the tokens held stay, capped at the new burst. */
  reset(rate: number, burst: number, now: number): void {
    this.#refill(now);
    this.rate = rate;
    this.burst = burst;
    this.#tokens = Math.min(this.#tokens, burst);
  }

  #refill(now: number): void {
    if (now > this.#at) this.#tokens = Math.min(this.burst, this.#tokens + ((now - this.#at) / 1000) * this.rate);
    this.#at = Math.max(this.#at, now);
  }

  /** Whether `n` tokens are there now (without spending them): 0 if so, else the milliseconds until they would be. */
  wait(n: number, now: number): number {
    this.#refill(now);
    if (this.#tokens >= n) return 0;
    // More than the bucket can ever hold: never (a caller refuses it outright).
    if (n > this.burst) return Infinity;
    return ((n - this.#tokens) / this.rate) * 1000;
  }

  /** Spends `n` tokens (the caller checked `wait(n) === 0`). */
  spend(n: number): void {
    this.#tokens -= n;
  }
}
