/**
 * Sticky sessions (`x-session-id` / `nvext.session_control`): `session id ->
 * (worker, dp rank)` with a sliding TTL on the injected clock, so a session's
 * requests go back to the worker that already holds its conversation's KV.
 * One class serves both pools: the aggregated/decode pool (ModelRouter) and
 * the prefill pool (PrefillRouter) each own an instance.
 *
 * Contract:
 * - a binding is made (or moved) when a dispatch is accepted (`served`); a
 *   binding to the same slot only slides its expiry to `now + ttl`, unless
 *   the request names a timeout, which then replaces the binding's TTL;
 * - an expired binding is gone at the next lookup (and at `sweep`);
 * - a worker that leaves the pool unbinds its sessions (`unbindWorker`), and a
 *   sticky worker that refuses a request for any reason but a client abort
 *   loses the session (`refused`);
 * - `close` (session_control action) unbinds after the request that carries it.
 * Bindings are advisory: losing one only costs a cache miss.
 */
import type { Clock, SessionHint, WorkerRank } from '../common/index.js';
import { isKvgateError } from '../errors/index.js';

/** Dynamo's default session timeout (`nvext.session_control.timeout`), in milliseconds. */
const DEFAULT_SESSION_TTL_MS = 300_000;

export interface SessionBinding extends WorkerRank {
  /** Clock time after which the binding is gone. */
  readonly expiresAt: number;
  readonly ttlMs: number;
}

export class StickySessions {
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

  /**
   * The session's bound slot while its worker is still `eligible` (in the pool, not
   * excluded); a binding to an ineligible worker is dropped. Does not slide the TTL.
   */
  stickySlot(session: SessionHint | undefined, eligible: (workerId: number) => boolean): WorkerRank | undefined {
    if (session === undefined) return undefined;
    const b = this.lookup(session.id);
    if (b === undefined) return undefined;
    if (eligible(b.workerId)) return b;
    this.unbind(session.id);
    return undefined;
  }

  /** A dispatch of the session's request to `slot` was accepted: bind, slide, or (on `close`) unbind. */
  served(session: SessionHint | undefined, slot: WorkerRank): void {
    if (session === undefined) return;
    if (session.action === 'close') {
      this.unbind(session.id);
      return;
    }
    // A timeout the request names always takes effect; otherwise a binding to the same slot keeps its own TTL and slides.
    const b = this.lookup(session.id);
    if (session.timeoutSecs === undefined && b !== undefined && b.workerId === slot.workerId && b.dpRank === slot.dpRank) this.touch(session.id);
    else this.bind(session.id, slot.workerId, slot.dpRank, session.timeoutSecs !== undefined ? session.timeoutSecs * 1000 : undefined);
  }

  /** The sticky worker failed the request with `err`: it no longer holds the session, unless the client went away. */
  refused(session: SessionHint | undefined, err: unknown): void {
    if (session !== undefined && !isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED')) this.unbind(session.id);
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
