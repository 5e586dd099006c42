/**
 * Session-start priority (`session_priority`): kvgate gives each chat,
 * completion or Responses request it forwards the engine `priority` of its
 * root session's start (vLLM's Messages request has no such field), so that
 * engines in priority scheduling (vLLM's `--scheduling-policy priority`,
 * SGLang's `--enable-priority-scheduling`) admit the older session's turn
 * first and, when their KV cache runs short, preempt the youngest session's
 * request instead of the last one admitted. On an agent fleet short of KV this
 * keeps sessions that are far along from being evicted and recomputed over
 * and over (BENCHMARKS.md measures it).
 *
 * Contract:
 * - a session's start is when this router first saw it; a subagent's (a
 *   session naming a parent) is its parent's, so a whole agent tree shares
 *   one start; a request without a session is its own session, starting now;
 * - each sighting slides the session's (and its parent's) expiry by the
 *   session's timeout (default 300 s, at most `maxTtlMs`); a session unseen
 *   for longer starts again; `close` forgets it after the request;
 * - at most `maxSessions` starts are held, the least recently seen dropped
 *   first: losing one only makes that session younger; each drop, and each
 *   timeout clamped to `maxTtlMs`, is told to `onLimit`;
 * - the value is the start in Unix milliseconds (`epochOffsetMs` maps the
 *   clock onto it), negated for engines that serve higher values first, so
 *   router replicas give one session about the same value; each replica
 *   counts from its own first sighting.
 * A client's own `priority` is kept: the frontend has already dropped it, or clamped it into its tenant class's
 * `engine_priority` range (frontend's client-priority.ts).
 */
import type { Clock, SessionHint, SessionPriorityOrder } from '../common/index.js';
import type { RouterContext } from './context.js';
import {
  DEFAULT_MAX_SESSION_TTL_MS,
  DEFAULT_MAX_SESSIONS,
  DEFAULT_SESSION_TTL_MS,
  logLimitOnce,
  type SessionLimit,
} from './sticky-sessions.js';

export interface SessionPriorityOptions {
  readonly order: SessionPriorityOrder;
  /** Added to the clock's reading to make Unix milliseconds (the process's time origin for a monotonic clock). */
  readonly epochOffsetMs: number;
  /** The longest a session is remembered unseen, whatever its timeout (default 3600 s). */
  readonly maxTtlMs?: number | undefined;
  /** Session starts held (default 100 000). */
  readonly maxSessions?: number | undefined;
  /** Told of each limit applied, with the table it applied to (`sessionPriorityLimitReporter` counts and logs them). */
  readonly onLimit?: ((limit: SessionLimit, starts: SessionPriority) => void) | undefined;
}

interface Start {
  readonly at: number;
  expiresAt: number;
}

export class SessionPriority {
  readonly #clock: Clock;
  readonly #opts: SessionPriorityOptions;
  readonly maxTtlMs: number;
  readonly maxSessions: number;
  /** In least-recently-seen order (a sighting re-inserts at the end). */
  readonly #starts = new Map<string, Start>();

  constructor(clock: Clock, opts: SessionPriorityOptions) {
    this.#clock = clock;
    this.#opts = opts;
    this.maxTtlMs = opts.maxTtlMs ?? DEFAULT_MAX_SESSION_TTL_MS;
    this.maxSessions = opts.maxSessions ?? DEFAULT_MAX_SESSIONS;
  }

  get size(): number {
    return this.#starts.size;
  }

  /** The `priority` to forward with a request of `session` arriving now; records the sighting. */
  priorityOf(session: SessionHint | undefined): number {
    const now = this.#clock.now();
    let at = now;
    if (session !== undefined) {
      // The default timeout is bounded quietly; a timeout the session asks for above the bound is told.
      let ttlMs = Math.min(DEFAULT_SESSION_TTL_MS, this.maxTtlMs);
      if (session.timeoutSecs !== undefined) {
        ttlMs = Math.min(session.timeoutSecs * 1000, this.maxTtlMs);
        if (session.timeoutSecs * 1000 > this.maxTtlMs) this.#opts.onLimit?.('timeout', this);
      }
      const parent = session.parentId === undefined ? undefined : this.#see(session.parentId, now, now, ttlMs);
      at = this.#see(session.id, parent?.at ?? now, now, ttlMs).at;
      if (session.action === 'close') this.#starts.delete(session.id);
    }
    const ms = Math.round(at + this.#opts.epochOffsetMs);
    return this.#opts.order === 'lower_first' ? ms : -ms;
  }

  /** The live start of `id`, made the most recently seen with its expiry slid; or a new one at `startAt`. */
  #see(id: string, startAt: number, now: number, ttlMs: number): Start {
    const held = this.#starts.get(id);
    this.#starts.delete(id);
    const s: Start = held !== undefined && now < held.expiresAt ? held : { at: startAt, expiresAt: 0 };
    s.expiresAt = now + ttlMs;
    this.#starts.set(id, s);
    for (const oldest of this.#starts.keys()) {
      if (this.#starts.size <= this.maxSessions) break;
      this.#starts.delete(oldest);
      this.#opts.onLimit?.('capacity', this);
    }
    return s;
  }
}

/**
 * Reports a model's session-start limits: each is counted (`kvgate_router_session_priority_limits_total`) and
 * logged, the first of each kind as a warning.
 */
export function sessionPriorityLimitReporter(
  ctx: RouterContext,
  model: string,
): (limit: SessionLimit, starts: SessionPriority) => void {
  const log = logLimitOnce(ctx, 'kvgate_router_session_priority_limits_total', {
    timeout: 'a session asked for a timeout above the maximum: its start is held for the maximum',
    capacity: 'session starts at capacity: the least recently seen was dropped (it counts as new when it comes back)',
  });
  return (limit, starts) => {
    ctx.metrics?.sessionPriorityLimits.labels({ model, limit }).inc();
    log(limit, { model, maxSessionTimeoutS: starts.maxTtlMs / 1000, maxSessions: starts.maxSessions });
  };
}
