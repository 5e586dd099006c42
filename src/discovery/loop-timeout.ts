/**
 * A timeout that counts the time the event loop was free to run, not wall
 * time. A probe's timer and its response compete for the same event loop: when
 * the gateway's loop is blocked (CPU saturation, a long synchronous task), a
 * plain timer expires in the timers phase before the poll phase reads the
 * answer that has been waiting in the socket, and a healthy engine looks dead.
 *
 * So the budget is spent in short steps: each step credits the time since the
 * previous one, but no more than its own delay plus a small tolerance; a step
 * that fires later than that observed a blocked loop, and the excess is not
 * the engine's fault. A late step never expires the timeout by itself: it
 * re-arms once at 0 ms, so one poll phase runs (and reads any waiting answer)
 * before the decision. A wall-clock backstop bounds the whole thing, so a hung
 * engine is still detected under sustained saturation.
 */
import type { Clock } from '../common/index.js';

/** Timers, injectable so tests can run a blocked event loop in virtual time. */
export interface Scheduler {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const systemScheduler: Scheduler = {
  setTimeout: (fn, ms) => {
    const t = setTimeout(fn, ms);
    t.unref();
    return t;
  },
  clearTimeout: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

/** How late a step may fire and still count as the loop having been free. */
const LATE_TOLERANCE_MS = 25;
/** Step length: the resolution at which loop stalls are told apart from probe time. */
const STEP_MS = 50;

export interface LoopTimeoutOptions {
  clock: Clock;
  scheduler: Scheduler;
  /** Wall-clock bound whatever the loop did (default 10 x the budget). */
  backstopMs?: number | undefined;
}

/**
 * Calls `onExpire` once `budgetMs` of free event-loop time has passed (or the
 * wall-clock backstop), unless cancelled first. Returns the cancel function.
 */
export function loopTimeout(budgetMs: number, onExpire: () => void, opts: LoopTimeoutOptions): () => void {
  const { clock, scheduler } = opts;
  const start = clock.now();
  const backstop = start + (opts.backstopMs ?? budgetMs * 10);
  let credited = 0;
  let last = start;
  let handle: unknown;
  let done = false;

  const arm = (delay: number): void => {
    handle = scheduler.setTimeout(() => step(delay), delay);
  };
  const step = (delay: number): void => {
    if (done) return;
    const now = clock.now();
    const late = now - last > delay + LATE_TOLERANCE_MS;
    credited += Math.min(now - last, delay + LATE_TOLERANCE_MS);
    last = now;
    if (now >= backstop || (credited >= budgetMs && !late)) {
      done = true;
      onExpire();
      return;
    }
    // After a stall, one poll phase first (delay 0), so an answer that arrived meanwhile is read.
    arm(late ? 0 : Math.min(STEP_MS, Math.max(0, budgetMs - credited)));
  };
  arm(Math.min(STEP_MS, budgetMs));
  return () => {
    done = true;
    scheduler.clearTimeout(handle);
  };
}
