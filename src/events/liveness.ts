/**
 * Whether a (worker, dp_rank)'s KV events can be trusted right now.
 *
 * - `never`: no usable batch has arrived since the slot was registered (the
 *   engine runs without events, the endpoint is wrong, every event is refused).
 * - `stale`: requests were dispatched to the slot, and for `staleAfterMs`
 *   since the first of them no usable batch arrived. An engine that serves
 *   requests stores blocks, so silence while serving means the stream broke.
 * - `stale` also, for `staleAfterMs`, after the slot was cleared without a
 *   replay to restore it (`degrade`): the index lost what the engine holds.
 * - `live`: otherwise. An idle engine is silent and still live.
 *
 * The router scores `never` and `stale` slots in approximate mode (its own
 * routing decisions with a TTL) instead of trusting an index that stopped
 * moving. "Usable" means at least one event changed the index as the engine
 * meant, or the batch was empty (a heartbeat).
 */
import type { Clock, WorkerRank } from '../common/index.js';

export type EventStatus = 'live' | 'stale' | 'never';

const SEVERITY: Record<EventStatus, number> = { live: 0, stale: 1, never: 2 };

interface SlotLiveness {
  lastEventAt: number | undefined;
  /** Time of the first dispatch after the last usable batch; undefined when none is waiting. */
  awaitingSince: number | undefined;
  /** Until when the slot is `stale` after being cleared without a restore. */
  degradedUntil: number | undefined;
}

export interface EventLivenessOptions {
  clock: Clock;
  /** Silence while serving, in ms, after which a slot is `stale`. */
  staleAfterMs: number;
}

export class EventLiveness {
  readonly #clock: Clock;
  readonly #staleAfterMs: number;
  readonly #slots = new Map<number, Map<number, SlotLiveness>>();

  constructor(opts: EventLivenessOptions) {
    if (!(opts.staleAfterMs > 0)) throw new RangeError(`staleAfterMs must be > 0, got ${opts.staleAfterMs}`);
    this.#clock = opts.clock;
    this.#staleAfterMs = opts.staleAfterMs;
  }

  #slot(slot: WorkerRank, create: boolean): SlotLiveness | undefined {
    const { workerId, dpRank } = slot;
    let ranks = this.#slots.get(workerId);
    if (ranks === undefined) {
      if (!create) return undefined;
      this.#slots.set(workerId, (ranks = new Map()));
    }
    let s = ranks.get(dpRank);
    if (s === undefined && create)
      ranks.set(dpRank, (s = { lastEventAt: undefined, awaitingSince: undefined, degradedUntil: undefined }));
    return s;
  }

  /** Starts tracking a slot (as `never`). Idempotent. */
  register(slot: WorkerRank): void {
    this.#slot(slot, true);
  }

  /** Stops tracking a slot. */
  unregister(slot: WorkerRank): void {
    const ranks = this.#slots.get(slot.workerId);
    ranks?.delete(slot.dpRank);
    if (ranks?.size === 0) this.#slots.delete(slot.workerId);
  }

  /** A usable batch arrived. */
  noteEvent(slot: WorkerRank): void {
    const s = this.#slot(slot, false);
    if (s === undefined) return;
    s.lastEventAt = this.#clock.now();
    s.awaitingSince = undefined;
  }

  /** The slot's index was cleared with nothing to restore it: `stale` for the next `staleAfterMs`. */
  degrade(slot: WorkerRank): void {
    const s = this.#slot(slot, false);
    if (s !== undefined) s.degradedUntil = this.#clock.now() + this.#staleAfterMs;
  }

  /** The router sent a request to the slot. */
  noteDispatch(slot: WorkerRank): void {
    const s = this.#slot(slot, false);
    if (s !== undefined && s.awaitingSince === undefined) s.awaitingSince = this.#clock.now();
  }

  /**
   * The slot's status; without `dpRank`, the worst over the worker's ranks.
   * An unknown worker or slot is `never`.
   */
  status(workerId: number, dpRank?: number): EventStatus {
    const ranks = this.#slots.get(workerId);
    if (ranks === undefined) return 'never';
    if (dpRank !== undefined) {
      const s = ranks.get(dpRank);
      return s === undefined ? 'never' : this.#statusOf(s);
    }
    let worst: EventStatus = 'live';
    for (const s of ranks.values()) {
      const st = this.#statusOf(s);
      if (SEVERITY[st] > SEVERITY[worst]) worst = st;
    }
    return ranks.size === 0 ? 'never' : worst;
  }

  /**
   * Whether a rank of the worker that never had a usable batch (`never`) has had a request waiting for one for
   * `staleAfterMs`: serving, yet silent since it was registered (a wrong endpoint, an engine that publishes
   * nothing). Its status stays `never`; this tells that silence from an engine that was never sent a request.
   */
  silentWhileServing(workerId: number): boolean {
    const now = this.#clock.now();
    for (const s of this.#slots.get(workerId)?.values() ?? [])
      if (s.lastEventAt === undefined && s.awaitingSince !== undefined && now - s.awaitingSince >= this.#staleAfterMs)
        return true;
    return false;
  }

  /** When the worker's (any rank's) last usable batch arrived, on the clock; undefined if none has. */
  lastEventAt(workerId: number): number | undefined {
    let last: number | undefined;
    for (const s of this.#slots.get(workerId)?.values() ?? []) {
      if (s.lastEventAt !== undefined && (last === undefined || s.lastEventAt > last)) last = s.lastEventAt;
    }
    return last;
  }

  /** Every tracked slot with its status (for a gauge). */
  statuses(): (WorkerRank & { status: EventStatus })[] {
    const out: (WorkerRank & { status: EventStatus })[] = [];
    for (const [workerId, ranks] of this.#slots)
      for (const [dpRank, s] of ranks) out.push({ workerId, dpRank, status: this.#statusOf(s) });
    return out;
  }

  #statusOf(s: SlotLiveness): EventStatus {
    if (s.lastEventAt === undefined) return 'never';
    if (s.degradedUntil !== undefined && this.#clock.now() < s.degradedUntil) return 'stale';
    if (s.awaitingSince !== undefined && this.#clock.now() - s.awaitingSince >= this.#staleAfterMs) return 'stale';
    return 'live';
  }
}
