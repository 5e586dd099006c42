/**
 * The two progress deadlines of one engine leg, modelled on Envoy's per-try
 * timeout and stream idle timeout:
 *
 * - first byte: from dispatch until the leg's first output (the first SSE
 *   event of a stream, the first body byte of a JSON answer);
 * - stream idle: between two SSE events, counted only while kvgate reads
 *   (a consumer that stops reading pauses the socket, and that silence is
 *   kvgate's own, not the engine's).
 *
 * Either expiry calls `onExpire` once with the typed error; the handler then
 * fails the leg and aborts the upstream request. 0 or undefined turns a
 * deadline off.
 */
import { KvgateError } from '../errors/index.js';
import type { DispatchPhase, ErrorContext } from './engine-errors.js';

export class LegTimers {
  readonly #ctx: ErrorContext;
  readonly #idleMs: number;
  readonly #onExpire: (err: KvgateError) => void;
  #timer: NodeJS.Timeout | undefined;
  #kind: 'first byte' | 'stream idle' = 'first byte';
  /** The armed deadline's length, for its error. */
  #ms = 0;
  /**
   * When the armed deadline expires (`performance.now()` time). Progress on a running stream only
   * moves this; the timer, when it fires early for it, sleeps again for what is left. The first timer
   * sleeps for the shorter of the two deadlines, so the idle deadline takes it over at the first
   * output: one timer per leg, not one per read or per deadline.
   */
  #deadline = 0;
  readonly #onTimer = (): void => this.#fired();
  #started = false;
  #paused = false;
  #done = false;

  constructor(
    ctx: ErrorContext,
    firstByteMs: number | undefined,
    idleMs: number | undefined,
    onExpire: (err: KvgateError) => void,
  ) {
    this.#ctx = ctx;
    this.#idleMs = idleMs ?? 0;
    this.#onExpire = onExpire;
    if (firstByteMs !== undefined && firstByteMs > 0)
      this.#arm(firstByteMs, 'first byte', this.#idleMs > 0 ? Math.min(firstByteMs, this.#idleMs) : firstByteMs);
  }

  /** The leg produced output (an event, or a JSON body's first byte): the first-byte deadline is met, idle restarts. */
  progress(): void {
    if (this.#done) return;
    if (this.#started && this.#timer !== undefined) {
      // The idle deadline is running: push it back (the timer checks it when it fires).
      this.#deadline = performance.now() + this.#idleMs;
      return;
    }
    this.#started = true;
    if (this.#idleMs === 0 || this.#paused) {
      this.#clear();
      return;
    }
    if (this.#timer === undefined) {
      this.#arm(this.#idleMs, 'stream idle');
      return;
    }
    // The first-byte timer sleeps no longer than the idle deadline: it carries that deadline from here on.
    this.#kind = 'stream idle';
    this.#ms = this.#idleMs;
    this.#deadline = performance.now() + this.#idleMs;
  }

  /** kvgate stopped reading (backpressure): silence from here on is not the engine's. */
  pause(): void {
    this.#paused = true;
    if (this.#started) this.#clear();
  }

  resume(): void {
    this.#paused = false;
    if (this.#started && !this.#done && this.#idleMs > 0) this.#arm(this.#idleMs, 'stream idle');
  }

  /** The leg is over, however it ended. */
  stop(): void {
    this.#done = true;
    this.#clear();
  }

  /** Arms the deadline `ms` from now, with a timer that first wakes after `sleep` (at most `ms`). */
  #arm(ms: number, kind: 'first byte' | 'stream idle', sleep = ms): void {
    this.#clear();
    this.#kind = kind;
    this.#ms = ms;
    this.#deadline = performance.now() + ms;
    this.#timer = setTimeout(this.#onTimer, sleep);
    this.#timer.unref();
  }

  #fired(): void {
    this.#timer = undefined;
    if (this.#done) return;
    // Timers have millisecond resolution: what is left below one millisecond counts as expired.
    const left = this.#deadline - performance.now();
    if (left >= 1) {
      this.#timer = setTimeout(this.#onTimer, left);
      this.#timer.unref();
      return;
    }
    this.#done = true;
    this.#onExpire(legTimeoutError(this.#ctx, this.#kind, this.#ms));
  }

  #clear(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

function legTimeoutError(ctx: ErrorContext, kind: 'first byte' | 'stream idle', ms: number): KvgateError {
  // The message reaches the client: the engine's URL stays in `detail` (logs only).
  const detail = { worker: ctx.worker, path: ctx.path, timeoutMs: ms, migratable: true };
  return kind === 'first byte'
    ? new KvgateError(
        'KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT',
        `the engine produced no output within ${ms} ms (${ctx.path})`,
        detail,
      )
    : new KvgateError(
        'KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT',
        `the engine's stream was idle for ${ms} ms (${ctx.path})`,
        detail,
      );
}

/**
 * A leg's expired deadline as its dispatch reached it (`phase` in its detail). One still `queued` never left the
 * worker's pool of `connections` connections, every one busy: the engine never saw it (it is told so, and routing
 * does not blame the engine for it), kvgate's own bound on connections to the worker held it.
 */
export function expiredIn(err: KvgateError, phase: DispatchPhase, connections: number): KvgateError {
  if (phase !== 'queued') return new KvgateError(err.code, err.message, { ...err.detail, phase });
  const ctx = { worker: String(err.detail?.['worker']), path: String(err.detail?.['path']) };
  const ms = err.detail?.['timeoutMs'];
  return new KvgateError(
    err.code,
    `no connection to the engine was free within ${String(ms)} ms: all ${connections} were busy (${ctx.path})`,
    { ...err.detail, phase, connections },
  );
}
