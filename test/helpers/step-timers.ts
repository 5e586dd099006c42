/** Timers for discovery's `Scheduler` that fire only when the test says: each one's delay is kept, none runs by itself. */
import { expect } from 'vitest';
import type { Scheduler } from '../../src/discovery/index.js';

export class StepTimers implements Scheduler {
  readonly pending: { fn: () => void; ms: number }[] = [];

  setTimeout(fn: () => void, ms: number): unknown {
    const t = { fn, ms };
    this.pending.push(t);
    return t;
  }

  clearTimeout(handle: unknown): void {
    const i = this.pending.indexOf(handle as { fn: () => void; ms: number });
    if (i >= 0) this.pending.splice(i, 1);
  }

  /** Runs the one pending timer; returns its delay. */
  fire(): number {
    expect(this.pending).toHaveLength(1);
    const t = this.pending.shift()!;
    t.fn();
    return t.ms;
  }
}
