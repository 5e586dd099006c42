/**
 * A request's cancellation: the part of AbortController / AbortSignal that
 * kvgate's request path uses (fire once with a reason; read `aborted` and
 * `reason`; add and remove 'abort' listeners).
 *
 * Why not AbortController itself: every request has one, and on Node 20 its
 * signal is an EventTarget whose creation and listener bookkeeping cost about
 * 3 % of a tiny request's CPU in the gateway bench (docs/benchmarks-history.md,
 * "the fourth round"). This keeps
 * AbortSignal's contract for those operations, so a real AbortSignal is a
 * `CancelSignal` too (library callers may pass one):
 * - listeners run once, in the order added, synchronously inside `abort()`;
 *   one added after the abort never runs (check `aborted` first, as with
 *   AbortSignal);
 * - `abort()` a second time does nothing;
 * - a listener that throws does not stop the others; its error is rethrown on
 *   a later microtask (uncaught, as EventTarget reports it), never swallowed.
 */

/** What a request's code reads and listens to (structurally a subset of AbortSignal). */
export interface CancelSignal {
  readonly aborted: boolean;
  /** The value `abort()` was given; undefined until then. */
  readonly reason: unknown;
  /** Throws `reason` once aborted. */
  throwIfAborted(): void;
  addEventListener(type: 'abort', listener: () => void, options?: { once?: boolean }): void;
  removeEventListener(type: 'abort', listener: () => void): void;
}

/** The controller and its signal in one object (`signal` is the object itself). */
export class Cancellation implements CancelSignal {
  #aborted = false;
  #reason: unknown = undefined;
  /** Most requests never get a listener past the engine leg's, so one slot before an array. */
  #one: (() => void) | undefined = undefined;
  #more: (() => void)[] | undefined = undefined;

  get signal(): CancelSignal {
    return this;
  }

  get aborted(): boolean {
    return this.#aborted;
  }

  get reason(): unknown {
    return this.#reason;
  }

  throwIfAborted(): void {
    if (this.#aborted) throw this.#reason;
  }

  addEventListener(_type: 'abort', listener: () => void): void {
    if (this.#aborted) return;
    if (this.#one === undefined && this.#more === undefined) this.#one = listener;
    else (this.#more ??= []).push(listener);
  }

  removeEventListener(_type: 'abort', listener: () => void): void {
    if (this.#one === listener) {
      this.#one = undefined;
      return;
    }
    const more = this.#more;
    if (more === undefined) return;
    const i = more.indexOf(listener);
    if (i >= 0) more.splice(i, 1);
  }

  /** Fires the signal with `reason` (once; later calls do nothing). */
  abort(reason?: unknown): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    const one = this.#one;
    const more = this.#more;
    this.#one = undefined;
    this.#more = undefined;
    if (one !== undefined) call(one);
    if (more !== undefined) for (const l of more) call(l);
  }
}

function call(listener: () => void): void {
  try {
    listener();
  } catch (err) {
    queueMicrotask(() => {
      throw err;
    });
  }
}
