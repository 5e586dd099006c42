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
import type { ErrorContext } from './engine-errors.js';

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
   * moves this; the timer, when it fires early for it, sleeps again for what is left. One timer per
   * deadline kind, not one per read.
   */
  #deadline = 0;
  readonly #onTimer = (): void => this.#fired();
  #started = false;
  #paused = false;
  #done = false;

  constructor(ctx: ErrorContext, firstByteMs: number | undefined, idleMs: number | undefined, onExpire: (err: KvgateError) => void) {
    this.#ctx = ctx;
    this.#idleMs = idleMs ?? 0;
    this.#onExpire = onExpire;
    if (firstByteMs !== undefined && firstByteMs > 0) this.#arm(firstByteMs, 'first byte');
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
    this.#clear();
    if (this.#idleMs > 0 && !this.#paused) this.#arm(this.#idleMs, 'stream idle');
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

  #arm(ms: number, kind: 'first byte' | 'stream idle'): void {
    this.#clear();
    this.#kind = kind;
    this.#ms = ms;
    this.#deadline = performance.now() + ms;
    this.#timer = setTimeout(this.#onTimer, ms);
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
    ? new KvgateError('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT', `the engine produced no output within ${ms} ms (${ctx.path})`, detail)
    : new KvgateError('KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT', `the engine's stream was idle for ${ms} ms (${ctx.path})`, detail);
}
