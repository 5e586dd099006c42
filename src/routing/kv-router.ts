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
 * On top of `KvScheduler` (src/core) it adds one thing, `#prepare`: hashing
 * the prompt (one WASM call, timed), resolving the pin for the request's phase
 * (`resolvePin`), and validating a library caller's untyped override once. The
 * scheduler's bookkeeping and reading methods are the KvRouter's own, composed
 * in one place (`BOOKKEEPING`) rather than forwarded one by one; the scheduler
 * itself is not exposed.
 */
import {
  systemClock,
  type Clock,
  type RouterConfigOverride,
  type RoutingHints,
  type WorkerRank,
  type WorkerRole,
} from '../common/index.js';
import {
  KvScheduler,
  parseRouterConfigOverride,
  type KvRouterConfig,
  type KvRouterOptions,
  type KvSchedulerOptions,
  type RoutingDecision,
  type ScheduleOutcome,
  type SchedulingRequest,
} from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import { promptHashViews, type BlockHashOptions, type PromptHashes } from '../wasm/index.js';
import { resolvePin } from './pins.js';

/** A request to route. Give `tokens` (hashed here) or precomputed `hashes` with `isl`. */
export interface KvRouteRequest {
  /** Context id; unique among in-flight requests. */
  readonly requestId: string;
  /** Prompt tokens used for routing (Dynamo: `mm_routing_info.routing_token_ids` when present, else `token_ids`). */
  readonly tokens?: Uint32Array | readonly number[] | undefined;
  /** Precomputed hashes of the prompt's complete blocks (from a preprocessing worker). */
  readonly hashes?: PromptHashes | undefined;
  /** Milliseconds spent computing `hashes` where they were computed; the decision reports it as its hashing time. */
  readonly hashingMs?: number | undefined;
  /** Prompt length in tokens; required with `hashes`, defaults to `tokens.length`. */
  readonly isl?: number | undefined;
  /** Which leg of a disaggregated request this is (default aggregated): selects which pin applies. */
  readonly phase?: WorkerRole | undefined;
  /** Pins, restrictions, priority; `routing.routerConfigOverride` must already be validated (`parseRouterConfigOverride`). */
  readonly routing?: RoutingHints | undefined;
  /**
   * A library caller's per-request overrides, unvalidated (camelCase or Dynamo's snake_case names):
   * parsed here, once, and used instead of `routing.routerConfigOverride`.
   */
  readonly routerConfigOverride?: RouterConfigOverride | Readonly<Record<string, unknown>> | undefined;
  /** Hashing options beyond the LoRA name: cache salt, multimodal hashes, Eagle windows. */
  readonly hashOptions?: Omit<BlockHashOptions, 'loraName'> | undefined;
}

/**
 * The KV-cache-aware chooser: hashes a prompt, resolves its pins by phase and asks the scheduler, which books
 * the choice. What a host reports of a request's life (prefill done, output blocks, the end) and reads back
 * (load, state) goes straight to the scheduler underneath: the methods and getters below forward one to one.
 */
export class KvRouter {
  readonly #scheduler: KvScheduler;
  readonly #clock: Clock;

  // ---- bookkeeping a host reports through, and reads load from (the scheduler's own)
  addWorker(...a: Parameters<KvScheduler['addWorker']>): void {
    return this.#scheduler.addWorker(...a);
  }
  removeWorker(workerId: number, keepIndex = false): boolean {
    return this.#scheduler.removeWorker(workerId, keepIndex);
  }
  workers(): ReturnType<KvScheduler['workers']> {
    return this.#scheduler.workers();
  }
  markPrefillCompleted(requestId: string): boolean {
    return this.#scheduler.markPrefillCompleted(requestId);
  }
  addOutputBlock(...a: Parameters<KvScheduler['addOutputBlock']>): boolean {
    return this.#scheduler.addOutputBlock(...a);
  }
  free(...a: Parameters<KvScheduler['free']>): boolean {
    return this.#scheduler.free(...a);
  }
  tick(): ReturnType<KvScheduler['tick']> {
    return this.#scheduler.tick();
  }
  load(slot: WorkerRank): ReturnType<KvScheduler['load']> {
    return this.#scheduler.load(slot);
  }
  loads(): ReturnType<KvScheduler['loads']> {
    return this.#scheduler.loads();
  }
  activeRequest(requestId: string): ReturnType<KvScheduler['activeRequest']> {
    return this.#scheduler.activeRequest(requestId);
  }
  observe(...a: Parameters<KvScheduler['observe']>): void {
    return this.#scheduler.observe(...a);
  }
  localBookings(): ReturnType<KvScheduler['localBookings']> {
    return this.#scheduler.localBookings();
  }

  // ---- the scheduler's state, read-only
  get config(): KvScheduler['config'] {
    return this.#scheduler.config;
  }
  get blockSize(): number {
    return this.#scheduler.blockSize;
  }
  /** Seconds a request's `routing.priorityJump` moves it in the queue at most; a larger one is clamped to it. */
  get maxPriorityJump(): number {
    return this.#scheduler.maxPriorityJump;
  }
  get index(): KvScheduler['index'] {
    return this.#scheduler.index;
  }
  get pendingRequests(): number {
    return this.#scheduler.pendingRequests;
  }
  get pendingIslTokens(): number {
    return this.#scheduler.pendingIslTokens;
  }
  get activeRequestCount(): number {
    return this.#scheduler.activeRequestCount;
  }
  get workerType(): KvScheduler['workerType'] {
    return this.#scheduler.workerType;
  }
  get peers(): KvScheduler['peers'] {
    return this.#scheduler.peers;
  }

  /**
   * Takes the scheduler's options: the router is the scheduler behind a hashing and pinning face. `maxPriorityJump`
   * (seconds, default 10, as a tenant class's `max_priority_jump`) bounds every request's `routing.priorityJump`.
   * @throws KvgateError KVG_ERR_INVALID_CONFIG (invalid knobs or `maxPriorityJump`, naming the field) or
   *   KVG_ERR_INVALID_BLOCK_SIZE.
   */
  constructor(options: KvSchedulerOptions) {
    this.#clock = options.clock ?? systemClock;
    this.#scheduler = new KvScheduler({ ...options, clock: this.#clock });
  }

  /**
   * New knobs for the requests routed from now on; bookkeeping and index stay (see `KvScheduler.reconfigure`).
   * @throws KvgateError KVG_ERR_INVALID_CONFIG for invalid knobs or a changed structural knob.
   */
  reconfigure(config: KvRouterOptions | KvRouterConfig): void {
    this.#scheduler.reconfigure(config);
  }

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
   * Books a request whose worker was chosen elsewhere (direct routing, replica sync, the endpoint picker's bookings).
   * @throws KvgateError KVG_ERR_UNKNOWN_WORKER, KVG_ERR_INVALID_DP_RANK, KVG_ERR_DUPLICATE_REQUEST; KVG_ERR_INVALID_ARGUMENT
   *   for a `startedAt` that is not a finite time up to now.
   */
  addRequest(
    request: KvRouteRequest & {
      readonly workerId: number;
      readonly dpRank?: number;
      readonly overlapBlocks?: number;
      /** When it started (clock ms, not after now), for one booked again: its expiry (lost ends) counts from then. */
      readonly startedAt?: number;
    },
  ): void {
    const prepared = this.#prepare(request);
    this.#scheduler.addRequest({
      requestId: prepared.requestId,
      workerId: request.workerId,
      isl: prepared.isl,
      hashes: prepared.hashes,
      ...(request.dpRank !== undefined ? { dpRank: request.dpRank } : {}),
      ...(request.overlapBlocks !== undefined ? { overlapBlocks: request.overlapBlocks } : {}),
      ...(request.startedAt !== undefined ? { startedAt: request.startedAt } : {}),
      ...(prepared.expectedOutputTokens !== undefined ? { expectedOutputTokens: prepared.expectedOutputTokens } : {}),
      ...(prepared.override !== undefined ? { override: prepared.override } : {}),
    });
  }

  /** Validates and hashes a request, resolves its pin, and reshapes it for the scheduler (the one reshape). */
  #prepare(
    request: KvRouteRequest,
  ): SchedulingRequest & { readonly isl: number; readonly hashes: PromptHashes | null } {
    if (typeof request.requestId !== 'string' || request.requestId.length === 0) {
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'requestId must be a non-empty string');
    }
    const hints = request.routing;
    const { isl, hashes, hashingMs } = this.#hashes(request);
    const pin = resolvePin(request.phase ?? 'aggregated', hints);
    const override: RouterConfigOverride | undefined =
      request.routerConfigOverride !== undefined
        ? parseRouterConfigOverride(request.routerConfigOverride)
        : hints?.routerConfigOverride;
    // Malformed is refused; a jump past `maxPriorityJump` is well formed and is clamped in the queue (the scheduler's
    // bound, so a host driving `KvScheduler` itself is bounded too), as the gateway clamps a client's to its class's.
    const priorityJump = hints?.priorityJump;
    if (priorityJump !== undefined && !(priorityJump >= 0 && Number.isFinite(priorityJump))) {
      throw new KvgateError(
        'KVG_ERR_INVALID_ARGUMENT',
        `priorityJump must be a finite number >= 0, got ${priorityJump}`,
      );
    }
    return {
      requestId: request.requestId,
      isl,
      hashes,
      hashingMs,
      pinWorkerId: pin?.workerId,
      pinDpRank: pin?.dpRank,
      allowedWorkerIds: hints?.allowedWorkerIds,
      allowedDpRanks: hints?.allowedDpRanks,
      adapterRestricted: hints?.adapterRestricted,
      routingConstraints: hints?.routingConstraints,
      priorityJump,
      strictPriority: hints?.strictPriority,
      expectedOutputTokens: hints?.expectedOutputTokens,
      tenant: hints?.tenant,
      override,
    };
  }

  #hashes(request: KvRouteRequest): { isl: number; hashes: PromptHashes; hashingMs: number } {
    const blockSize = this.#scheduler.blockSize;
    if (request.hashes !== undefined) {
      const hashes = request.hashes;
      const isl = request.isl ?? request.tokens?.length ?? Number.NaN;
      if (
        !Number.isInteger(isl) ||
        isl < 0 ||
        hashes.seq.length > Math.floor(isl / blockSize) ||
        hashes.local.length !== hashes.seq.length
      ) {
        throw new KvgateError(
          'KVG_ERR_INVALID_ARGUMENT',
          `precomputed hashes need a consistent isl (got ${request.isl}, ${hashes.seq.length} blocks of ${blockSize})`,
        );
      }
      return { isl, hashes, hashingMs: request.hashingMs ?? 0 };
    }
    if (request.tokens === undefined)
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'a route request needs tokens or precomputed hashes');
    const loraName = request.routing?.loraName;
    // No options object for a plain prompt (the usual one): the decision runs cold, and every allocation shows.
    const opts: BlockHashOptions | undefined =
      request.hashOptions === undefined && loraName === undefined ? undefined : { ...request.hashOptions, loraName };
    const t0 = this.#clock.now();
    // Views into a shared buffer: the router keeps them by reference only (bookkeeping, indexes, replica sync copies).
    const hashes = promptHashViews(request.tokens, blockSize, opts);
    return { isl: request.tokens.length, hashes, hashingMs: this.#clock.now() - t0 };
  }
}
