/**
 * RealtimeEngine: runs an EngineCore against the wall clock for the HTTP
 * server. Loop: step(now); wait until now + duration x slowFactor; deliver
 * the step's tokens, finishes and KV events; repeat. When idle (or when a
 * step scheduled nothing because everything waits on a transfer) it sleeps
 * until new input or `core.nextWakeTime()`. Requests arriving during a step
 * join the next one, as in a real engine.
 *
 * Deadlines are absolute (clock time), so timer lateness does not accumulate
 * into the next step; sub-millisecond waits yield with setImmediate so the
 * HTTP server keeps being served.
 */
import { systemClock, type Clock } from '../common/index.js';
import type { EngineCore } from './engine.js';
import type { CoreRequest, FinishedRequest, StepResult } from './engine-types.js';
import type { FaultController } from './faults.js';

export interface RequestListener {
  /** First admission: how many prompt tokens came from the prefix cache. */
  onAdmitted?(cachedTokens: number): void;
  onToken(tokenId: number, index: number): void;
  onFinish(info: FinishedRequest): void;
}

export interface RealtimeEngineOptions {
  clock?: Clock;
  faults: FaultController;
  /** Called with every step result when its time has elapsed (KV events, metrics). */
  onStep?: (result: StepResult) => void;
}

export class RealtimeEngine {
  readonly core: EngineCore;
  readonly #clock: Clock;
  readonly #faults: FaultController;
  readonly #onStep: RealtimeEngineOptions['onStep'];
  readonly #listeners = new Map<string, RequestListener>();
  #running = false;
  #loopDone: Promise<void> = Promise.resolve();
  /** The loop's current wait, if any. */
  #current: { done: () => void; interruptible: boolean } | undefined;

  constructor(core: EngineCore, opts: RealtimeEngineOptions) {
    this.core = core;
    this.#clock = opts.clock ?? systemClock;
    this.#faults = opts.faults;
    this.#onStep = opts.onStep;
  }

  start(): void {
    if (this.#running) return;
    this.#running = true;
    this.#loopDone = this.#loop();
  }

  /** Stops after the current wait; pending requests are dropped without callbacks. */
  async stop(): Promise<void> {
    this.#running = false;
    this.#current?.done();
    await this.#loopDone;
    this.#listeners.clear();
  }

  /**
   * Queues a request. @throws KvgateError from EngineCore.add (bad or oversized request).
   */
  submit(req: CoreRequest, listener: RequestListener): void {
    this.core.add(req, this.#clock.now());
    this.#listeners.set(req.id, listener);
    this.wake();
  }

  abort(id: string): boolean {
    this.#listeners.delete(id);
    const found = this.core.abort(id);
    this.wake();
    return found;
  }

  /** Re-evaluates at once (new input, fault change, pending events). */
  wake(): void {
    if (this.#current?.interruptible === true) this.#current.done();
  }

  get load(): number {
    const s = this.core.stats();
    return s.running + s.waiting + s.transferring;
  }

  async #loop(): Promise<void> {
    while (this.#running) {
      if (this.#faults.settings.hang) {
        await this.#wait(undefined, true);
        continue;
      }
      if (this.core.isIdle()) {
        this.core.releaseExpiredLeases(this.#clock.now());
        await this.#wait(this.core.nextWakeTime(), true);
        continue;
      }
      const start = this.#clock.now();
      const result = this.core.step(start);
      if (result.scheduledTokens === 0) {
        this.#deliver(result);
        await this.#wait(this.core.nextWakeTime(), true);
        continue;
      }
      await this.#wait(start + result.durationMs * this.#faults.settings.slowFactor, false);
      if (!this.#running) return;
      this.#deliver(result);
    }
  }

  /** Waits until `deadline` (clock ms; undefined = forever), or `wake()` when interruptible, or stop. */
  #wait(deadline: number | undefined, interruptible: boolean): Promise<void> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      let immediate: NodeJS.Immediate | undefined;
      const done = (): void => {
        if (this.#current?.done !== done) return;
        this.#current = undefined;
        if (timer !== undefined) clearTimeout(timer);
        if (immediate !== undefined) clearImmediate(immediate);
        resolve();
      };
      this.#current = { done, interruptible };
      if (!this.#running) return done();
      if (deadline !== undefined) {
        const ms = deadline - this.#clock.now();
        if (ms < 1) immediate = setImmediate(done);
        else timer = setTimeout(done, ms);
      }
    });
  }

  #deliver(r: StepResult): void {
    for (const a of r.admitted) this.#safe(() => this.#listeners.get(a.requestId)?.onAdmitted?.(a.cachedTokens));
    for (const o of r.outputs) this.#safe(() => this.#listeners.get(o.requestId)?.onToken(o.tokenId, o.index));
    for (const f of r.finished) {
      const l = this.#listeners.get(f.requestId);
      this.#listeners.delete(f.requestId);
      this.#safe(() => l?.onFinish(f));
    }
    this.#safe(() => this.#onStep?.(r));
  }

  // A listener bug (e.g. writing to a closed socket) must not stop the engine.
  #safe(fn: () => void): void {
    try {
      fn();
    } catch {
      // the listener's own error path owns it
    }
  }
}
