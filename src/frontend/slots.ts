/**
 * The gateway's concurrency slots: at most `max` requests in flight (a request
 * holds one from the moment its body has arrived until its response closes),
 * each with its request deadline, and waiting for them to drain at shutdown.
 */
import { KvgateError } from '../errors/index.js';

export class ConcurrencySlots {
  /** Requests allowed in flight; a reload may change it (requests above a lowered limit finish). */
  max: number;
  readonly #timeoutMs: number;
  readonly #onChange: (inflight: number) => void;
  /** Abort controllers of requests holding a slot, with their request-deadline timers. */
  readonly #active = new Map<AbortController, NodeJS.Timeout>();
  #idleWaiters: (() => void)[] = [];

  constructor(max: number, timeoutMs: number, onChange: (inflight: number) => void) {
    this.max = max;
    this.#timeoutMs = timeoutMs;
    this.#onChange = onChange;
  }

  get size(): number {
    return this.#active.size;
  }

  /**
   * A slot for the request `controller` aborts; its deadline (KVG_ERR_REQUEST_TIMEOUT) runs from now.
   * @throws KvgateError KVG_ERR_TOO_MANY_REQUESTS at the limit.
   */
  take(controller: AbortController): void {
    if (this.#active.size >= this.max) {
      throw new KvgateError('KVG_ERR_TOO_MANY_REQUESTS', `${this.max} requests are in flight, the limit; retry later`);
    }
    const timer = setTimeout(() => controller.abort(new KvgateError('KVG_ERR_REQUEST_TIMEOUT',
      `the request did not complete within ${this.#timeoutMs} ms`)), this.#timeoutMs);
    timer.unref();
    this.#active.set(controller, timer);
    this.#onChange(this.#active.size);
  }

  release(controller: AbortController): void {
    clearTimeout(this.#active.get(controller));
    this.#active.delete(controller);
    this.#onChange(this.#active.size);
    if (this.#active.size === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** Aborts every request holding a slot with `reason`. */
  abortAll(reason: KvgateError): void {
    for (const c of this.#active.keys()) c.abort(reason);
  }

  /** Resolves true once no slot is held, false after `timeoutMs`. */
  waitIdle(timeoutMs: number): Promise<boolean> {
    if (this.#active.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#idleWaiters = this.#idleWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      this.#idleWaiters.push(done);
    });
  }
}
