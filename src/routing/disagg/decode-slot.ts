/**
 * A P/D request's decode slot, booked before its prefill is sent: the decode side must take the request before
 * anything is sent. A prefill whose decode is refused afterwards (every decode worker overloaded, its queue full)
 * burns prefill compute and leaves its KV on the prefill engine, and a burst wider than the decode side would fail
 * in a wave after all its prefills ran. A refusal is the client's 503 with nothing sent (deliberately unlike
 * Dynamo's PrefillRouter, which routes the decode once the prefill is on its way).
 *
 * Contract: exactly one of `take` (the decode leg's dispatch owns the booking from then on: its guard releases
 * it) and `release` (decode is never sent: the prefill failed or was refused, the client left first) acts.
 */
import type { CancelSignal } from '../../common/index.js';
import type { RequestTracker } from '../../core/index.js';
import type { PushRouter } from '../push/push-router.js';
import type { LegRequest, Selection } from '../push/types.js';
import { decodeOverrideOf } from './handoff.js';

export class DecodeSlot {
  readonly #pool: PushRouter;
  #booking: { readonly leg: LegRequest; readonly sel: Selection } | undefined;

  private constructor(pool: PushRouter, leg: LegRequest, sel: Selection) {
    this.#pool = pool;
    this.#booking = { leg, sel };
  }

  /**
   * Books a decode slot for `base` (with the decode override), its wait bound by `signal`.
   * @throws as `PushRouter.select` when the decode side refuses it (nothing is booked then).
   */
  static async book(
    pool: PushRouter,
    base: LegRequest,
    signal: CancelSignal,
    tracker: RequestTracker,
    exclude: ReadonlySet<number> | undefined,
  ): Promise<DecodeSlot> {
    const override = decodeOverrideOf(base.routing.routerConfigOverride);
    const leg: LegRequest = {
      ...base,
      phase: 'decode',
      routing: { ...base.routing, routerConfigOverride: override },
      signal,
      tracker,
      onDispatched: undefined,
    };
    return new DecodeSlot(pool, leg, await pool.select(leg, 'book', exclude));
  }

  /** The booked slot, for the decode leg's dispatch, which owns it from now on; undefined after either call. */
  take(): Selection | undefined {
    const sel = this.#booking?.sel;
    this.#booking = undefined;
    return sel;
  }

  /** Releases the booking unless it was taken. */
  release(): void {
    const b = this.#booking;
    this.#booking = undefined;
    if (b !== undefined) this.#pool.unbook(b.leg, b.sel);
  }
}
