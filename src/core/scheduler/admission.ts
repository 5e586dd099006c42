/**
 * Admission: the queue in front of the selector. A request parks while every
 * eligible slot is prefill-busy (or is refused by backpressure), and leaves
 * when load allows. Admission is synchronous: `drain` runs inside the calls
 * that free load (`markPrefillCompleted`, `free`, worker changes, `tick`), so
 * each admission sees the bookings of the previous one; the waiting host gets
 * the decision through the ticket's promise.
 *
 * A pinned request never parks: the picker upstream has decided, so it is
 * booked at once (see `KvScheduler.schedule`).
 */
import type { Clock } from '../../common/index.js';
import { KvgateError } from '../../errors/index.js';
import type { ActiveSequences } from '../active-sequences.js';
import type { KvRouterConfig } from '../config.js';
import { FairQueue, SHARED_CLASS, type FairEntry } from '../fair-queue.js';
import { backpressureCap, queueKey } from '../queue.js';
import type { SlotFilter } from './filter.js';
import type { OverlapMatcher } from './overlap.js';
import type { SlotSelector } from './selector.js';
import type { SlotTable } from './slots.js';
import {
  duplicateRequest,
  rejectionError,
  shedError,
  type AdmissionResult,
  type QueueTicket,
  type ScheduleOutcome,
  type SchedulingRequest,
} from './types.js';

interface Parked {
  readonly req: SchedulingRequest;
  readonly arrivedAt: number;
  resolve(result: AdmissionResult): void;
}

/** What admission is built from; every piece is shared with the scheduler that owns it. */
export interface AdmissionOptions {
  readonly config: KvRouterConfig;
  readonly table: SlotTable;
  readonly active: ActiveSequences;
  readonly filter: SlotFilter;
  readonly matcher: OverlapMatcher;
  readonly selector: SlotSelector;
  readonly clock: Clock;
  /** Origin of arrival offsets in queue keys. */
  readonly startedAt: number;
  /** A request's `priorityJump` is clamped to this many seconds (the scheduler's `maxPriorityJump`). */
  readonly maxPriorityJump: number;
}

export class Admission {
  readonly #p: AdmissionOptions;
  readonly #queue = new FairQueue<Parked>();
  #draining = false;

  constructor(parts: AdmissionOptions) {
    this.#p = parts;
  }

  get pendingRequests(): number {
    return this.#queue.pendingRequests;
  }

  get pendingIslTokens(): number {
    return this.#queue.pendingIslTokens;
  }

  /** Parks an unpinned request whose `kept` eligible slots are all busy, unless backpressure refuses it. */
  park(req: SchedulingRequest, kept: number): ScheduleOutcome {
    const { config, clock } = this.#p;
    const isl = req.isl;
    const cached = this.#p.matcher.bestCachedTokens(req, kept);
    const tiers = config.routerQueueByIncomingMissingIsl;
    if (tiers !== null) {
      const missing = Math.max(0, isl - cached);
      const cap = backpressureCap(tiers, missing, this.#p.table.workers.size);
      const queued = this.#queue.pendingIslTokens;
      if (queued >= cap) {
        return {
          status: 'rejected',
          rejection: {
            kind: 'backpressure',
            reason: 'MaxQueuedIslTokensExceeded',
            queuedIslTokens: queued,
            maxQueuedIslTokens: cap,
            missingIslTokens: missing,
          },
        };
      }
    }
    const cls = req.tenant ?? SHARED_CLASS;
    const perWorker = req.tenant?.queueLimitPerWorker;
    if (perWorker !== undefined) {
      const capacity = perWorker * Math.max(1, this.#p.table.workers.size);
      const shed = this.#queue.victim(cls, capacity);
      if (shed === 'incoming') {
        const queuedRequests = this.#queue.pendingRequests;
        return {
          status: 'rejected',
          rejection: { kind: 'shed', reason: 'QueueFull', class: cls.class, queuedRequests, capacity },
        };
      }
      if (shed !== undefined && this.#queue.cancel(shed)) {
        const victim = shed.payload;
        victim.payload.resolve({
          status: 'failed',
          error: shedError(victim.cls.name, this.#queue.pendingRequests + 1, capacity),
        });
      }
    }
    const arrivedAt = clock.now();
    const key = queueKey(
      config.routerQueuePolicy,
      jumpOf(req.priorityJump, this.#p.maxPriorityJump),
      (arrivedAt - this.#p.startedAt) / 1000,
      isl,
      cached,
    );
    let resolve!: (r: AdmissionResult) => void;
    const admitted = new Promise<AdmissionResult>((r) => {
      resolve = r;
    });
    const entry = this.#queue.push({ req, arrivedAt, resolve }, cls, req.strictPriority ?? 0, key, isl);
    const queue = this.#queue;
    const ticket: QueueTicket = {
      requestId: req.requestId,
      admitted,
      cancel(): boolean {
        if (!queue.cancel(entry)) return false;
        resolve({ status: 'cancelled' });
        return true;
      },
    };
    return { status: 'queued', ticket };
  }

  /**
   * Admits parked requests while load allows. Returns how many were admitted. With no worker left, every parked
   * request leaves at once, failed (`KVG_ERR_NO_WORKERS` from `#admit`): no load could ever free for it.
   */
  drain(): number {
    if (this.#draining || this.#queue.pendingRequests === 0) return 0;
    this.#draining = true;
    const { filter, table } = this.#p;
    try {
      return this.#queue.drain(
        () => table.workers.size === 0 || filter.anyRoom(table.all, table.all.length),
        (e) => this.#admit(e),
      );
    } finally {
      this.#draining = false;
    }
  }

  #admit(e: FairEntry<Parked>): void {
    const { req, arrivedAt, resolve } = e.payload.payload;
    const { clock, filter, active } = this.#p;
    const t0 = clock.now();
    try {
      const n = filter.eligibleInto(req);
      const kept = filter.dropOverloaded(n, req);
      if (kept === 0) throw rejectionError({ kind: 'overloaded', reason: 'AllWorkersOverloaded', eligibleSlots: n });
      if (active.has(req.requestId)) throw duplicateRequest(req.requestId);
      resolve({ status: 'routed', decision: this.#p.selector.decide(req, kept, 'book', t0, t0 - arrivedAt) });
    } catch (err) {
      const error =
        err instanceof KvgateError
          ? err
          : new KvgateError('KVG_ERR_INVALID_ARGUMENT', String(err), undefined, { cause: err });
      resolve({ status: 'failed', error });
    }
  }
}

/**
 * A request's priority jump as the queue keys it: clamped to `max`, and 0 for none, a negative one or NaN (a
 * `KvScheduler` caller's jump is not validated the way `KvRouter`'s is, and a NaN key would scramble the heap).
 */
function jumpOf(jump: number | undefined, max: number): number {
  return jump !== undefined && jump > 0 ? Math.min(jump, max) : 0;
}
