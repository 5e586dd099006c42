/**
 * Prefill load that shrinks while a slot computes it: Dynamo's `router_prefill_load_model: aic`, with the time a
 * prefill takes measured by the router instead of predicted by a perf model.
 *
 * Without it a request's uncached prompt tokens count in full until its first token, so a 100k-token prompt an engine
 * is seconds into still weighs as if untouched. With it, per slot, only the oldest request whose prefill is pending
 * is taken as running (the anchor, engines prefill first come first served): from the moment it became the anchor its
 * tokens fall linearly to zero over the time the slot takes to prefill that many,
 *
 *   load(now) = Σ booked prefill tokens − anchor's + ceil(anchor's × clamp(1 − elapsed / expected, 0, 1)),
 *
 * and when it completes the next oldest becomes the anchor then. `expected` is the anchor's tokens over the slot's
 * prefill rate: an exponential moving average of tokens per ms over the slot's earlier anchors, each from the moment it
 * became the anchor to its first token. Until a slot has completed one, its load is the booked tokens, as without the
 * model. A request freed before its first token (an error, a cancel) gives no rate sample.
 *
 * Pure: times are the caller's clock's.
 */
import type { ActiveRequest } from './active-request.js';

/** Weight of a new rate sample in a slot's moving average. */
const RATE_WEIGHT = 0.25;

/** A slot's pending prefills and its measured rate. */
interface SlotPrefills {
  /** The requests whose prefill is pending, in booking order (the first is the anchor). */
  readonly pending: Set<ActiveRequest>;
  /** When the current anchor became the anchor. */
  anchorStart: number;
  /** Prefill tokens per ms (0: none measured yet). */
  rate: number;
}

export class PrefillDecay {
  /** By slot, made when the slot books its first prefill. */
  #slots: (SlotPrefills | undefined)[] = [];

  /** `r` was booked on `slot` at `now` with prefill tokens to compute (none: nothing to decay). */
  added(slot: number, r: ActiveRequest, now: number): void {
    if (!(r.prefillTokens > 0)) return;
    let s = this.#slots[slot];
    if (s === undefined) this.#slots[slot] = s = { pending: new Set(), anchorStart: now, rate: 0 };
    s.pending.add(r);
    if (s.pending.size === 1) s.anchorStart = now;
  }

  /**
   * `r`'s prefill ended at `now` (`completed`: its first token came, before its tokens are cleared; else freed
   * before it). The anchor's completion is a rate sample, and the next pending request becomes the anchor.
   */
  ended(slot: number, r: ActiveRequest, now: number, completed: boolean): void {
    const s = this.#slots[slot];
    if (s === undefined || !s.pending.has(r)) return;
    const anchor = s.pending.values().next().value === r;
    s.pending.delete(r);
    if (!anchor) return;
    const elapsed = now - s.anchorStart;
    if (completed && elapsed > 0) {
      const sample = r.prefillTokens / elapsed;
      s.rate = s.rate === 0 ? sample : s.rate + RATE_WEIGHT * (sample - s.rate);
    }
    s.anchorStart = now;
  }

  /** The slot's prefill load at `now`, given its booked prefill tokens. */
  tokens(slot: number, booked: number, now: number): number {
    const s = this.#slots[slot];
    if (s === undefined || !(s.rate > 0)) return booked;
    const anchor = s.pending.values().next().value;
    if (anchor === undefined) return booked;
    const full = anchor.prefillTokens;
    const left = 1 - ((now - s.anchorStart) * s.rate) / full;
    return booked - full + Math.ceil(full * (left > 0 ? (left < 1 ? left : 1) : 0));
  }

  /** Forgets a slot (removed): its pending requests and its rate. */
  removeSlot(slot: number): void {
    this.#slots[slot] = undefined;
  }
}
