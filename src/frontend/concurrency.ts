/**
 * The gateway's concurrency slots: at most `max` requests in flight (a request
 * holds one from the moment its body has arrived until its response has closed
 * and its handler has returned, whichever is later: a client that leaves does
 * not free the slot while the work it started still runs), each with its
 * request deadline, and waiting for them to drain at shutdown. Of them, one
 * client holds at most `perClient.max` (client-requests.ts).
 *
 * Every request has the same timeout, so deadlines come in the order slots
 * are taken: one timer, armed for the oldest deadline, serves them all (a
 * slot costs a map entry, not a timer of its own).
 */
import { KvgateError } from '../errors/index.js';
import { ClientRequests, type ClientRequestsWatch } from './client-requests.js';

/** What a slot holds of its request: the way to cut it (a Cancellation, or an AbortController). */
export interface Abortable {
  abort(reason?: unknown): void;
}

export class ConcurrencySlots {
  /** Requests allowed in flight; a reload may change it (requests above a lowered limit finish). */
  max: number;
  readonly #timeoutMs: number;
  readonly #onChange: (inflight: number) => void;
  /**
   * Abort controllers of requests holding a slot, in the order taken, with their deadlines
   * (`performance.now()` times; 0 once fired, while the aborted request finishes).
   */
  readonly #active = new Map<Abortable, number>();
  /** The client each counted request is (requests without one are not counted per client). */
  readonly #clientOf = new Map<Abortable, string>();
  /** The per-client bound (`limits.max_concurrent_requests_per_client`: `setLimits`). */
  readonly perClient: ClientRequests;
  #timer: NodeJS.Timeout | undefined;
  readonly #onTimer = (): void => this.#expire();
  #idleWaiters: (() => void)[] = [];

  /** `perClient`: where the per-client bound's episodes are logged and its clients at the bound reported. */
  constructor(max: number, timeoutMs: number, onChange: (inflight: number) => void, perClient?: ClientRequestsWatch) {
    this.max = max;
    this.perClient = new ClientRequests(perClient);
    this.#timeoutMs = timeoutMs;
    this.#onChange = onChange;
  }

  /** The gateway-wide bound and one client's (0: none), as a reload sets them; requests above lowered ones finish. */
  setLimits(max: number, perClient: number): void {
    this.max = max;
    this.perClient.max = perClient;
  }

  get size(): number {
    return this.#active.size;
  }

  /**
   * A slot for the request `controller` aborts, counted as `client`'s (undefined: nobody's); its deadline
   * (KVG_ERR_REQUEST_TIMEOUT) runs from now. The client's bound is asked first: a client over its own is told so.
   * @throws KvgateError KVG_ERR_TOO_MANY_CLIENT_REQUESTS at the client's limit, KVG_ERR_TOO_MANY_REQUESTS at the limit.
   */
  take(controller: Abortable, client?: string): void {
    if (client !== undefined) this.perClient.refuseOver(client);
    if (this.#active.size >= this.max) {
      throw new KvgateError('KVG_ERR_TOO_MANY_REQUESTS', `${this.max} requests are in flight, the limit; retry later`);
    }
    this.#active.set(controller, performance.now() + this.#timeoutMs);
    if (client !== undefined) {
      this.#clientOf.set(controller, client);
      this.perClient.add(client);
    }
    if (this.#timer === undefined) this.#arm(this.#timeoutMs);
    this.#onChange(this.#active.size);
  }

  /** The request `controller` aborts gives its slot back (and its client's); called once per slot taken. */
  release(controller: Abortable): void {
    this.#active.delete(controller);
    const client = this.#clientOf.get(controller);
    if (client !== undefined) {
      this.#clientOf.delete(controller);
      this.perClient.release(client);
    }
    if (this.#active.size === 0 && this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    this.#onChange(this.#active.size);
    if (this.#active.size === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  #arm(ms: number): void {
    this.#timer = setTimeout(this.#onTimer, ms);
    this.#timer.unref();
  }

  /** Aborts the requests past their deadline (the oldest first), then sleeps until the next one's. */
  #expire(): void {
    this.#timer = undefined;
    // Timers have millisecond resolution: a deadline less than a millisecond away counts as passed.
    const now = performance.now();
    for (const [controller, deadline] of this.#active) {
      if (deadline === 0) continue;
      if (deadline - now >= 1) {
        this.#arm(deadline - now);
        return;
      }
      this.#active.set(controller, 0);
      controller.abort(
        new KvgateError('KVG_ERR_REQUEST_TIMEOUT', `the request did not complete within ${this.#timeoutMs} ms`),
      );
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
