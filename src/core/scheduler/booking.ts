/**
 * Booking: a decided request enters the load bookkeeping (`ActiveSequences`)
 * and, where the router predicts caches itself, the approximate indexes
 * (approximate mode, predict-on-route, a worker whose events are not live).
 */
import type { PromptHashes } from '../../wasm/index.js';
import type { ActiveSequences } from '../active-sequences.js';
import { PEER_ID_PREFIX } from '../active-request.js';
import type { ApproximateIndex } from '../approximate.js';
import type { EffectiveKnobs } from './knobs.js';
import type { RouterConfigOverride } from '../../common/index.js';
import type { SlotTable } from './slots.js';
import type { BookkeepingObserver } from './types.js';

/** What booking reads of a request (a `SchedulingRequest` or a booking decided elsewhere). */
export interface BookedRequest {
  readonly requestId: string;
  readonly isl: number;
  readonly hashes: PromptHashes | null;
  readonly expectedOutputTokens?: number | undefined;
}

/** A booking decided elsewhere (`KvScheduler.addRequest`): its worker, and its overlap there when known. */
export interface AddedRequest extends BookedRequest {
  /** When it started (clock ms, not after now), for one booked again (a rejoin, a handover): its expiry counts from then. */
  readonly startedAt?: number | undefined;
  readonly workerId: number;
  readonly dpRank?: number;
  readonly overlapBlocks?: number;
  readonly override?: RouterConfigOverride;
}

/** The indexes a booking is recorded in (each null when off). */
export interface DecisionRecorders {
  readonly approximate: ApproximateIndex | null;
  readonly predicted: ApproximateIndex | null;
  readonly fallback: ApproximateIndex | null;
  readonly eventFallback: ((workerId: number) => boolean) | undefined;
}

export class Booker {
  readonly #table: SlotTable;
  readonly #active: ActiveSequences;
  readonly #rec: DecisionRecorders;
  readonly #blockSize: number;
  /** Told of every booking (replica sync); set by `KvScheduler.observe`. */
  observer: BookkeepingObserver | undefined;
  /** This router's requests a booking's expiry check force-freed since `takeExpired` last read them. */
  #expired = 0;

  constructor(table: SlotTable, active: ActiveSequences, recorders: DecisionRecorders, blockSize: number) {
    this.#table = table;
    this.#active = active;
    this.#rec = recorders;
    this.#blockSize = blockSize;
  }

  /** Books `req` on `slot` with `overlap` cached blocks there, started now or at `startedAt`. Returns the prefill tokens booked. */
  book(req: BookedRequest, slot: number, overlap: number, knobs: EffectiveKnobs, startedAt?: number): number {
    const bs = this.#blockSize;
    const { isl, hashes } = req;
    const uncached = isl - overlap * bs;
    const prefillTokens = knobs.trackPrefillTokens && uncached > 0 ? uncached : 0;
    const promptBlocks = hashes !== null ? hashes.seq.length : Math.floor(isl / bs);
    const share = knobs.shareable;
    const privateBlocks = knobs.trackActiveBlocks && !share ? promptBlocks : 0;
    const shared = share ? hashes : null;
    this.#active.add({
      requestId: req.requestId,
      slot,
      prefillTokens,
      expectedOutputTokens: req.expectedOutputTokens,
      hashes: shared,
      privateBlocks,
      startedAt,
    });
    this.observer?.added({
      requestId: req.requestId,
      workerId: this.#table.slotWorker[slot]!,
      dpRank: this.#table.slotRank[slot]!,
      seq: shared !== null && shared.seq.length > 0 ? shared.seq : null,
      privateBlocks,
      prefillTokens,
      expectedOutputTokens: req.expectedOutputTokens,
      prefillCompleted: false,
      outputBlocks: 0,
      decay: undefined,
    });
    if (hashes !== null && hashes.seq.length > 0) this.#record(slot, hashes);
    return prefillTokens;
  }

  #record(slot: number, hashes: PromptHashes): void {
    const w = this.#table.slotWorker[slot]!;
    const r = this.#table.slotRank[slot]!;
    const rec = this.#rec;
    rec.approximate?.record(w, r, hashes);
    rec.predicted?.record(w, r, hashes);
    if (rec.fallback !== null && rec.eventFallback!(w)) rec.fallback.record(w, r, hashes);
  }

  /**
   * Requests force-freed at their expiry (`ActiveSequences.expire`'s ids): the observer is told of this router's
   * (a peer's booking is its owner's to free); returns them.
   */
  freedAtExpiry(ids: readonly string[]): string[] {
    const mine = ids.filter((id) => !id.startsWith(PEER_ID_PREFIX));
    for (const id of mine) this.observer?.freed(id);
    return mine;
  }

  /** Requests a booking's expiry check force-freed between two ticks: `freedAtExpiry`, and counted for the tick. */
  expired(ids: readonly string[]): void {
    this.#expired += this.freedAtExpiry(ids).length;
  }

  /** How many of this router's requests `expired` counted since the last call (the tick reports them). */
  takeExpired(): number {
    const n = this.#expired;
    this.#expired = 0;
    return n;
  }
}
