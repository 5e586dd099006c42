/**
 * KvScheduler: decides which (worker, dp_rank) slot serves a request and keeps
 * the router's account of every slot's load (spec sections 4.1 to 4.5 and 3.6).
 *
 * One decision, given a prompt's block hashes:
 *   1. eligible slots: a pin (one rank, or every rank of one worker), else the
 *      allowed workers, else every registered slot; overloaded slots (busy
 *      thresholds, section 4.4 item 3) are dropped;
 *   2. matching: device overlap per slot from the prefix index (the events
 *      index, or the approximate index in approximate mode), raised to the
 *      predict-on-route side index where that is on; host/disk tier and
 *      shared-cache overlaps when those indexes are given; the depth of the
 *      prompt already active on each slot (for new_blocks);
 *   3. scoring with the [v1.5] cost model (`cost.ts`) and selection (argmin
 *      with uniform ties, or softmax with a temperature);
 *   4. booking in `ActiveSequences` and, in approximate mode, recording the
 *      decision in the approximate index (and the side index).
 *
 * Slots are the dense ids of the primary `PrefixIndex` (`slotOf`), reused as
 * array indexes everywhere, so the hot path has no string keys and no
 * per-candidate objects. Contract: workers leave through `removeWorker` here,
 * never by calling `index.removeWorker` directly (slot ids would be reused
 * under our feet).
 *
 * The queue (`queue.ts`) parks a request while every eligible slot is
 * prefill-busy; it drains on `markPrefillCompleted`, `free`, worker changes
 * and `tick`. Admission is synchronous inside those calls, so each admission
 * sees the bookings of the previous one; the waiting host gets the decision
 * through the ticket's promise.
 *
 * Pure: time comes from the injected clock, randomness from the injected RNG;
 * periodic work (expiry of forgotten requests and approximate entries, queue
 * drain) runs when the host calls `tick()`.
 *
 * Deliberate differences from Dynamo: a pin without a resolvable dp_rank is
 * scheduled over that worker's ranks (Dynamo dispatches it without booking);
 * a queued request is always re-matched at admission (Dynamo only after 10 s).
 */
import { KvgateError } from '../errors/index.js';
import { PrefixIndex, type PromptHashes } from '../wasm/index.js';
import { ActiveSequences, type ActiveRequestInfo, type SlotLoad } from './active-sequences.js';
import { ApproximateIndex } from './approximate.js';
import { systemClock, type Clock, type Rng } from './clock.js';
import { resolveKvRouterConfig, type KvRouterConfig, type KvRouterOptions, type RouterConfigOverride } from './config.js';
import { costOf, type CostKnobs } from './cost.js';
import { RoutingDecision, takeBreakdown, writeBreakdown, writeProbability } from './decision.js';
import { backpressureCap, queueKey, RequestQueue, type QueueEntry } from './queue.js';
import { pickLowest, sampleIndex, softmaxProbabilities } from './selection.js';

/** Which side of a disaggregated deployment this scheduler routes for. */
export type WorkerType = 'aggregated' | 'prefill' | 'decode';

/** `max_num_batched_tokens` assumed when a worker does not advertise one (effectively never busy). */
export const DEFAULT_MAX_NUM_BATCHED_TOKENS = 10_000_000;

/** What a worker advertises (from its model card / discovery). */
export interface WorkerInfo {
  /** First data-parallel rank (default 0). */
  readonly dataParallelStartRank?: number;
  /** Number of data-parallel ranks (default 1); each rank is scheduled separately. */
  readonly dataParallelSize?: number;
  /** Engine batch token budget: the unit of prefill-busy and of the fractional prefill threshold. */
  readonly maxNumBatchedTokens?: number;
  /** KV blocks per rank: the unit of the decode overload threshold. */
  readonly totalKvBlocks?: number;
  /** Labels for routing constraints (`required_taints` filter, `preferred_taints` bias). */
  readonly taints?: readonly string[];
}

/** A registered worker. */
export interface WorkerSummary {
  readonly workerId: number;
  readonly dataParallelStartRank: number;
  readonly dataParallelSize: number;
  readonly maxNumBatchedTokens: number | undefined;
  readonly totalKvBlocks: number | undefined;
  readonly taints: readonly string[];
}

/** One slot's load, named. */
export interface WorkerLoad extends SlotLoad {
  readonly workerId: number;
  readonly dpRank: number;
}

/** A request as the scheduler sees it (pins already resolved for the phase). */
export interface SchedulingRequest {
  /** Context id; unique among in-flight requests. */
  readonly requestId: string;
  /** Prompt length in tokens. */
  readonly isl: number;
  /** Hashes of the prompt's complete blocks (routing tokens); null = no prefix information. */
  readonly hashes: PromptHashes | null;
  /** Exact pin: only this worker... */
  readonly pinWorkerId?: number | undefined;
  /** ...and, if given, only this rank (validated against the worker's advertised ranks). */
  readonly pinDpRank?: number | undefined;
  /** Restricts candidates to these workers (an endpoint picker's list); such requests bypass the queue unless pinned. */
  readonly allowedWorkerIds?: ReadonlySet<number> | readonly number[] | undefined;
  /**
   * Taint constraints (Dynamo's `routing_constraints`): unpinned candidates must carry every
   * required taint; a candidate's cost is multiplied by the factor of each preferred taint it
   * carries (factors > 0; below 1 attracts, above 1 repels) [inferred: factors multiply].
   */
  readonly routingConstraints?: {
    readonly requiredTaints?: readonly string[] | undefined;
    readonly preferredTaints?: Readonly<Record<string, number>> | undefined;
  } | undefined;
  /** Seconds of queue priority (`priority_jump`, >= 0). */
  readonly priorityJump?: number | undefined;
  /** Absolute queue tier: higher tiers always leave first (`strict_priority`). */
  readonly strictPriority?: number | undefined;
  /** Expected output length (drives output-block decay). */
  readonly expectedOutputTokens?: number | undefined;
  /** Validated per-request overrides (see `parseRouterConfigOverride`). */
  readonly override?: RouterConfigOverride | undefined;
  /** Time already spent hashing, reported in the decision's timing. */
  readonly hashingMs?: number | undefined;
}

/** Why a request was turned away. Map to an error with `rejectionError`. */
export type Rejection =
  | {
    readonly kind: 'backpressure';
    readonly reason: 'MaxQueuedIslTokensExceeded';
    /** ISL tokens already queued. */
    readonly queuedIslTokens: number;
    /** The cap for this request's tier (tier cap × worker count). */
    readonly maxQueuedIslTokens: number;
    /** This request's cache-miss tokens (isl − best cached), which picked the tier. */
    readonly missingIslTokens: number;
  }
  | {
    readonly kind: 'overloaded';
    readonly reason: 'AllWorkersOverloaded';
    /** Eligible slots, all over a busy threshold. */
    readonly eligibleSlots: number;
  };

/** How a parked request ended. The promise never rejects. */
export type AdmissionResult =
  | { readonly status: 'routed'; readonly decision: RoutingDecision }
  | { readonly status: 'cancelled' }
  | { readonly status: 'failed'; readonly error: KvgateError };

/** A parked request. Await `admitted`; call `cancel()` if the client goes away. */
export interface QueueTicket {
  readonly requestId: string;
  readonly admitted: Promise<AdmissionResult>;
  /** Withdraws the request; resolves `admitted` with `cancelled`. False if it already left the queue. */
  cancel(): boolean;
}

export type ScheduleOutcome =
  | { readonly status: 'routed'; readonly decision: RoutingDecision }
  | { readonly status: 'queued'; readonly ticket: QueueTicket }
  | { readonly status: 'rejected'; readonly rejection: Rejection };

/** `select` books the request (`book`) or only reports what it would do (`query`, Dynamo's query-only mode). */
export type SelectionMode = 'book' | 'query';

/** A typed error for a rejection, for hosts that surface it as HTTP 503. */
export function rejectionError(r: Rejection): KvgateError {
  if (r.kind === 'backpressure') {
    return new KvgateError('KVG_ERR_BACKPRESSURE',
      `router queue full: ${r.queuedIslTokens} ISL tokens queued, cap ${r.maxQueuedIslTokens} for requests missing ${r.missingIslTokens} cached tokens`,
      { queuedIslTokens: r.queuedIslTokens, maxQueuedIslTokens: r.maxQueuedIslTokens, missingIslTokens: r.missingIslTokens });
  }
  return new KvgateError('KVG_ERR_OVERLOADED', `all ${r.eligibleSlots} eligible worker ranks are overloaded`, { eligibleSlots: r.eligibleSlots });
}

export interface KvSchedulerOptions {
  /** KV block size in tokens (engines' `--block-size`); all workers share it. */
  readonly blockSize: number;
  /** Router knobs (validated here). */
  readonly config?: KvRouterOptions | KvRouterConfig;
  /**
   * The device-tier prefix index, fed by KV events. Created if omitted. In
   * approximate mode (`useKvEvents: false`) the scheduler records its own
   * decisions in it with the TTL.
   */
  readonly index?: PrefixIndex;
  /** Lower-tier indexes fed by tiered KV events, and an external shared cache (one pseudo-slot per cache). */
  readonly tierIndexes?: { readonly hostPinned?: PrefixIndex; readonly disk?: PrefixIndex; readonly shared?: PrefixIndex };
  readonly clock?: Clock;
  /** Uniform [0, 1) source for tie-breaks and softmax sampling. */
  readonly rng?: Rng;
  readonly workerType?: WorkerType;
  /**
   * With KV events on: true for a worker whose events cannot be trusted right
   * now (never started, or stopped while it serves). Such a worker falls back
   * to approximate mode alone: the router records its own decisions for it
   * (with `routerTtlSecs`) and scores it on max(events overlap, recorded
   * overlap) until its events are live again.
   */
  readonly eventFallback?: ((workerId: number) => boolean) | undefined;
}

interface WorkerEntry {
  readonly summary: WorkerSummary;
  readonly slots: Int32Array;
  readonly taints: ReadonlySet<string>;
}

interface Parked {
  readonly req: SchedulingRequest;
  readonly arrivedAt: number;
  /** Slots the request may use; null = every registered slot. */
  readonly slots: Int32Array | null;
  resolve(result: AdmissionResult): void;
}

export class KvScheduler {
  readonly config: KvRouterConfig;
  readonly blockSize: number;
  readonly workerType: WorkerType;
  /** The device-tier index (events index, or approximate index's backing index). */
  readonly index: PrefixIndex;
  /** Approximate mode's index of recorded decisions (null with KV events). */
  readonly approximate: ApproximateIndex | null;
  /** Predict-on-route side index (null unless `routerPredictedTtlSecs` is set). */
  readonly predicted: ApproximateIndex | null;
  /** Per-worker approximate fallback for workers whose KV events are not live (null without `eventFallback`). */
  readonly fallback: ApproximateIndex | null;
  readonly #eventFallback: ((workerId: number) => boolean) | undefined;

  readonly #clock: Clock;
  readonly #rng: Rng;
  readonly #tiers: { hostPinned?: PrefixIndex; disk?: PrefixIndex; shared?: PrefixIndex };
  readonly #active: ActiveSequences;
  readonly #queue = new RequestQueue<Parked>();
  readonly #startedAt: number;
  readonly #workers = new Map<number, WorkerEntry>();
  #draining = false;

  // Per slot (indexed by primary index slot id).
  #cap = 0;
  #registered = new Uint8Array(0);
  #slotWorker = new Float64Array(0);
  #slotRank = new Int32Array(0);
  #maxBatched = new Float64Array(0);
  #totalKv = new Float64Array(0);
  #kvUsed = new Float64Array(0);
  // Scratch, per slot.
  #dev = new Float64Array(0);
  #host = new Float64Array(0);
  #disk = new Float64Array(0);
  #depth = new Float64Array(0);
  // Scratch, per candidate.
  #eligible = new Int32Array(0);
  #costs = new Float64Array(0);
  #probs = new Float64Array(0);
  /** Every registered slot, compact. */
  #all = new Int32Array(0);
  #allCount = 0;
  /** Predict-on-route index slot -> primary slot. */
  #predToSlot = new Int32Array(0);
  /** Deepest match in the shared-cache index for the request being scored. */
  #sharedDepth = 0;

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG for invalid config; KVG_ERR_INVALID_BLOCK_SIZE for a bad block size. */
  constructor(opts: KvSchedulerOptions) {
    if (!Number.isInteger(opts.blockSize) || opts.blockSize <= 0 || opts.blockSize > 1 << 20) {
      throw new KvgateError('KVG_ERR_INVALID_BLOCK_SIZE', `block size must be an integer in [1, 1048576], got ${opts.blockSize}`, { blockSize: opts.blockSize });
    }
    this.config = resolveKvRouterConfig(opts.config ?? {});
    this.blockSize = opts.blockSize;
    this.workerType = opts.workerType ?? 'aggregated';
    this.#clock = opts.clock ?? systemClock;
    this.#rng = opts.rng ?? Math.random;
    this.#tiers = { ...opts.tierIndexes };
    this.index = opts.index ?? new PrefixIndex();
    this.approximate = this.config.useKvEvents ? null : new ApproximateIndex(this.index, { ttlMs: this.config.routerTtlSecs * 1000, clock: this.#clock });
    this.predicted = this.config.routerPredictedTtlSecs === null ? null
      : new ApproximateIndex(new PrefixIndex(), { ttlMs: this.config.routerPredictedTtlSecs * 1000, clock: this.#clock });
    this.#eventFallback = this.config.useKvEvents ? opts.eventFallback : undefined;
    this.fallback = this.#eventFallback === undefined ? null
      : new ApproximateIndex(new PrefixIndex(), { ttlMs: this.config.routerTtlSecs * 1000, clock: this.#clock });
    this.#active = new ActiveSequences({ clock: this.#clock, expiryMs: this.config.activeRequestExpirySecs * 1000 });
    this.#startedAt = this.#clock.now();
  }

  // ---------------------------------------------------------------- workers

  /**
   * Registers a worker and its dp ranks (replacing an earlier registration's
   * advertised capacity; ranks that disappear are removed). Drains the queue.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for invalid ids, ranks or capacities.
   */
  addWorker(workerId: number, info: WorkerInfo = {}): void {
    const start = info.dataParallelStartRank ?? 0;
    const size = info.dataParallelSize ?? 1;
    if (!Number.isSafeInteger(workerId) || workerId < 0) throw invalidArg(`worker id must be a non-negative safe integer, got ${workerId}`);
    if (!Number.isInteger(start) || start < 0 || !Number.isInteger(size) || size < 1 || start + size > 0x10000) {
      throw invalidArg(`worker ${workerId}: invalid dp ranks start ${start} size ${size}`);
    }
    for (const [name, v] of [['maxNumBatchedTokens', info.maxNumBatchedTokens], ['totalKvBlocks', info.totalKvBlocks]] as const) {
      if (v !== undefined && !(Number.isFinite(v) && v > 0)) throw invalidArg(`worker ${workerId}: ${name} must be > 0, got ${v}`);
    }
    const previous = this.#workers.get(workerId);
    if (previous !== undefined) {
      for (const slot of previous.slots) {
        const rank = this.#slotRank[slot]!;
        if (rank < start || rank >= start + size) this.#dropSlot(slot);
      }
    }
    const slots = new Int32Array(size);
    for (let i = 0; i < size; i++) {
      const rank = start + i;
      const slot = this.index.slotOf(workerId, rank);
      slots[i] = slot;
      this.#ensureCap(slot + 1);
      this.#registered[slot] = 1;
      this.#slotWorker[slot] = workerId;
      this.#slotRank[slot] = rank;
      this.#maxBatched[slot] = info.maxNumBatchedTokens ?? DEFAULT_MAX_NUM_BATCHED_TOKENS;
      this.#totalKv[slot] = info.totalKvBlocks ?? 0;
      this.#active.ensureSlot(slot, workerId, rank);
      if (this.predicted !== null) {
        const p = this.predicted.index.slotOf(workerId, rank);
        if (p >= this.#predToSlot.length) {
          const next = new Int32Array(Math.max(p + 1, this.#predToSlot.length * 2, 16)).fill(-1);
          next.set(this.#predToSlot);
          this.#predToSlot = next;
        }
        this.#predToSlot[p] = slot;
      }
    }
    const taints = Object.freeze([...(info.taints ?? [])]);
    this.#workers.set(workerId, {
      summary: Object.freeze({
        workerId, dataParallelStartRank: start, dataParallelSize: size,
        maxNumBatchedTokens: info.maxNumBatchedTokens, totalKvBlocks: info.totalKvBlocks, taints,
      }),
      slots,
      taints: new Set(taints),
    });
    this.#rebuildAll();
    this.#drain();
  }

  /**
   * Forgets a worker: its slots, its bookkeeping (in-flight requests on it are
   * dropped; their later `free` is a no-op), its index entries, and fails the
   * requests queued for it alone. Returns false if it was not registered.
   */
  removeWorker(workerId: number): boolean {
    const w = this.#workers.get(workerId);
    if (w === undefined) return false;
    for (const slot of w.slots) this.#dropSlot(slot);
    this.#workers.delete(workerId);
    this.approximate?.removeWorker(workerId);
    this.predicted?.removeWorker(workerId);
    this.fallback?.removeWorker(workerId);
    this.index.removeWorker(workerId);
    this.#rebuildAll();
    const error = new KvgateError('KVG_ERR_UNKNOWN_WORKER', `worker ${workerId} was removed while the request was queued`, { workerId });
    for (const e of this.#queue.takeLanes((lane) => lane === `w:${workerId}` || lane.startsWith(`w:${workerId}:`))) {
      e.payload.resolve({ status: 'failed', error });
    }
    this.#drain();
    return true;
  }

  hasWorker(workerId: number): boolean {
    return this.#workers.has(workerId);
  }

  /** Registered workers. */
  workers(): WorkerSummary[] {
    return [...this.#workers.values()].map((w) => w.summary);
  }

  /** Reports a rank's engine-side KV usage (`kv_used_blocks`): the decode overload check uses the larger of it and the bookkeeping. */
  reportKvUsage(workerId: number, dpRank: number, kvUsedBlocks: number): void {
    const slot = this.#slotOf(workerId, dpRank);
    if (slot !== undefined) this.#kvUsed[slot] = kvUsedBlocks > 0 ? kvUsedBlocks : 0;
  }

  // ---------------------------------------------------------------- load

  /** One rank's load, or undefined if not registered. */
  load(workerId: number, dpRank = 0): SlotLoad | undefined {
    const slot = this.#slotOf(workerId, dpRank);
    return slot === undefined ? undefined : this.#active.load(slot);
  }

  /** Every registered rank's load. */
  loads(): WorkerLoad[] {
    const out: WorkerLoad[] = [];
    for (let i = 0; i < this.#allCount; i++) {
      const s = this.#all[i]!;
      out.push({ workerId: this.#slotWorker[s]!, dpRank: this.#slotRank[s]!, ...this.#active.load(s) });
    }
    return out;
  }

  /** Snapshot of an in-flight request's bookkeeping. */
  activeRequest(requestId: string): (ActiveRequestInfo & { readonly workerId: number; readonly dpRank: number }) | undefined {
    const r = this.#active.request(requestId);
    return r === undefined ? undefined : { ...r, workerId: this.#slotWorker[r.slot]!, dpRank: this.#slotRank[r.slot]! };
  }

  /** Requests in flight (booked and not freed). */
  get activeRequestCount(): number {
    return this.#active.size;
  }

  /** Requests parked in the queue. */
  get pendingRequests(): number {
    return this.#queue.pendingRequests;
  }

  /** Sum of the ISL of parked requests. */
  get pendingIslTokens(): number {
    return this.#queue.pendingIslTokens;
  }

  // ---------------------------------------------------------------- lifecycle

  /**
   * Books a request decided elsewhere (a direct pin, replica sync). The
   * overlap defaults to the slot's current match in the index.
   * @throws KvgateError KVG_ERR_UNKNOWN_WORKER, KVG_ERR_INVALID_DP_RANK, KVG_ERR_DUPLICATE_REQUEST.
   */
  addRequest(input: {
    readonly requestId: string; readonly workerId: number; readonly dpRank?: number; readonly isl: number;
    readonly hashes: PromptHashes | null; readonly overlapBlocks?: number; readonly expectedOutputTokens?: number;
    readonly override?: RouterConfigOverride;
  }): void {
    const w = this.#workers.get(input.workerId);
    if (w === undefined) throw workerNotFound(input.workerId);
    const rank = input.dpRank ?? w.summary.dataParallelStartRank;
    const slot = this.#checkedSlot(w, rank);
    let overlap = input.overlapBlocks;
    if (overlap === undefined) {
      overlap = 0;
      if (input.hashes !== null && input.hashes.seq.length > 0) {
        const m = this.index.findMatches(input.hashes.seq, true);
        for (let i = 0; i < m.count; i++) if (m.slots[i] === slot) overlap = m.depths[i]!;
      }
    }
    this.#book(input.requestId, slot, input.isl, input.hashes, overlap, input.expectedOutputTokens, input.override);
  }

  /** Removes the request's prompt-token load; drains the queue. False if unknown or already marked. */
  markPrefillCompleted(requestId: string): boolean {
    const done = this.#active.markPrefillCompleted(requestId);
    if (done) this.#drain();
    return done;
  }

  /**
   * Adds one output block to a request (when `routerTrackOutputBlocks`; otherwise a no-op returning false).
   * `decay` is `outputBlockDecay(osl, expected)`.
   */
  addOutputBlock(requestId: string, decay?: number): boolean {
    if (!this.config.routerTrackOutputBlocks) return false;
    return this.#active.addOutputBlock(requestId, decay);
  }

  /**
   * Frees a request's load; drains the queue. With `owner`, only if it is
   * booked on that (worker, dp_rank). False if not in flight.
   */
  free(requestId: string, owner?: { readonly workerId: number; readonly dpRank: number }): boolean {
    let ownerSlot: number | undefined;
    if (owner !== undefined) {
      ownerSlot = this.#slotOf(owner.workerId, owner.dpRank);
      if (ownerSlot === undefined) return false;
    }
    const freed = this.#active.free(requestId, ownerSlot);
    if (freed) this.#drain();
    return freed;
  }

  /**
   * Periodic work the host calls (Dynamo ticks every 60 s): force-frees
   * requests older than `activeRequestExpirySecs`, expires approximate and
   * predict-on-route entries, and drains the queue.
   */
  tick(): { readonly expiredRequests: readonly string[]; readonly expiredEntries: number; readonly admitted: number } {
    const expiredRequests = this.#active.expire();
    const expiredEntries = (this.approximate?.expire() ?? 0) + (this.predicted?.expire() ?? 0) + (this.fallback?.expire() ?? 0);
    const admitted = this.#drain();
    return { expiredRequests, expiredEntries, admitted };
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
    if (mode === 'book' && this.#active.has(req.requestId)) throw duplicate(req.requestId);
    const t0 = this.#clock.now();
    const n = this.#eligibleInto(req);
    const kept = this.#dropOverloaded(n);
    if (kept === 0) throw rejectionError({ kind: 'overloaded', reason: 'AllWorkersOverloaded', eligibleSlots: n });
    return this.#decide(req, kept, mode, t0, 0);
  }

  /**
   * The full path: eligibility, overload rejection, the queue (park while
   * every eligible slot is prefill-busy, or reject on backpressure), then
   * selection and booking.
   * @throws as `select` for invalid requests (bad pins, no eligible workers, duplicate id).
   */
  schedule(req: SchedulingRequest): ScheduleOutcome {
    if (this.#active.has(req.requestId)) throw duplicate(req.requestId);
    const t0 = this.#clock.now();
    const n = this.#eligibleInto(req);
    const exactPin = req.pinWorkerId !== undefined;
    // A pinned request waits on its own slots only (captured before the overload filter compacts the list).
    const pinSlots = exactPin ? this.#eligible.slice(0, n) : null;
    const kept = this.#dropOverloaded(n);
    if (kept === 0) return { status: 'rejected', rejection: { kind: 'overloaded', reason: 'AllWorkersOverloaded', eligibleSlots: n } };
    const bypass = req.allowedWorkerIds !== undefined && !exactPin;
    if (this.config.routerQueueThreshold === null || bypass || this.#anyRoom(this.#eligible, kept)) {
      return { status: 'routed', decision: this.#decide(req, kept, 'book', t0, 0) };
    }
    // Every eligible slot is busy: park, unless backpressure says no.
    const isl = req.isl;
    const cached = this.#bestCachedTokens(req, kept);
    const tiers = this.config.routerQueueByIncomingMissingIsl;
    if (tiers !== null) {
      const missing = Math.max(0, isl - cached);
      const cap = backpressureCap(tiers, missing, this.#workers.size);
      const queued = this.#queue.pendingIslTokens;
      if (queued >= cap) {
        return { status: 'rejected', rejection: { kind: 'backpressure', reason: 'MaxQueuedIslTokensExceeded', queuedIslTokens: queued, maxQueuedIslTokens: cap, missingIslTokens: missing } };
      }
    }
    const arrivedAt = this.#clock.now();
    const key = queueKey(this.config.routerQueuePolicy, req.priorityJump ?? 0, (arrivedAt - this.#startedAt) / 1000, isl, cached);
    const lane = !exactPin ? '' : req.pinDpRank === undefined ? `w:${req.pinWorkerId}` : `w:${req.pinWorkerId}:${req.pinDpRank}`;
    const slots = pinSlots;
    let resolve!: (r: AdmissionResult) => void;
    const admitted = new Promise<AdmissionResult>((r) => {
      resolve = r;
    });
    const parked: Parked = { req, arrivedAt, slots, resolve };
    const entry = this.#queue.push(parked, lane, req.strictPriority ?? 0, key, isl);
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

  // ---------------------------------------------------------------- internals

  /** Fills `#eligible` with the request's candidate slots; returns how many. */
  #eligibleInto(req: SchedulingRequest): number {
    const preferred = req.routingConstraints?.preferredTaints;
    if (preferred !== undefined) {
      for (const [t, v] of Object.entries(preferred)) {
        if (!(Number.isFinite(v) && v > 0)) throw invalidArg(`preferred taint ${t}: factor must be a finite number > 0, got ${v}`);
      }
    }
    if (req.pinWorkerId !== undefined) {
      const w = this.#workers.get(req.pinWorkerId);
      if (w === undefined) throw workerNotFound(req.pinWorkerId);
      if (req.pinDpRank !== undefined) {
        this.#eligible[0] = this.#checkedSlot(w, req.pinDpRank);
        return 1;
      }
      this.#eligible.set(w.slots);
      return w.slots.length;
    }
    let n = 0;
    const allowed = req.allowedWorkerIds;
    if (allowed === undefined) {
      this.#eligible.set(this.#all.subarray(0, this.#allCount));
      n = this.#allCount;
    } else {
      const set = allowed instanceof Set ? (allowed as ReadonlySet<number>) : new Set(allowed as readonly number[]);
      for (let i = 0; i < this.#allCount; i++) {
        const s = this.#all[i]!;
        if (set.has(this.#slotWorker[s]!)) this.#eligible[n++] = s;
      }
    }
    if (n === 0) {
      throw new KvgateError('KVG_ERR_NO_WORKERS', allowed === undefined ? 'no workers are registered' : 'none of the allowed workers is registered',
        allowed === undefined ? {} : { allowedWorkerIds: [...allowed] });
    }
    const required = req.routingConstraints?.requiredTaints;
    if (required !== undefined && required.length > 0) {
      let kept = 0;
      for (let i = 0; i < n; i++) {
        const s = this.#eligible[i]!;
        const taints = this.#workers.get(this.#slotWorker[s]!)!.taints;
        if (required.every((t) => taints.has(t))) this.#eligible[kept++] = s;
      }
      if (kept === 0) throw new KvgateError('KVG_ERR_NO_WORKERS', `no worker carries every required taint (${required.join(', ')})`, { requiredTaints: [...required] });
      n = kept;
    }
    return n;
  }

  /** Compacts `#eligible[0..n)` to the slots not over a busy threshold; returns how many remain. */
  #dropOverloaded(n: number): number {
    const c = this.config;
    if (c.activeDecodeBlocksThreshold === null && c.activePrefillTokensThreshold === null && c.activePrefillTokensThresholdFrac === null) return n;
    let kept = 0;
    for (let i = 0; i < n; i++) {
      const s = this.#eligible[i]!;
      if (!this.#overloaded(s)) this.#eligible[kept++] = s;
    }
    return kept;
  }

  #overloaded(s: number): boolean {
    const c = this.config;
    const prefill = this.#active.activePrefillTokens[s]!;
    if (c.activeDecodeBlocksThreshold !== null && this.#totalKv[s]! > 0) {
      const used = Math.max(this.#active.activeDecodeBlocks[s]!, this.#kvUsed[s]!);
      if (used > c.activeDecodeBlocksThreshold * this.#totalKv[s]!) return true;
    }
    if (c.activePrefillTokensThreshold !== null && prefill > c.activePrefillTokensThreshold) return true;
    if (c.activePrefillTokensThresholdFrac !== null && prefill > c.activePrefillTokensThresholdFrac * this.#maxBatched[s]!) return true;
    return false;
  }

  /** True if some slot of `slots[0..n)` is neither prefill-busy nor overloaded. */
  #anyRoom(slots: Int32Array, n: number): boolean {
    const threshold = this.config.routerQueueThreshold ?? Infinity;
    const prefill = this.#active.activePrefillTokens;
    for (let i = 0; i < n; i++) {
      const s = slots[i]!;
      if (this.#registered[s] !== 1) continue;
      if (prefill[s]! <= threshold * this.#maxBatched[s]! && !this.#overloaded(s)) return true;
    }
    return false;
  }

  /** Cached tokens the request would find on its best eligible slot (pinned rank: that rank). */
  #bestCachedTokens(req: SchedulingRequest, n: number): number {
    this.#match(req, n);
    let best = 0;
    for (let i = 0; i < n; i++) best = Math.max(best, this.#dev[this.#eligible[i]!]!);
    return Math.min(req.isl, best * this.blockSize);
  }

  /**
   * Writes, for the slots `#eligible[0..n)`, the effective device overlap
   * (`#dev`), tier overlaps beyond it (`#host`, `#disk`) and the depth of the
   * prompt already active there (`#depth`). Other slots' entries are stale.
   */
  #match(req: SchedulingRequest, n: number): boolean {
    const elig = this.#eligible;
    const dev = this.#dev;
    const depth = this.#depth;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      dev[s] = 0;
      depth[s] = 0;
    }
    const seq = req.hashes?.seq;
    if (seq === undefined || seq.length === 0) return false;
    const cap = this.#cap;
    const m = this.index.findMatches(seq, true);
    for (let i = 0; i < m.count; i++) {
      const s = m.slots[i]!;
      if (s < cap) dev[s] = m.depths[i]!;
    }
    if (this.predicted !== null && this.predicted.size > 0) {
      const p = this.predicted.index.findMatches(seq, true);
      const map = this.#predToSlot;
      for (let i = 0; i < p.count; i++) {
        const s = map[p.slots[i]!] ?? -1;
        if (s >= 0 && p.depths[i]! > dev[s]!) dev[s] = p.depths[i]!;
      }
    }
    if (this.fallback !== null && this.fallback.size > 0) {
      // Only while the worker's events are still not live: once they are, the events index is the truth.
      const f = this.fallback.index.findMatches(seq, true);
      for (let i = 0; i < f.count; i++) {
        const w = this.fallback.index.slotWorker(f.slots[i]!);
        if (w === undefined || !this.#eventFallback!(w.workerId)) continue;
        const s = this.#slotOf(w.workerId, w.dpRank);
        if (s !== undefined && f.depths[i]! > dev[s]!) dev[s] = f.depths[i]!;
      }
    }
    this.#active.depthsInto(seq, depth);
    const tiers = this.#tiers;
    const tiered = tiers.hostPinned !== undefined || tiers.disk !== undefined || tiers.shared !== undefined;
    if (tiered) this.#matchTiers(seq, n);
    return tiered;
  }

  /** Host and disk overlap beyond faster tiers, and shared-cache depth (slow path: only with tier indexes). */
  #matchTiers(seq: BigUint64Array, n: number): void {
    const elig = this.#eligible;
    const host = this.#host;
    const disk = this.#disk;
    for (let i = 0; i < n; i++) {
      host[elig[i]!] = 0;
      disk[elig[i]!] = 0;
    }
    const scatter = (index: PrefixIndex, out: Float64Array): void => {
      const m = index.findMatches(seq, true);
      for (let i = 0; i < m.count; i++) {
        const w = index.slotWorker(m.slots[i]!);
        const s = w === undefined ? undefined : this.#slotOf(w.workerId, w.dpRank);
        if (s !== undefined) out[s] = m.depths[i]!;
      }
    };
    if (this.#tiers.hostPinned !== undefined) scatter(this.#tiers.hostPinned, host);
    if (this.#tiers.disk !== undefined) scatter(this.#tiers.disk, disk);
    let sharedDepth = 0;
    if (this.#tiers.shared !== undefined) {
      const m = this.#tiers.shared.findMatches(seq, true);
      for (let i = 0; i < m.count; i++) sharedDepth = Math.max(sharedDepth, m.depths[i]!);
    }
    // Depths become blocks found only in that tier: host beyond device, disk beyond both.
    this.#sharedDepth = sharedDepth;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      const d = this.#dev[s]!;
      const h = host[s]!;
      host[s] = h > d ? h - d : 0;
      const top = h > d ? h : d;
      disk[s] = disk[s]! > top ? disk[s]! - top : 0;
    }
  }

  /** Scores `#eligible[0..n)`, picks one, and books it unless `mode` is `query`. */
  #decide(req: SchedulingRequest, n: number, mode: SelectionMode, t0: number, queuedMs: number): RoutingDecision {
    const tiered = this.#match(req, n);
    const t1 = this.#clock.now();
    const c = this.config;
    const o = req.override;
    const bs = this.blockSize;
    const isl = req.isl;
    const trackPrefill = o?.trackPrefillTokens ?? c.routerTrackPrefillTokens;
    const assumeReuse = o?.assumeKvReuse ?? c.routerAssumeKvReuse;
    const credit = o?.overlapScoreCredit ?? c.overlapScoreCredit;
    const knobs: CostKnobs = {
      overlapScoreCredit: credit,
      overlapScoreCreditDecay: c.overlapScoreCreditDecay,
      prefillLoadScale: o?.prefillLoadScale ?? c.prefillLoadScale,
      decodeActiveRequestWeight: c.decodeActiveRequestWeight,
      hostCacheHitWeight: tiered ? c.hostCacheHitWeight : 0,
      diskCacheHitWeight: tiered ? c.diskCacheHitWeight : 0,
      sharedCacheMultiplier: tiered ? (o?.sharedCacheMultiplier ?? c.sharedCacheMultiplier) : 0,
      trackPrefillTokens: trackPrefill,
      decodeException: this.workerType === 'decode' && !trackPrefill && credit > 0,
    };
    const temperature = o?.routerTemperature ?? c.routerTemperature;
    const requestBlocks = Math.ceil(isl / bs);
    const promptBlocks = req.hashes !== null ? req.hashes.seq.length : Math.floor(isl / bs);
    const shareable = c.routerTrackActiveBlocks && assumeReuse && req.hashes !== null;

    const elig = this.#eligible;
    const dev = this.#dev;
    const depth = this.#depth;
    const host = this.#host;
    const disk = this.#disk;
    const sharedDepth = this.#sharedDepth;
    const prefill = this.#active.activePrefillTokens;
    const blocks = this.#active.activeDecodeBlocks;
    const requests = this.#active.activeRequests;
    const slotWorker = this.#slotWorker;
    const slotRank = this.#slotRank;
    const trackActive = c.routerTrackActiveBlocks;
    let minPrefill = Infinity;
    for (let i = 0; i < n; i++) {
      const p = prefill[elig[i]!]!;
      if (p < minPrefill) minPrefill = p;
    }
    const costs = this.#costs;
    const breakdown = takeBreakdown(n);
    const preferred = req.routingConstraints?.preferredTaints;
    let maxOverlap = 0;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      const overlap = dev[s]!;
      const newBlocks = !trackActive ? 0 : shareable ? promptBlocks - depth[s]! : promptBlocks;
      const decodeBlocks = blocks[s]! + newBlocks;
      const p = prefill[s]!;
      const active = requests[s]!;
      const uncached = isl - overlap * bs;
      const prefillTokens = trackPrefill ? p + (uncached > 0 ? uncached : 0) : p;
      let hostOv = 0;
      let diskOv = 0;
      let sharedBeyond = 0;
      if (tiered) {
        hostOv = host[s]!;
        diskOv = disk[s]!;
        sharedBeyond = sharedDepth > overlap ? sharedDepth - overlap : 0;
      }
      let cost = costOf(knobs, isl, bs, requestBlocks, minPrefill, p, decodeBlocks, active, overlap, hostOv, diskOv, sharedBeyond);
      if (preferred !== undefined) cost *= this.#taintFactor(s, preferred);
      if (overlap > maxOverlap) maxOverlap = overlap;
      costs[i] = cost;
      writeBreakdown(breakdown, i, slotWorker[s]!, slotRank[s]!, overlap, prefillTokens, decodeBlocks, active, cost);
    }
    let pick: number;
    if (n === 1) {
      pick = 0;
      if (temperature > 0) writeProbability(breakdown, 0, 1);
    } else if (temperature > 0) {
      softmaxProbabilities(costs, n, temperature, this.#probs);
      for (let i = 0; i < n; i++) writeProbability(breakdown, i, this.#probs[i]!);
      pick = sampleIndex(this.#probs, n, this.#rng);
    } else {
      pick = pickLowest(costs, n, this.#rng);
    }
    const slot = elig[pick]!;
    const overlap = dev[slot]!;
    let bookedPrefill = 0;
    if (mode === 'book') {
      bookedPrefill = this.#book(req.requestId, slot, isl, req.hashes, overlap, req.expectedOutputTokens, o);
    }
    const t2 = this.#clock.now();
    const hashingMs = req.hashingMs ?? 0;
    return new RoutingDecision(req.requestId, this.#slotWorker[slot]!, this.#slotRank[slot]!, overlap, maxOverlap, requestBlocks, isl,
      bookedPrefill, costs[pick]!, mode === 'book', req.pinWorkerId !== undefined, temperature,
      { hashingMs, matchingMs: t1 - t0, schedulingMs: t2 - t1, totalMs: hashingMs + (t2 - t0) }, queuedMs, breakdown, n);
  }

  /** Books a request on a slot and records it in approximate mode. Returns the prefill tokens booked. */
  #book(requestId: string, slot: number, isl: number, hashes: PromptHashes | null, overlap: number,
    expectedOutputTokens: number | undefined, o: RouterConfigOverride | undefined): number {
    const c = this.config;
    const trackPrefill = o?.trackPrefillTokens ?? c.routerTrackPrefillTokens;
    const assumeReuse = o?.assumeKvReuse ?? c.routerAssumeKvReuse;
    const uncached = isl - overlap * this.blockSize;
    const prefillTokens = trackPrefill && uncached > 0 ? uncached : 0;
    const promptBlocks = hashes !== null ? hashes.seq.length : Math.floor(isl / this.blockSize);
    const share = c.routerTrackActiveBlocks && assumeReuse && hashes !== null;
    this.#active.add({
      requestId, slot, prefillTokens, expectedOutputTokens,
      hashes: share ? hashes : null,
      privateBlocks: c.routerTrackActiveBlocks && !share ? promptBlocks : 0,
    });
    if (hashes !== null && hashes.seq.length > 0) {
      const w = this.#slotWorker[slot]!;
      const r = this.#slotRank[slot]!;
      this.approximate?.record(w, r, hashes.local, hashes.seq);
      this.predicted?.record(w, r, hashes.local, hashes.seq);
      if (this.fallback !== null && this.#eventFallback!(w)) this.fallback.record(w, r, hashes.local, hashes.seq);
    }
    return prefillTokens;
  }

  /** Admits parked requests while load allows. Returns how many were admitted. */
  #drain(): number {
    if (this.#draining || this.#queue.pendingRequests === 0) return 0;
    this.#draining = true;
    try {
      return this.#queue.drain(
        (e) => {
          const slots = e.payload.slots;
          return slots === null ? this.#anyRoom(this.#all, this.#allCount) : this.#anyRoom(slots, slots.length);
        },
        (e) => this.#admit(e),
      );
    } finally {
      this.#draining = false;
    }
  }

  #admit(e: QueueEntry<Parked>): void {
    const { req, arrivedAt, resolve } = e.payload;
    const t0 = this.#clock.now();
    try {
      const n = this.#eligibleInto(req);
      const kept = this.#dropOverloaded(n);
      if (kept === 0) throw rejectionError({ kind: 'overloaded', reason: 'AllWorkersOverloaded', eligibleSlots: n });
      if (this.#active.has(req.requestId)) throw duplicate(req.requestId);
      resolve({ status: 'routed', decision: this.#decide(req, kept, 'book', t0, t0 - arrivedAt) });
    } catch (err) {
      const error = err instanceof KvgateError ? err : new KvgateError('KVG_ERR_INVALID_ARGUMENT', String(err), undefined, { cause: err });
      resolve({ status: 'failed', error });
    }
  }

  /** Product of the preferred-taint factors of the taints slot `s`'s worker carries. */
  #taintFactor(s: number, preferred: Readonly<Record<string, number>>): number {
    let f = 1;
    for (const t of this.#workers.get(this.#slotWorker[s]!)!.taints) {
      const v = preferred[t];
      if (v !== undefined) f *= v;
    }
    return f;
  }

  #slotOf(workerId: number, dpRank: number): number | undefined {
    const s = this.index.findSlot(workerId, dpRank);
    return s !== undefined && s < this.#cap && this.#registered[s] === 1 ? s : undefined;
  }

  #checkedSlot(w: WorkerEntry, dpRank: number): number {
    const { workerId, dataParallelStartRank: start, dataParallelSize: size } = w.summary;
    if (!Number.isInteger(dpRank) || dpRank < start || dpRank >= start + size) {
      throw new KvgateError('KVG_ERR_INVALID_DP_RANK', `worker ${workerId} has dp ranks [${start}, ${start + size}), not ${dpRank}`,
        { workerId, dpRank, dataParallelStartRank: start, dataParallelSize: size });
    }
    return w.slots[dpRank - start]!;
  }

  #dropSlot(slot: number): void {
    this.#active.removeSlot(slot);
    this.#registered[slot] = 0;
    this.#kvUsed[slot] = 0;
  }

  #rebuildAll(): void {
    let n = 0;
    for (const w of this.#workers.values()) n += w.slots.length;
    const all = new Int32Array(n);
    let k = 0;
    for (const w of this.#workers.values()) for (const s of w.slots) if (this.#registered[s] === 1) all[k++] = s;
    this.#all = all;
    this.#allCount = k;
    if (this.#eligible.length < this.#cap) {
      this.#eligible = new Int32Array(this.#cap);
      this.#costs = new Float64Array(this.#cap);
      this.#probs = new Float64Array(this.#cap);
    }
  }

  #ensureCap(need: number): void {
    if (need <= this.#cap) return;
    const cap = Math.max(need, this.#cap * 2, 16);
    const grow = <T extends Float64Array | Int32Array | Uint8Array>(a: T, make: (n: number) => T): T => {
      const b = make(cap);
      b.set(a);
      return b;
    };
    this.#registered = grow(this.#registered, (k) => new Uint8Array(k));
    this.#slotWorker = grow(this.#slotWorker, (k) => new Float64Array(k));
    this.#slotRank = grow(this.#slotRank, (k) => new Int32Array(k));
    this.#maxBatched = grow(this.#maxBatched, (k) => new Float64Array(k));
    this.#totalKv = grow(this.#totalKv, (k) => new Float64Array(k));
    this.#kvUsed = grow(this.#kvUsed, (k) => new Float64Array(k));
    this.#dev = new Float64Array(cap);
    this.#host = new Float64Array(cap);
    this.#disk = new Float64Array(cap);
    this.#depth = new Float64Array(cap);
    this.#cap = cap;
  }
}

function invalidArg(message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_ARGUMENT', message);
}

function workerNotFound(workerId: number): KvgateError {
  return new KvgateError('KVG_ERR_UNKNOWN_WORKER', `worker ${workerId} is not registered`, { workerId });
}

function duplicate(requestId: string): KvgateError {
  return new KvgateError('KVG_ERR_DUPLICATE_REQUEST', `request ${requestId} is already in flight`, { requestId });
}
