/**
 * Sticky prefill workers per session (spec 5.5): `session id -> (worker, dp
 * rank)` with a sliding TTL on the injected clock. A session's requests go to
 * the prefill worker that already holds its conversation's KV, as long as that
 * worker stays eligible.
 *
 * Contract:
 * - a binding is made (or moved) when a prefill dispatch is accepted, and its
 *   expiry slides to `now + ttl` on every use;
 * - an expired binding is gone at the next lookup (and at `sweep`);
 * - a worker that leaves the pool, or a prefill that fails for any reason but
 *   a cancellation, unbinds its sessions;
 * - `close` (session_control action) unbinds after the request that carries it.
 * Bindings are advisory: losing one only costs a cache miss.
 */
import type { Clock } from '../core/clock.js';

/** Dynamo's default session timeout (`nvext.session_control.timeout`), seconds. */
export const DEFAULT_SESSION_TTL_MS = 300_000;

export interface SessionBinding {
  readonly workerId: number;
  readonly dpRank: number;
  /** Clock time after which the binding is gone. */
  readonly expiresAt: number;
  readonly ttlMs: number;
}

export class PrefillSessions {
  readonly #clock: Clock;
  readonly defaultTtlMs: number;
  readonly #bindings = new Map<string, SessionBinding>();

  constructor(clock: Clock, defaultTtlMs = DEFAULT_SESSION_TTL_MS) {
    this.#clock = clock;
    this.defaultTtlMs = defaultTtlMs;
  }

  get size(): number {
    return this.#bindings.size;
  }

  /** The live binding of a session (an expired one is dropped here). Does not slide the TTL. */
  lookup(sessionId: string): SessionBinding | undefined {
    const b = this.#bindings.get(sessionId);
    if (b === undefined) return undefined;
    if (this.#clock.now() >= b.expiresAt) {
      this.#bindings.delete(sessionId);
      return undefined;
    }
    return b;
  }

  /** Binds (or rebinds) a session and starts its TTL window now. */
  bind(sessionId: string, workerId: number, dpRank: number, ttlMs = this.defaultTtlMs): void {
    this.#bindings.set(sessionId, { workerId, dpRank, ttlMs, expiresAt: this.#clock.now() + ttlMs });
  }

  /** Slides a live binding's expiry to `now + ttl`; false when there is none. */
  touch(sessionId: string): boolean {
    const b = this.lookup(sessionId);
    if (b === undefined) return false;
    this.#bindings.set(sessionId, { ...b, expiresAt: this.#clock.now() + b.ttlMs });
    return true;
  }

  unbind(sessionId: string): boolean {
    return this.#bindings.delete(sessionId);
  }

  /** Drops every session bound to a worker (it left the pool); returns how many. */
  unbindWorker(workerId: number): number {
    let n = 0;
    for (const [id, b] of this.#bindings) {
      if (b.workerId === workerId) {
        this.#bindings.delete(id);
        n++;
      }
    }
    return n;
  }

  /** Drops expired bindings; returns how many. */
  sweep(): number {
    const now = this.#clock.now();
    let n = 0;
    for (const [id, b] of this.#bindings) {
      if (now >= b.expiresAt) {
        this.#bindings.delete(id);
        n++;
      }
    }
    return n;
  }
}
