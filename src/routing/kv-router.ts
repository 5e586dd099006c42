/**
 * KvRouter: the KV-aware chooser (Dynamo's `KvRouter`), the public face of
 * kvgate's scheduler. It decides but does not send: the host (kvgate's push
 * router, another gateway, a Kubernetes endpoint picker) dispatches to the
 * chosen (worker, dp_rank) and reports the request's lifecycle back:
 *
 *   schedule / findBestMatch  ->  dispatch  ->  markPrefillCompleted (first token)
 *                                           ->  addOutputBlock (each new block, optional)
 *                                           ->  free (end, error or disconnect)
 *
 * On top of `KvScheduler` (src/core) it adds: hashing the prompt (one WASM
 * call, timed), resolving pins from Dynamo's routing hints by request phase
 * (spec section 1.4 step 4, with the later fix that a prefill request does not
 * fall back to `backend_instance_id`), validating per-request overrides, and
 * query-only selection that books nothing (section 1.5).
 */
import {
  KvScheduler, parseRouterConfigOverride, systemClock, type Clock,
  type AdmissionResult, type RequestPhase, type KvRouterConfig, type KvRouterOptions, type KvSchedulerOptions, type QueueTicket,
  type Rejection, type RouterConfigOverride, type RoutingDecision, type ScheduleOutcome, type SchedulingRequest,
  type SlotLoad, type WorkerInfo, type WorkerLoad, type WorkerSummary, type WorkerType,
} from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import { promptHashes, type BlockHashOptions, type PrefixIndex, type PromptHashes } from '../wasm/index.js';

export type { AdmissionResult, QueueTicket, Rejection, RoutingDecision, ScheduleOutcome, WorkerInfo, WorkerLoad, WorkerSummary, WorkerType };

/** Dynamo's `RoutingHints`, camelCased: pins, restrictions and queue priority. All optional. */
export interface RoutingHints {
  /** Generic pin (aggregated; also the decode pin when `decodeWorkerId` is absent). */
  readonly backendInstanceId?: number | undefined;
  /** Pin for the prefill phase. */
  readonly prefillWorkerId?: number | undefined;
  /** Pin for the decode phase. */
  readonly decodeWorkerId?: number | undefined;
  /** Decode (or aggregated) dp rank of the pin. */
  readonly dpRank?: number | undefined;
  /** Prefill dp rank of the pin (falls back to `dpRank` in the prefill phase). */
  readonly prefillDpRank?: number | undefined;
  /** Expected output length (`nvext.agent_hints.osl`). */
  readonly expectedOutputTokens?: number | undefined;
  /** LoRA adapter: mixed into the block hashes' seed. */
  readonly loraName?: string | undefined;
  /** Seconds of queue priority (`max(priority, 0)` of `nvext.agent_hints.priority`). */
  readonly priorityJump?: number | undefined;
  /** Absolute queue tier; higher always first. */
  readonly strictPriority?: number | undefined;
  /** Restricts candidates (an endpoint picker's list); bypasses the queue unless pinned. */
  readonly allowedWorkerIds?: ReadonlySet<number> | readonly number[] | undefined;
  /** Taint filter and bias: workers advertise `taints` in `addWorker`. */
  readonly routingConstraints?: SchedulingRequest['routingConstraints'];
}

/** A request to route. Give `tokens` (hashed here) or precomputed `hashes` with `isl`. */
export interface KvRouteRequest {
  /** Context id; unique among in-flight requests. */
  readonly requestId: string;
  /** Prompt tokens used for routing (Dynamo: `mm_routing_info.routing_token_ids` when present, else `token_ids`). */
  readonly tokens?: Uint32Array | readonly number[] | undefined;
  /** Precomputed hashes of the prompt's complete blocks (from a preprocessing worker). */
  readonly hashes?: PromptHashes | undefined;
  /** Prompt length in tokens; required with `hashes`, defaults to `tokens.length`. */
  readonly isl?: number | undefined;
  /** Phase of a disaggregated request (default aggregated): selects which pin applies. */
  readonly phase?: RequestPhase | undefined;
  readonly routing?: RoutingHints | undefined;
  /** Per-request scoring overrides (camelCase or Dynamo's snake_case names); validated here. */
  readonly routerConfigOverride?: RouterConfigOverride | Readonly<Record<string, unknown>> | undefined;
  /** Hashing options beyond the LoRA name: cache salt, multimodal hashes, Eagle windows. */
  readonly hashOptions?: Omit<BlockHashOptions, 'loraName'> | undefined;
}

export interface KvRouterOptionsInit extends Omit<KvSchedulerOptions, 'config'> {
  /** Router knobs; validated at construction (KVG_ERR_INVALID_CONFIG names the field). */
  readonly config?: KvRouterOptions | KvRouterConfig;
}

/** A pin resolved for a phase: the worker, and the rank if one was given. */
export interface ResolvedPin {
  readonly workerId: number;
  readonly dpRank: number | undefined;
}

/**
 * Which pin applies to a request in `phase` (spec 1.4 step 4): prefill ->
 * `prefillWorkerId` with `prefillDpRank` else `dpRank`; decode ->
 * `decodeWorkerId` else `backendInstanceId`, with `dpRank`; aggregated ->
 * `backendInstanceId` with `dpRank`. Undefined when unpinned.
 */
export function resolvePin(phase: RequestPhase, hints: RoutingHints | undefined): ResolvedPin | undefined {
  if (hints === undefined) return undefined;
  let workerId: number | undefined;
  let dpRank: number | undefined;
  switch (phase) {
    case 'prefill':
      workerId = hints.prefillWorkerId;
      dpRank = hints.prefillDpRank ?? hints.dpRank;
      break;
    case 'decode':
      workerId = hints.decodeWorkerId ?? hints.backendInstanceId;
      dpRank = hints.dpRank;
      break;
    case 'aggregated':
      workerId = hints.backendInstanceId;
      dpRank = hints.dpRank;
      break;
  }
  return workerId === undefined ? undefined : { workerId, dpRank };
}

export class KvRouter {
  readonly #scheduler: KvScheduler;
  readonly #clock: Clock;

  /**
   * @throws KvgateError KVG_ERR_INVALID_CONFIG (invalid knobs, naming the field) or KVG_ERR_INVALID_BLOCK_SIZE.
   */
  constructor(options: KvRouterOptionsInit) {
    this.#clock = options.clock ?? systemClock;
    this.#scheduler = new KvScheduler({ ...options, clock: this.#clock });
  }

  /** The validated, frozen configuration. */
  get config(): KvRouterConfig {
    return this.#scheduler.config;
  }

  get blockSize(): number {
    return this.#scheduler.blockSize;
  }

  /** The device-tier prefix index the KV-event layer feeds (in approximate mode, the router's own). */
  get index(): PrefixIndex {
    return this.#scheduler.index;
  }

  /** The scheduler underneath, for hosts that pass hashes and resolved pins themselves. */
  get scheduler(): KvScheduler {
    return this.#scheduler;
  }

  // ------------------------------------------------------------ workers

  /** Registers (or updates) a worker and its dp ranks; drains the queue. */
  addWorker(workerId: number, info?: WorkerInfo): void {
    this.#scheduler.addWorker(workerId, info);
  }

  /** Removes a worker, its bookkeeping and index entries; fails requests queued for it alone. */
  removeWorker(workerId: number): boolean {
    return this.#scheduler.removeWorker(workerId);
  }

  workers(): WorkerSummary[] {
    return this.#scheduler.workers();
  }

  // ------------------------------------------------------------ deciding

  /**
   * Chooses the (worker, dp_rank) for a request now, without queueing.
   * `mode: 'book'` (default) books it in the load bookkeeping; `'query'`
   * (Dynamo's query-only) changes nothing.
   * @throws KvgateError KVG_ERR_UNKNOWN_WORKER / KVG_ERR_INVALID_DP_RANK (pins), KVG_ERR_NO_WORKERS,
   *   KVG_ERR_OVERLOADED, KVG_ERR_DUPLICATE_REQUEST, KVG_ERR_INVALID_ARGUMENT (bad request or override),
   *   KVG_ERR_INVALID_TOKEN.
   */
  findBestMatch(request: KvRouteRequest, options: { readonly mode?: 'book' | 'query' } = {}): RoutingDecision {
    return this.#scheduler.select(this.#prepare(request), options.mode ?? 'book');
  }

  /**
   * The full path with the queue: `routed` (booked; dispatch now), `queued`
   * (await `ticket.admitted`; it resolves when load drains, already booked),
   * or `rejected` (backpressure or every eligible rank overloaded; see
   * `rejectionError` for an HTTP 503).
   * @throws as `findBestMatch` for invalid requests.
   */
  schedule(request: KvRouteRequest): ScheduleOutcome {
    return this.#scheduler.schedule(this.#prepare(request));
  }

  /**
   * Books a request whose worker was chosen elsewhere (direct routing, replica sync).
   * @throws KvgateError KVG_ERR_UNKNOWN_WORKER, KVG_ERR_INVALID_DP_RANK, KVG_ERR_DUPLICATE_REQUEST.
   */
  addRequest(request: KvRouteRequest & { readonly workerId: number; readonly dpRank?: number; readonly overlapBlocks?: number }): void {
    const prepared = this.#prepare(request);
    this.#scheduler.addRequest({
      requestId: prepared.requestId, workerId: request.workerId, isl: prepared.isl, hashes: prepared.hashes,
      ...(request.dpRank !== undefined ? { dpRank: request.dpRank } : {}),
      ...(request.overlapBlocks !== undefined ? { overlapBlocks: request.overlapBlocks } : {}),
      ...(prepared.expectedOutputTokens !== undefined ? { expectedOutputTokens: prepared.expectedOutputTokens } : {}),
      ...(prepared.override !== undefined ? { override: prepared.override } : {}),
    });
  }

  // ------------------------------------------------------------ lifecycle

  /** The first token arrived: the request's prompt load leaves the worker. */
  markPrefillCompleted(requestId: string): boolean {
    return this.#scheduler.markPrefillCompleted(requestId);
  }

  /** A new output block (with `routerTrackOutputBlocks`); `decay` from `outputBlockDecay(osl, expected)`. */
  addOutputBlock(requestId: string, decay?: number): boolean {
    return this.#scheduler.addOutputBlock(requestId, decay);
  }

  /** The request ended (any way). With `owner`, only if booked on that (worker, dp_rank). */
  free(requestId: string, owner?: { readonly workerId: number; readonly dpRank: number }): boolean {
    return this.#scheduler.free(requestId, owner);
  }

  /** Periodic work: expiry of forgotten requests and approximate entries, queue drain. Call every few seconds. */
  tick(): ReturnType<KvScheduler['tick']> {
    return this.#scheduler.tick();
  }

  // ------------------------------------------------------------ reading

  load(workerId: number, dpRank = 0): SlotLoad | undefined {
    return this.#scheduler.load(workerId, dpRank);
  }

  loads(): WorkerLoad[] {
    return this.#scheduler.loads();
  }

  get pendingRequests(): number {
    return this.#scheduler.pendingRequests;
  }

  get pendingIslTokens(): number {
    return this.#scheduler.pendingIslTokens;
  }

  // ------------------------------------------------------------ internals

  #prepare(request: KvRouteRequest): SchedulingRequest & { readonly isl: number; readonly hashes: PromptHashes | null } {
    if (typeof request.requestId !== 'string' || request.requestId.length === 0) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'requestId must be a non-empty string');
    }
    const hints = request.routing;
    let hashes: PromptHashes | null = null;
    let isl: number;
    let hashingMs = 0;
    if (request.hashes !== undefined) {
      hashes = request.hashes;
      isl = request.isl ?? request.tokens?.length ?? Number.NaN;
      if (!Number.isInteger(isl) || isl < 0 || hashes.seq.length > Math.floor(isl / this.blockSize) || hashes.local.length !== hashes.seq.length) {
        throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `precomputed hashes need a consistent isl (got ${request.isl}, ${hashes.seq.length} blocks of ${this.blockSize})`);
      }
    } else if (request.tokens !== undefined) {
      isl = request.tokens.length;
      const opts: BlockHashOptions = { ...request.hashOptions, loraName: hints?.loraName };
      const t0 = this.#clock.now();
      hashes = promptHashes(request.tokens, this.blockSize, opts);
      hashingMs = this.#clock.now() - t0;
    } else {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'a route request needs tokens or precomputed hashes');
    }
    const pin = resolvePin(request.phase ?? 'aggregated', hints);
    const override = request.routerConfigOverride === undefined ? undefined : parseRouterConfigOverride(request.routerConfigOverride);
    const priorityJump = hints?.priorityJump;
    if (priorityJump !== undefined && !(priorityJump >= 0 && Number.isFinite(priorityJump))) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `priorityJump must be a finite number >= 0, got ${priorityJump}`);
    }
    return {
      requestId: request.requestId,
      isl,
      hashes,
      hashingMs,
      pinWorkerId: pin?.workerId,
      pinDpRank: pin?.dpRank,
      allowedWorkerIds: hints?.allowedWorkerIds,
      routingConstraints: hints?.routingConstraints,
      priorityJump,
      strictPriority: hints?.strictPriority,
      expectedOutputTokens: hints?.expectedOutputTokens,
      override,
    };
  }

}
