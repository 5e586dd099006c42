/**
 * Applies KV events in bounded slices, one slice per event-loop turn, so an
 * event burst cannot stall HTTP: whatever the event rate, the main thread
 * spends at most `maxTurnMs` (or `maxEventsPerTurn` events) on ingestion
 * before timers, sockets and requests get their turn.
 *
 * Streams with queued work `wake` the scheduler; each turn visits them round
 * robin (so one flooded worker cannot starve the others' events), each visit
 * capped at an even share of the turn's budget. Queues are bounded by the
 * streams themselves; this only decides when they drain.
 */
import type { Clock } from '../common/index.js';

/** What one drain call may still spend. */
export interface TurnBudget {
  /** Spends `n` units: one per event applied, at least one per message handled. */
  take(n: number): void;
  /** Units left (never below 0). */
  readonly left: number;
  /** True once the units or the turn's time are used up. */
  spent(): boolean;
}

/** A queue that drains within a budget; returns true while work remains. */
export interface Drainable {
  drain(budget: TurnBudget): boolean;
}

/** Decides when woken streams drain. */
export interface ApplyScheduler {
  wake(d: Drainable): void;
}

/**
 * Units taken before a check reads the clock again. A unit is one event applied or one message handled (a
 * few µs at most), so a turn overruns `maxTurnMs` by at most this many messages or one writer slice of
 * events, and the clock is read once every few batches rather than at every check.
 */
const UNITS_PER_CLOCK_READ = 16;

class Budget implements TurnBudget {
  #left: number;
  readonly #deadline: number;
  readonly #clock: Clock;
  readonly #parent: Budget | undefined;
  /** The turn's own budget: units taken since the clock was last read, and whether it showed the deadline passed. */
  #unread = 0;
  #late = false;

  constructor(left: number, deadline: number, clock: Clock, parent?: Budget) {
    this.#left = left;
    this.#deadline = deadline;
    this.#clock = clock;
    this.#parent = parent;
  }

  get left(): number {
    return Math.max(0, this.#left);
  }

  take(n: number): void {
    this.#left -= n;
    if (this.#parent !== undefined) this.#parent.take(n);
    else this.#unread += n;
  }

  spent(): boolean {
    if (this.#left <= 0) return true;
    if (this.#parent !== undefined) return this.#parent.spent();
    if (this.#late) return true;
    if (this.#unread < UNITS_PER_CLOCK_READ) return false;
    this.#unread = 0;
    return (this.#late = this.#clock.now() >= this.#deadline);
  }

  /** A visit's share: at most `cap` units, counted against this budget too. */
  share(cap: number): Budget {
    return new Budget(Math.min(cap, this.left), this.#deadline, this.#clock, this);
  }
}

/** Drains synchronously, without a budget (tests, offline tools). Re-entrant wakes join the running drain. */
export class InlineScheduler implements ApplyScheduler {
  readonly #pending = new Set<Drainable>();
  #running = false;

  wake(d: Drainable): void {
    this.#pending.add(d);
    if (this.#running) return;
    this.#running = true;
    try {
      while (this.#pending.size > 0) {
        const next = this.#pending.values().next().value!;
        this.#pending.delete(next);
        const unlimited = new Budget(Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY, { now: () => 0 });
        while (next.drain(unlimited));
      }
    } finally {
      this.#running = false;
    }
  }
}

export interface TurnSchedulerOptions {
  clock: Clock;
  /** Events applied per turn at most, over all streams (a message without events counts as one). */
  maxEventsPerTurn: number;
  /** Time spent per turn at most, ms (the clock is read every few messages or events: `UNITS_PER_CLOCK_READ`). */
  maxTurnMs: number;
  /** Runs the next turn after I/O (setImmediate); injectable for deterministic tests. */
  defer?: ((fn: () => void) => void) | undefined;
}

export class TurnScheduler implements ApplyScheduler {
  readonly #clock: Clock;
  readonly #maxEvents: number;
  readonly #maxMs: number;
  readonly #defer: (fn: () => void) => void;
  readonly #ready = new Set<Drainable>();
  #scheduled = false;
  #turns = 0;

  constructor(opts: TurnSchedulerOptions) {
    if (!(opts.maxEventsPerTurn >= 1) || !(opts.maxTurnMs > 0)) {
      throw new RangeError(
        `maxEventsPerTurn must be >= 1 and maxTurnMs > 0, got ${opts.maxEventsPerTurn} and ${opts.maxTurnMs}`,
      );
    }
    this.#clock = opts.clock;
    this.#maxEvents = opts.maxEventsPerTurn;
    this.#maxMs = opts.maxTurnMs;
    this.#defer = opts.defer ?? ((fn) => void setImmediate(fn));
  }

  /** Turns run so far. */
  get turns(): number {
    return this.#turns;
  }

  wake(d: Drainable): void {
    this.#ready.add(d);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled || this.#ready.size === 0) return;
    this.#scheduled = true;
    this.#defer(() => this.#turn());
  }

  #turn(): void {
    this.#scheduled = false;
    this.#turns++;
    const budget = new Budget(this.#maxEvents, this.#clock.now() + this.#maxMs, this.#clock);
    try {
      while (this.#ready.size > 0 && !budget.spent()) {
        const share = Math.max(1, Math.ceil(budget.left / this.#ready.size));
        for (const d of [...this.#ready]) {
          if (budget.spent()) break;
          this.#ready.delete(d);
          // Still busy: back of the line, so the next visit goes to another stream.
          if (d.drain(budget.share(share))) this.#ready.add(d);
        }
      }
    } finally {
      this.#schedule();
    }
  }
}
