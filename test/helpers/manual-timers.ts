/** Timers in virtual time for discovery's `Scheduler` (outlier ejections): they fire only when the test moves the clock. */
import type { Scheduler } from '../../src/discovery/loop-timeout.js';

export class ManualTimers implements Scheduler {
  now = 0;
  #timers: { at: number; fn: () => void; id: number }[] = [];
  #ids = 0;

  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.#ids;
    this.#timers.push({ at: this.now + ms, fn, id });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.#timers = this.#timers.filter((t) => t.id !== handle);
  }

  advance(ms: number): void {
    this.now += ms;
    const due = this.#timers.filter((t) => t.at <= this.now).sort((a, b) => a.at - b.at);
    this.#timers = this.#timers.filter((t) => t.at > this.now);
    for (const t of due) t.fn();
  }
}
