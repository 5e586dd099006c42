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
 * - `close` (session_control action) unbinds after the request that carries it;
 * - the client chooses the timeout, so it is bounded: a TTL above `maxTtlMs` is
 *   clamped to it (not refused: the request itself is fine), and at most
 *   `maxSessions` bindings are kept, the least recently bound or used dropped
 *   first. Each clamp and eviction is reported through `onLimit`.
 * Bindings are advisory: losing one only costs a cache miss.
 */
import {
  defaultSessionAffinity,
  type Clock,
  type RouterMode,
  type SessionAffinity,
  type SessionHint,
  type WorkerRank,
  type WorkerRole,
} from '../common/index.js';
import { isKvgateError } from '../errors/index.js';
import type { RouterContext } from './context.js';

/** Dynamo's default session timeout (`nvext.session_control.timeout`), in milliseconds. */
export const DEFAULT_SESSION_TTL_MS = 300_000;
/** Default upper bounds (the gateway config sets its own: limits.max_session_timeout_s, limits.max_sessions). */
export const DEFAULT_MAX_SESSION_TTL_MS = 3_600_000;
export const DEFAULT_MAX_SESSIONS = 100_000;

/** Whether a model's sessions pin its requests: its `session_affinity`, else its mode's default. */
export function pinsSessions(affinity: SessionAffinity | undefined, mode: RouterMode): boolean {
  return (affinity ?? defaultSessionAffinity(mode)) === 'pin';
}

export interface SessionLimits {
  /** The longest TTL a binding gets, whatever the request asks for (default 3600 s). */
  readonly maxTtlMs?: number | undefined;
  /** Bindings kept; beyond it the least recently used one is dropped (default 100 000). */
  readonly maxSessions?: number | undefined;
}

/** Which bound applied: a requested timeout was clamped, or an entry was dropped for room. */
export type SessionLimit = 'timeout' | 'capacity';
type SessionLimitHandler = (limit: SessionLimit, sessions: StickySessions) => void;

/** A binding as router replicas share it. */
export interface SharedSessionBinding extends WorkerRank {
  readonly session: string;
  readonly ttlMs: number;
}

export interface SessionBinding extends WorkerRank {
  /** Clock time after which the binding is gone. */
  readonly expiresAt: number;
  readonly ttlMs: number;
}

export class StickySessions {
  readonly #clock: Clock;
  readonly defaultTtlMs: number;
  readonly maxTtlMs: number;
  readonly maxSessions: number;
  readonly #onLimit: SessionLimitHandler | undefined;
  /** In least-recently-used order (a bind or touch re-inserts at the end). */
  readonly #bindings = new Map<string, SessionBinding>();
  /** Told of every binding made here (replica sync shares them); not of adopted ones. */
  onBind: ((binding: SharedSessionBinding) => void) | undefined;

  constructor(
    clock: Clock,
    defaultTtlMs = DEFAULT_SESSION_TTL_MS,
    limits: SessionLimits = {},
    onLimit?: SessionLimitHandler,
  ) {
    this.#clock = clock;
    this.maxTtlMs = limits.maxTtlMs ?? DEFAULT_MAX_SESSION_TTL_MS;
    this.maxSessions = limits.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.defaultTtlMs = Math.min(defaultTtlMs, this.maxTtlMs);
    this.#onLimit = onLimit;
  }

  get size(): number {
    return this.#bindings.size;
  }

  /**
   * The session's bound slot while its worker is still `eligible` (in the pool, not
   * excluded), else its parent session's; a binding to an ineligible worker is dropped.
   * Does not slide the TTL.
   */
  stickySlot(session: SessionHint | undefined, eligible: (workerId: number) => boolean): WorkerRank | undefined {
    if (session === undefined) return undefined;
    const own = this.#eligibleBinding(session.id, eligible);
    if (own !== undefined || session.parentId === undefined) return own;
    // An unbound subagent goes where its parent's context is (the app prefix and the parent's turns).
    return this.#eligibleBinding(session.parentId, eligible);
  }

  #eligibleBinding(id: string, eligible: (workerId: number) => boolean): WorkerRank | undefined {
    const b = this.lookup(id);
    if (b === undefined) return undefined;
    if (eligible(b.workerId)) return b;
    this.unbind(id);
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
    if (
      session.timeoutSecs === undefined &&
      b !== undefined &&
      b.workerId === slot.workerId &&
      b.dpRank === slot.dpRank
    )
      this.touch(session.id);
    else this.bind(session.id, slot, session.timeoutSecs !== undefined ? session.timeoutSecs * 1000 : undefined);
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

  /**
   * Binds (or rebinds) a session and starts its TTL window now; a TTL above `maxTtlMs` is
   * clamped, and the least recently used binding makes room when `maxSessions` are held.
   */
  bind(sessionId: string, slot: WorkerRank, ttlMs = this.defaultTtlMs): void {
    if (ttlMs > this.maxTtlMs) {
      ttlMs = this.maxTtlMs;
      this.#onLimit?.('timeout', this);
    }
    this.#set(sessionId, slot, ttlMs);
    this.onBind?.({ session: sessionId, workerId: slot.workerId, dpRank: slot.dpRank, ttlMs });
  }

  /**
   * A binding another router replica made: taken only when the session has no live binding
   * here (the first live binding wins). Returns whether it was taken.
   */
  adopt(b: SharedSessionBinding): boolean {
    if (this.lookup(b.session) !== undefined) return false;
    this.#set(b.session, b, Math.min(b.ttlMs, this.maxTtlMs));
    return true;
  }

  /** Every live binding, for a replica's snapshot (TTL = what remains of it). */
  liveBindings(): SharedSessionBinding[] {
    const now = this.#clock.now();
    const out: SharedSessionBinding[] = [];
    for (const [session, b] of this.#bindings)
      if (b.expiresAt > now) out.push({ session, workerId: b.workerId, dpRank: b.dpRank, ttlMs: b.expiresAt - now });
    return out;
  }

  #set(sessionId: string, slot: WorkerRank, ttlMs: number): void {
    this.#bindings.delete(sessionId);
    this.#bindings.set(sessionId, {
      workerId: slot.workerId,
      dpRank: slot.dpRank,
      ttlMs,
      expiresAt: this.#clock.now() + ttlMs,
    });
    for (const oldest of this.#bindings.keys()) {
      if (this.#bindings.size <= this.maxSessions) break;
      this.#bindings.delete(oldest);
      this.#onLimit?.('capacity', this);
    }
  }

  /** Slides a live binding's expiry to `now + ttl` (and makes it the most recently used); false when there is none. */
  touch(sessionId: string): boolean {
    const b = this.lookup(sessionId);
    if (b === undefined) return false;
    this.#bindings.delete(sessionId);
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

/**
 * Reports a pool's session limits: every clamp and eviction is counted
 * (`kvgate_router_session_limits_total`) and logged (`logLimitOnce`).
 */
export function sessionLimitReporter(ctx: RouterContext, model: string, workerType: WorkerRole): SessionLimitHandler {
  const log = logLimitOnce(ctx, 'kvgate_router_session_limits_total', {
    timeout: 'a session asked for a timeout above the maximum: clamped',
    capacity: 'sticky sessions at capacity: the least recently used was dropped',
  });
  return (limit, sessions) => {
    ctx.metrics?.sessionLimits.labels({ model, worker_type: workerType, limit }).inc();
    log(limit, { workerType, maxSessionTimeoutS: sessions.maxTtlMs / 1000, maxSessions: sessions.maxSessions });
  };
}

/**
 * Logs a session limit: the first of each kind as a warning that names the counter, later ones at debug (a
 * client holding many sessions would otherwise flood the log).
 */
export function logLimitOnce(
  ctx: RouterContext,
  counter: string,
  messages: Readonly<Record<SessionLimit, string>>,
): (limit: SessionLimit, fields: Record<string, unknown>) => void {
  const warned = new Set<SessionLimit>();
  return (limit, fields) => {
    const msg = messages[limit];
    if (warned.has(limit)) ctx.logger.debug(fields, msg);
    else {
      warned.add(limit);
      ctx.logger.warn(fields, `${msg} (further ones are counted in ${counter})`);
    }
  };
}
