/**
 * One context object, built once by the composition root (the CLI, a test,
 * a library caller) and handed down unchanged, instead of the same options
 * restated at every hop. Layers that need more (routing: metrics) extend it.
 */
import { systemClock, type Clock, type Rng } from './clock.js';
import { silentLogger, type Logger } from './logger.js';

export interface Context {
  /** Monotonic milliseconds: `performance.now()` in a process, virtual time in replay. */
  readonly clock: Clock;
  /** Uniform doubles in [0, 1): seeded in tests and replay. */
  readonly rng: Rng;
  readonly logger: Logger;
}

/** The process defaults: system clock, Math.random, no logging. Fields given override them. */
export function makeContext(partial: Partial<Context> = {}): Context {
  return {
    clock: partial.clock ?? systemClock,
    rng: partial.rng ?? Math.random,
    logger: partial.logger ?? silentLogger,
  };
}
