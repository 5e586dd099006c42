/**
 * A throttle in front of common's `Logger`, so a worker spewing garbage
 * cannot flood the log. Counters (stats.ts) stay exact; only log lines are
 * thinned. src/events never creates a logger: it writes to the one in its
 * ingestion context (./options.ts), which the composition root handed down.
 */
import type { Clock, Logger } from '../common/index.js';

/**
 * Logs the first occurrence of a key, then at most one line per `intervalMs` carrying the
 * suppressed count. Every line carries `base` (a stream's: its worker id and dp rank) first.
 */
export class ThrottledLog {
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #intervalMs: number;
  readonly #base: Readonly<Record<string, unknown>>;
  readonly #last = new Map<string, { at: number; suppressed: number }>();

  constructor(logger: Logger, clock: Clock, intervalMs: number, base: Readonly<Record<string, unknown>> = {}) {
    this.#logger = logger;
    this.#clock = clock;
    this.#intervalMs = intervalMs;
    this.#base = base;
  }

  warn(key: string, fields: Record<string, unknown>, msg: string): void {
    const now = this.#clock.now();
    const prev = this.#last.get(key);
    if (prev !== undefined && now - prev.at < this.#intervalMs) {
      prev.suppressed++;
      return;
    }
    const suppressed = prev?.suppressed ?? 0;
    this.#last.set(key, { at: now, suppressed: 0 });
    this.#logger.warn(suppressed > 0 ? { ...this.#base, ...fields, suppressed } : { ...this.#base, ...fields }, msg);
  }
}
