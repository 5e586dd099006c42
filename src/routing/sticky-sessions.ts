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
 * - a worker that leaves for good (removed from the configuration or
 *   discovery) unbinds its sessions at once (`unbindWorker`), and a sticky
 *   worker that refuses a request for any reason but a client abort loses the
 *   session (`refused`);
 * - a worker only marked down (a failed health check, an ejection: still
 *   registered) keeps its sessions' bindings (`holdWorker`) until it is up
 *   again (`releaseWorker`) or leaves: its engine keeps their KV cache through
 *   a flap, so a session that sent nothing meanwhile goes back to it, where
 *   its context is, instead of being prefilled again elsewhere. A held
 *   binding is never routed to (a request must not wait for, nor fail on, a
 *   worker that is down): the session's request meanwhile goes where an
 *   unbound one would (its parent's worker, else the router's choice) and,
 *   served there, moves the binding there as any accepted dispatch does, the
 *   worker that now holds its whole context (going back would prefill the
 *   turns it missed and strand that copy). A held binding still expires on
 *   its TTL, which nothing slides while its worker is down;
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

/**
 * What became of a worker's bindings: `held` (it was marked down: kept), `returned` (up again: routed to again),
 * `moved` (a held binding's session was served elsewhere meanwhile: bound there), `dropped` (it left for good).
 */
export type SessionPinEvent = 'held' | 'returned' | 'moved' | 'dropped';
/** Told of each such change with the worker and the number of bindings (the two per-worker events only when > 0). */
export type SessionPinHandler = (event: SessionPinEvent, workerId: number, bindings: number) => void;

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
  /** Workers marked down and still registered: their bindings are kept but not routed to. */
  readonly #held = new Set<number>();
  /** Told of what becomes of a worker's bindings when it goes down, comes back or leaves (see `SessionPinEvent`). */
  onPin: SessionPinHandler | undefined;
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
   * excluded), else its parent session's; a binding to an ineligible worker is dropped,
   * one to a worker held down is kept and passed over. Does not slide the TTL.
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
    // Held (its worker is down for now): not routed to, not dropped.
    if (this.#held.has(b.workerId)) return undefined;
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
    else {
      if (b !== undefined && this.#held.has(b.workerId)) this.onPin?.('moved', b.workerId, 1);
      this.bind(session.id, slot, session.timeoutSecs !== undefined ? session.timeoutSecs * 1000 : undefined);
    }
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

  /** Drops every session bound to a worker (it left for good, held or not); returns how many. */
  unbindWorker(workerId: number): number {
    this.#held.delete(workerId);
    let n = 0;
    for (const [id, b] of this.#bindings) {
      if (b.workerId === workerId) {
        this.#bindings.delete(id);
        n++;
      }
    }
    if (n > 0) this.onPin?.('dropped', workerId, n);
    return n;
  }

  /** The worker was marked down (still registered): its bindings are kept, not routed to; returns how many. */
  holdWorker(workerId: number): number {
    this.#held.add(workerId);
    const n = this.#liveOn(workerId);
    if (n > 0) this.onPin?.('held', workerId, n);
    return n;
  }

  /** The worker is routable again: its bindings still live (not expired, not moved) route to it; returns how many. */
  releaseWorker(workerId: number): number {
    if (!this.#held.delete(workerId)) return 0;
    const n = this.#liveOn(workerId);
    if (n > 0) this.onPin?.('returned', workerId, n);
    return n;
  }

  /** Whether the worker's bindings are held (it is marked down). */
  holds(workerId: number): boolean {
    return this.#held.has(workerId);
  }

  #liveOn(workerId: number): number {
    const now = this.#clock.now();
    let n = 0;
    for (const b of this.#bindings.values()) if (b.workerId === workerId && b.expiresAt > now) n++;
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
function sessionLimitReporter(ctx: RouterContext, model: string, workerType: WorkerRole): SessionLimitHandler {
  const log = logLimitOnce(ctx, 'kvgate_router_session_limits_total', {
    timeout: 'a session asked for a timeout above the maximum: clamped',
    capacity: 'sticky sessions at capacity: the least recently used was dropped',
  });
  return (limit, sessions) => {
    ctx.metrics?.sessionLimits.labels({ model, worker_type: workerType, limit }).inc();
    log(limit, { workerType, maxSessionTimeoutS: sessions.maxTtlMs / 1000, maxSessions: sessions.maxSessions });
  };
}

/** A pool's sticky sessions, their limits and what becomes of a worker's bindings counted and logged. */
export function poolSessions(
  ctx: RouterContext,
  model: string,
  workerType: WorkerRole,
  ttlMs: number | undefined,
  limits: SessionLimits | undefined,
): StickySessions {
  const s = new StickySessions(ctx.clock, ttlMs, limits, sessionLimitReporter(ctx, model, workerType));
  s.onPin = sessionPinReporter(ctx, model, workerType);
  return s;
}

/**
 * Reports what becomes of a pool's bindings when a worker goes down, comes back or leaves: each counted by binding
 * (`kvgate_router_session_pins_total`) and logged, a move while down at debug (one per request).
 */
function sessionPinReporter(ctx: RouterContext, model: string, workerType: WorkerRole): SessionPinHandler {
  const said: Record<SessionPinEvent, string> = {
    held: 'kept while it is down (routed elsewhere meanwhile; back to it when it returns, unless served elsewhere first)',
    returned: 'routed to it again: it is back',
    moved: 'moved: its session was served elsewhere while it was down',
    dropped: 'dropped: it left',
  };
  return (event, workerId, bindings) => {
    ctx.metrics?.sessionPins.labels({ model, worker_type: workerType, event }).inc(bindings);
    const line = { workerId, workerType, sessionPins: bindings, event };
    const msg = `worker ${workerId}: ${bindings} session pin${bindings === 1 ? '' : 's'} ${said[event]}`;
    if (event === 'moved') ctx.logger.debug(line, msg);
    else ctx.logger.info(line, msg);
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
