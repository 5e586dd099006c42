/**
 * KvScheduler: decides which (worker, dp_rank) slot serves a request and keeps
 * the router's account of every slot's load. It wires the pieces of this
 * folder together and holds no logic of its own beyond the order of steps:
 *
 *   slots.ts      the slot table (workers -> dense slots, per-slot typed arrays, scratch)
 *   filter.ts     eligibility: pins, allowed workers, required taints, overload thresholds
 *   overlap.ts    overlap per candidate from the indexes (device, predicted, fallback, tiers)
 *   knobs.ts      one request's effective knobs (config + override), shared by scoring and booking
 *   selector.ts   scoring with the cost model, picking (argmin or softmax), the decision
 *   booking.ts    load bookkeeping and recording in the approximate indexes
 *   admission.ts  the queue: park, backpressure, synchronous drain
 *
 * Contracts: workers leave through `removeWorker` here, never through
 * `index.removeWorker` (slot ids would be reused under the bookkeeping);
 * admission is synchronous inside the calls that free load; time comes from
 * the injected clock and randomness from the injected RNG, and periodic work
 * (expiry, queue drain) runs when the host calls `tick()`.
 *
 * Pins: a pinned request is booked at once on its worker, never queued nor
 * refused as overloaded (the picker upstream has decided).
 * Deliberate differences from Dynamo: a pin without a resolvable dp_rank is
 * scheduled over that worker's ranks (Dynamo dispatches it without booking);
 * a queued request is always re-matched at admission (Dynamo only after 10 s).
 */
import {
  blockSize as checkBlockSize,
  systemClock,
  type Clock,
  type WorkerRank,
  type WorkerRole,
} from '../../common/index.js';
import { PrefixIndex } from '../../wasm/index.js';
import { ActiveSequences } from '../active-sequences.js';
import { type ActiveRequestInfo, type SlotLoad, type SyncedBooking } from '../active-request.js';
import { PeerBookings } from '../peer-bookings.js';
import { ApproximateIndex } from '../approximate.js';
import { KvgateError } from '../../errors/index.js';
import { resolveKvRouterConfig, type KvRouterConfig, type KvRouterOptions } from '../config.js';
import type { RoutingDecision } from '../decision.js';
import { checkMaxPriorityJump } from '../queue.js';
import { Admission } from './admission.js';
import { Booker, type AddedRequest } from './booking.js';
import { SlotFilter } from './filter.js';
import { effectiveKnobs } from './knobs.js';
import { OverlapMatcher } from './overlap.js';
import { SlotSelector } from './selector.js';
import { SlotTable } from './slots.js';
import {
  duplicateRequest,
  invalidArg,
  rejectionError,
  workerNotFound,
  type BookkeepingObserver,
  type KvSchedulerOptions,
  type ScheduleOutcome,
  type SchedulingRequest,
  type SelectionMode,
  type TickOutcome,
  type WorkerCapacity,
  type WorkerLoad,
  type WorkerSummary,
} from './types.js';

/** Knobs read when the scheduler is built (index TTLs, tracking mode): changing them means a new scheduler. */
export const STRUCTURAL_ROUTER_KNOBS = [
  'useKvEvents',
  'routerTtlSecs',
  'routerPredictedTtlSecs',
  'activeRequestExpirySecs',
  'routerIndexMemoryBudgetMib',
  'routerPrefillLoadModel',
] as const;

export class KvScheduler {
  #config: KvRouterConfig;
  readonly blockSize: number;
  /** The most seconds a request's `priorityJump` moves it in the queue (`KvSchedulerOptions.maxPriorityJump`). */
  readonly maxPriorityJump: number;
  readonly workerType: WorkerRole;
  /** The device-tier index (events index, or approximate index's backing index). */
  readonly index: PrefixIndex;
  /** Approximate mode's index of recorded decisions (null with KV events). */
  readonly approximate: ApproximateIndex | null;
  /** Predict-on-route side index (null unless `routerPredictedTtlSecs` is set). */
  readonly predicted: ApproximateIndex | null;
  /** Per-worker approximate fallback for workers whose KV events are not live (null without `eventFallback`). */
  readonly fallback: ApproximateIndex | null;
  /** Other router replicas' in-flight requests, counted in every slot's load (replica sync applies them). */
  readonly peers: PeerBookings;

  readonly #clock: Clock;
  readonly #active: ActiveSequences;
  readonly #table: SlotTable;
  readonly #filter: SlotFilter;
  readonly #booker: Booker;
  readonly #selector: SlotSelector;
  readonly #admission: Admission;
  #observer: BookkeepingObserver | undefined;

  /**
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for invalid config or `maxPriorityJump`; KVG_ERR_INVALID_BLOCK_SIZE for a
   *   bad block size.
   */
  constructor(opts: KvSchedulerOptions) {
    this.blockSize = checkBlockSize(opts.blockSize);
    this.maxPriorityJump = checkMaxPriorityJump(opts.maxPriorityJump);
    const config = (this.#config = resolveKvRouterConfig(opts.config ?? {}));
    this.workerType = opts.workerType ?? 'aggregated';
    const clock = (this.#clock = opts.clock ?? systemClock);
    const rng = opts.rng ?? Math.random;
    const tiers = { ...opts.tierIndexes };
    this.index = opts.index ?? new PrefixIndex();
    const ttlMs = config.routerTtlSecs * 1000;
    this.approximate = config.useKvEvents ? null : new ApproximateIndex(this.index, { ttlMs, clock });
    this.predicted =
      config.routerPredictedTtlSecs === null
        ? null
        : new ApproximateIndex(new PrefixIndex(), { ttlMs: config.routerPredictedTtlSecs * 1000, clock });
    const eventFallback = config.useKvEvents ? opts.eventFallback : undefined;
    this.fallback = eventFallback === undefined ? null : new ApproximateIndex(new PrefixIndex(), { ttlMs, clock });
    const expiryMs = config.activeRequestExpirySecs * 1000;
    const onExpired = (ids: readonly string[]): void => this.#booker.expired(ids);
    const prefillDecay = config.routerPrefillLoadModel === 'decay';
    const active = (this.#active = new ActiveSequences({ clock, expiryMs, onExpired, prefillDecay }));
    const startedAt = clock.now();

    const table = (this.#table = new SlotTable(this.index, active, this.predicted));
    const filter = (this.#filter = new SlotFilter(() => this.#config, table, active));
    const { index, approximate, predicted, fallback, blockSize } = this;
    const matcher = new OverlapMatcher(
      table,
      active,
      { index, predicted, fallback, eventFallback, tiers, groups: opts.kvGroups },
      blockSize,
    );
    const booker = (this.#booker = new Booker(
      table,
      active,
      { approximate, predicted, fallback, eventFallback },
      blockSize,
    ));
    // The parts read the knobs through a getter, so `reconfigure` reaches them all at once.
    const knobs = (): KvRouterConfig => this.#config;
    const selector = (this.#selector = new SlotSelector({
      get config() {
        return knobs();
      },
      role: this.workerType,
      blockSize,
      table,
      active,
      matcher,
      booker,
      clock,
      rng,
      stepCost: opts.stepCost,
    }));
    this.#admission = new Admission({
      get config() {
        return knobs();
      },
      table,
      active,
      filter,
      matcher,
      selector,
      clock,
      startedAt,
      maxPriorityJump: this.maxPriorityJump,
    });
    this.peers = new PeerBookings({
      active,
      table,
      drain: () => this.#admission.drain(),
      trackOutputBlocks: () => knobs().routerTrackOutputBlocks,
    });
  }

  /** The router knobs in force. */
  get config(): KvRouterConfig {
    return this.#config;
  }

  /**
   * Replaces the knobs for the requests scheduled from now on (bookkeeping, queue and indexes stay).
   * The structural knobs (`STRUCTURAL_ROUTER_KNOBS`) must keep their values. Drains the queue, which
   * new thresholds may release.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for invalid knobs or a changed structural knob (the field is named).
   */
  reconfigure(next: KvRouterOptions | KvRouterConfig): void {
    const config = resolveKvRouterConfig(next);
    for (const k of STRUCTURAL_ROUTER_KNOBS) {
      if (config[k] !== this.#config[k]) {
        throw new KvgateError(
          'KVG_ERR_INVALID_CONFIG',
          `${k} cannot change on a running router (${String(this.#config[k])} -> ${String(config[k])})`,
          { field: k },
        );
      }
    }
    this.#config = config;
    this.#admission.drain();
  }

  /** Tells `observer` of every later change to this router's own bookings (one observer; replica sync). */
  observe(observer: BookkeepingObserver): void {
    this.#observer = observer;
    this.#booker.observer = observer;
  }

  /** This router's own in-flight requests with their prompt hashes (a replica sync snapshot). */
  localBookings(): IterableIterator<SyncedBooking> {
    return this.#active.localBookings();
  }

  // ---------------------------------------------------------------- workers

  /**
   * Registers a worker and its dp ranks (replacing an earlier registration's
   * advertised capacity; ranks that disappear are removed). Drains the queue.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for invalid ids, ranks or capacities.
   */
  addWorker(workerId: number, info: WorkerCapacity = {}): void {
    this.#table.register(workerId, info);
    this.#admission.drain();
  }

  /**
   * Forgets a worker: its slots, its bookkeeping (in-flight requests on it are dropped; their later `free` is a no-op) and its index
   * entries. With `keepIndex` (out for a while) it is held instead: out of routing (not eligible, a pin to it refused), its index slot and
   * blocks kept (KV events keep feeding them) and its requests still booked (their `free` works; replica peers are told nothing), so a
   * later `addWorker` brings it back with them; removing it then drops them. Its approximate entries (approximate mode's, predicted, event
   * fallback: the router's record of what it sent there) stay as its KV events' do: its engine keeps its cache through a flap, and they
   * still lapse on their TTL. A queued request whose allowed workers are all gone fails at admission. Returns false if it was not
   * registered (a held worker is, only for a removal without `keepIndex`).
   */
  removeWorker(workerId: number, keepIndex = false): boolean {
    if (keepIndex ? !this.#table.hold(workerId) : !this.#forget(workerId)) return false;
    this.#admission.drain();
    return true;
  }

  /** Drops a registered or held worker's slots, bookings (its own told to the observer) and index entries. */
  #forget(workerId: number): boolean {
    const mine = this.#observer === undefined ? [] : [...this.#active.localBookings()];
    if (!this.#table.unregister(workerId)) return false;
    for (const b of mine) if (b.workerId === workerId) this.#observer?.freed(b.requestId);
    this.peers.dropWorker(workerId);
    this.approximate?.removeWorker(workerId);
    this.predicted?.removeWorker(workerId);
    this.fallback?.removeWorker(workerId);
    this.index.removeWorker(workerId);
    return true;
  }

  hasWorker(workerId: number): boolean {
    return this.#table.workers.has(workerId);
  }

  /** Registered workers. */
  workers(): WorkerSummary[] {
    return [...this.#table.workers.values()].map((w) => w.summary);
  }

  /** Reports a rank's engine-side KV usage (`kv_used_blocks`): the decode overload check uses the larger of it and the bookkeeping. */
  reportKvUsage(workerRank: WorkerRank, kvUsedBlocks: number): void {
    const slot = this.#table.slotOf(workerRank);
    if (slot !== undefined) this.#table.kvUsed[slot] = kvUsedBlocks > 0 ? kvUsedBlocks : 0;
  }

  // ---------------------------------------------------------------- load

  /** One rank's load, or undefined if not registered. */
  load(workerRank: WorkerRank): SlotLoad | undefined {
    const slot = this.#table.slotOf(workerRank);
    return slot === undefined ? undefined : this.#active.load(slot);
  }

  /** Every registered rank's load. */
  loads(): WorkerLoad[] {
    const t = this.#table;
    const out: WorkerLoad[] = [];
    for (let i = 0; i < t.all.length; i++) {
      const s = t.all[i]!;
      out.push({ workerId: t.slotWorker[s]!, dpRank: t.slotRank[s]!, ...this.#active.load(s) });
    }
    return out;
  }

  /** Snapshot of an in-flight request's bookkeeping. */
  activeRequest(requestId: string): (ActiveRequestInfo & WorkerRank) | undefined {
    const r = this.#active.request(requestId);
    return r === undefined
      ? undefined
      : { ...r, workerId: this.#table.slotWorker[r.slot]!, dpRank: this.#table.slotRank[r.slot]! };
  }

  /** Requests in flight (booked and not freed). */
  get activeRequestCount(): number {
    return this.#active.localSize;
  }

  /** Requests parked in the queue. */
  get pendingRequests(): number {
    return this.#admission.pendingRequests;
  }

  /** Sum of the ISL of parked requests. */
  get pendingIslTokens(): number {
    return this.#admission.pendingIslTokens;
  }

  // ---------------------------------------------------------------- lifecycle

  /**
   * Books a request decided elsewhere (a direct pin, replica sync, one booked again). The overlap defaults to the
   * slot's current match in the index; `startedAt`, to now (`BookingInput.startedAt`).
   * @throws KvgateError KVG_ERR_UNKNOWN_WORKER, KVG_ERR_INVALID_DP_RANK, KVG_ERR_DUPLICATE_REQUEST, KVG_ERR_INVALID_ARGUMENT.
   */
  addRequest(input: AddedRequest): void {
    const w = this.#table.workers.get(input.workerId);
    if (w === undefined) throw workerNotFound(input.workerId);
    const slot = this.#table.checkedSlot(w, input.dpRank ?? w.summary.dataParallelStartRank);
    const start = input.startedAt;
    // A start in the future would keep a lost request booked past its expiry.
    if (start !== undefined && !(Number.isFinite(start) && start <= this.#clock.now()))
      throw invalidArg(`request ${input.requestId}: startedAt ${start} is not a time up to now (${this.#clock.now()})`);
    let overlap = input.overlapBlocks;
    if (overlap === undefined) {
      overlap = 0;
      if (input.hashes !== null && input.hashes.seq.length > 0) {
        const m = this.index.findMatches(input.hashes.seq, true);
        for (let i = 0; i < m.count; i++) if (m.slots[i] === slot) overlap = m.depths[i]!;
      }
    }
    const knobs = effectiveKnobs(this.config, this.workerType, input.override, input.hashes !== null, false);
    this.#booker.book(input, slot, overlap, knobs, start);
  }

  /** Removes the request's prompt-token load; drains the queue. False if unknown or already marked. */
  markPrefillCompleted(requestId: string): boolean {
    const done = this.#active.markPrefillCompleted(requestId);
    if (done) {
      this.#observer?.prefillCompleted(requestId);
      this.#admission.drain();
    }
    return done;
  }

  /**
   * Adds one output block to a request (when `routerTrackOutputBlocks`; otherwise a no-op returning false).
   * `decay` is `outputBlockDecay(osl, expected)`.
   */
  addOutputBlock(requestId: string, decay?: number): boolean {
    if (!this.config.routerTrackOutputBlocks) return false;
    if (!this.#active.addOutputBlock(requestId, decay)) return false;
    if (this.#observer !== undefined)
      this.#observer.outputBlock(requestId, this.#active.request(requestId)!.outputBlocks, decay);
    return true;
  }

  /**
   * Frees a request's load; drains the queue. With `owner`, only if it is
   * booked on that (worker, dp_rank). False if not in flight.
   */
  free(requestId: string, owner?: WorkerRank): boolean {
    let ownerSlot: number | undefined;
    if (owner !== undefined) {
      ownerSlot = this.#table.bookedSlotOf(owner);
      if (ownerSlot === undefined) return false;
    }
    const freed = this.#active.free(requestId, ownerSlot);
    if (freed) {
      this.#observer?.freed(requestId);
      this.#admission.drain();
    }
    return freed;
  }

  /**
   * Periodic work the host calls (Dynamo ticks every 60 s): force-frees
   * requests older than `activeRequestExpirySecs`, expires approximate and
   * predict-on-route entries, and drains the queue.
   */
  tick(): TickOutcome {
    const expiredRequests = this.#booker.freedAtExpiry(this.#active.expire());
    const expiredBetweenTicks = this.#booker.takeExpired();
    this.peers.prune();
    const expiredEntries =
      (this.approximate?.expire() ?? 0) + (this.predicted?.expire() ?? 0) + (this.fallback?.expire() ?? 0);
    const admitted = this.#admission.drain();
    return { expiredRequests, expiredBetweenTicks, expiredEntries, admitted };
  }

  // ---------------------------------------------------------------- deciding

  /**
   * Chooses a slot now, ignoring the queue. `book` books the request (and
   * records it in approximate mode); `query` changes nothing.
   * @throws KvgateError KVG_ERR_UNKNOWN_WORKER / KVG_ERR_INVALID_DP_RANK for bad pins,
   *   KVG_ERR_NO_WORKERS, KVG_ERR_OVERLOADED when every eligible rank is overloaded,
   *   KVG_ERR_DUPLICATE_REQUEST when booking an id in flight.
   */
  select(req: SchedulingRequest, mode: SelectionMode = 'book'): RoutingDecision {
    if (mode === 'book' && this.#active.has(req.requestId)) throw duplicateRequest(req.requestId);
    const t0 = this.#clock.now();
    const n = this.#filter.eligibleInto(req);
    const kept = this.#filter.dropOverloaded(n, req);
    if (kept === 0) throw rejectionError({ kind: 'overloaded', reason: 'AllWorkersOverloaded', eligibleSlots: n });
    return this.#selector.decide(req, kept, mode, t0, 0);
  }

  /**
   * The full path: eligibility, overload rejection, the queue (park while
   * every eligible slot is prefill-busy, or reject on backpressure), then
   * selection and booking.
   * @throws as `select` for invalid requests (bad pins, no eligible workers, duplicate id).
   */
  schedule(req: SchedulingRequest): ScheduleOutcome {
    if (this.#active.has(req.requestId)) throw duplicateRequest(req.requestId);
    const t0 = this.#clock.now();
    const n = this.#filter.eligibleInto(req);
    const exactPin = req.pinWorkerId !== undefined;
    const kept = this.#filter.dropOverloaded(n, req);
    if (kept === 0)
      return {
        status: 'rejected',
        rejection: { kind: 'overloaded', reason: 'AllWorkersOverloaded', eligibleSlots: n },
      };
    // A pin (the picker upstream has decided) and an allowed-worker list (an endpoint picker's) skip the queue; a LoRA
    // adapter's workers (kvgate's own restriction) do not: that request queues like any other.
    const bypass = exactPin || (req.allowedWorkerIds !== undefined && req.adapterRestricted !== true);
    if (
      this.config.routerQueueThreshold === null ||
      bypass ||
      this.#filter.anyRoom(this.#table.scratch.eligible, kept)
    ) {
      return { status: 'routed', decision: this.#selector.decide(req, kept, 'book', t0, 0) };
    }
    // Every eligible slot is busy: park, unless backpressure says no.
    return this.#admission.park(req, kept);
  }
}
