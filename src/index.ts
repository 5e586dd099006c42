/**
 * kvgate as a library: `import { KvRouter, promptHashes, ... } from 'kvgate'`.
 *
 * The pieces, bottom up:
 * - **Hashing and the prefix index** (WASM): `promptHashes` computes Dynamo's
 *   local and chained sequence block hashes of a prompt in one call;
 *   `PrefixIndex` holds which (worker, dp_rank) caches which blocks, fed by
 *   KV events, and answers `findMatches` for a whole prompt in one call.
 * - **The scheduler** (pure core): `KvRouterConfig` and its validation,
 *   Dynamo's v1.5 cost model, selection (argmin or softmax), the router's own
 *   load bookkeeping (`ActiveSequences`), the queue with backpressure, and
 *   approximate mode (`ApproximateIndex`), tied together by `KvScheduler`.
 * - **The router** (`KvRouter`): the public chooser. It hashes prompts,
 *   resolves pins from Dynamo's routing hints by phase, and explains each
 *   decision (`RoutingDecision.candidates`).
 * - **Errors**: every error kvgate raises on purpose is a `KvgateError` with
 *   a stable `code` (`docs/errors.md`).
 *
 * Embedding in a few lines (see `examples/embedded-router/`):
 *
 * ```ts
 * const router = new KvRouter({ blockSize: 16 });
 * router.addWorker(1);
 * router.addWorker(2);
 * const d = router.findBestMatch({ requestId: 'req-1', tokens });
 * // dispatch to d.workerId / d.dpRank; on the first token:
 * router.markPrefillCompleted('req-1');
 * // when the response ends (any way):
 * router.free('req-1');
 * ```
 */

// ---- Errors ---------------------------------------------------------------
/** `KvgateError` (with `code`, `statusCode`, `type`, `retryable`), the code table and a type guard. */
export { KvgateError, ERROR_CODES, isKvgateError } from './errors/index.js';
export type { KvgateErrorCode } from './errors/index.js';

// ---- WASM: hashing and the prefix index ------------------------------------
/** Dynamo-exact block hashing (XXH3-64, seed 1337, chained sequence hashes) and the flat prefix index. */
export { xxh3, blockHashes, promptHashes, sequenceHashes, requestSeed, BLOCK_HASH_SEED, PrefixIndex } from './wasm/index.js';
export type { BlockHashOptions, PromptHashes, WorkerSlot, OverlapScores, RemoveResult } from './wasm/index.js';

// ---- Core: configuration, cost model, bookkeeping, queue, scheduler ---------
/** Injected time and randomness: `systemClock`, `ManualClock` (tests, simulation), `seededRng`. */
export { systemClock, ManualClock, seededRng } from './core/index.js';
export type { Clock, Rng } from './core/index.js';
/** The router's knobs: defaults, validation (`resolveKvRouterConfig`), Dynamo names and CLI flags, per-request overrides. */
export {
  KV_ROUTER_DEFAULTS, KV_ROUTER_CONFIG_FIELDS, resolveKvRouterConfig, kvEventsEnabled, kvRouterOptionsFromFlags,
  kvRouterOptionsFromDynamo, parseRouterConfigOverride,
} from './core/index.js';
export type { KvRouterConfig, KvRouterOptions, RouterConfigOverride, QueuePolicy, QueueDepthTier, ConfigFieldSpec } from './core/index.js';
/** Dynamo's v1.5 cost (`costOf`, `candidateCost`), the v1.1 formula it reduces to, and selection. */
export { costOf, candidateCost, costV11, pickLowest, softmaxProbabilities, sampleIndex } from './core/index.js';
export type { CostKnobs, CandidateLoad, CostRequest } from './core/index.js';
/** Active-sequence bookkeeping per (worker, dp_rank) slot, and Dynamo's output-block decay. */
export { ActiveSequences, outputBlockDecay, EXPIRY_CHECK_INTERVAL_MS } from './core/index.js';
export type { SlotLoad, BookingInput, ActiveRequestInfo } from './core/index.js';
/** Approximate mode: routing decisions recorded in a prefix index with a TTL. */
export { ApproximateIndex, DEFAULT_APPROXIMATE_TTL_MS } from './core/index.js';
export type { ApproximateIndexOptions } from './core/index.js';
/** The queue's keys and backpressure tiers. */
export { RequestQueue, QueueEntry, queueKey, backpressureCap } from './core/index.js';
/** A decision that explains itself: chosen slot, overlap, per-candidate breakdown, timing split. */
export { RoutingDecision, BREAKDOWN_STRIDE } from './core/index.js';
export type { DecisionTiming, CandidateBreakdown } from './core/index.js';
/** The scheduler: eligibility, matching, scoring, selection, booking, the queue. */
export { KvScheduler, rejectionError, DEFAULT_MAX_NUM_BATCHED_TOKENS } from './core/index.js';
export type {
  WorkerType, WorkerInfo, WorkerSummary, WorkerLoad, SchedulingRequest, Rejection, AdmissionResult, QueueTicket,
  ScheduleOutcome, SelectionMode, KvSchedulerOptions,
} from './core/index.js';
/** Pure pieces of disaggregated serving: SGLang bootstrap rooms and the per-request tracker with phases. */
export { computeBootstrapRoom, randomRoomSeed, I64_MAX, RequestTracker } from './core/index.js';
export type { RequestPhase, PhasePermit, WorkerAttribution } from './core/index.js';

// ---- Routing ----------------------------------------------------------------
/** `KvRouter`, the KV-cache-aware chooser, and pin resolution by phase. */
export { KvRouter, resolvePin } from './routing/index.js';
export type { KvRouteRequest, KvRouterOptionsInit, RoutingHints, ResolvedPin } from './routing/index.js';
/** Routers that dispatch: simple modes, direct, the push router, the prefill router, and the per-model router. */
export {
  RoundRobinRouter, RandomRouter, PowerOfTwoRouter, LeastLoadedRouter, createSimpleRouter, DirectRouter, resolveDpRank,
  PushRouter, ROUTER_MODES, PrefillRouter, ModelRouter, toRoutingHints,
} from './routing/index.js';
export type {
  Candidate, LoadSource, SimpleRouter, SimpleRouterMode, DirectHints, DirectWorker, RouterMode, LegRequest, LegResponse,
  LegBody, Selection, PushRouterOptions, PrefillState, PrefillRouterOptions, ModelRouterOptions, ModelRouterPort,
  PreparedRequest, RoutedResponse, QueryResult,
} from './routing/index.js';

// ---- Leaves: discovery, transport, KV events, metrics -------------------------
/** The worker registry (membership, roles, availability) and active health probing. */
export { WorkerRegistry, HealthProber } from './discovery/index.js';
export type { WorkerInfo as EngineWorker, WorkerRole, EngineDialect, KvEventSource as WorkerKvEventSource } from './discovery/index.js';
/** undici transport to engines: per-worker pools, incremental SSE, cancellation, typed errors, P/D dialects. */
export { EngineClient, SseParser, EngineHttpError, readChunkInfo } from './engines/index.js';
export type { EngineClientOptions, DispatchOptions, EngineEvent, EngineResponse } from './engines/index.js';
/** KV-event ingestion: vLLM/SGLang decoders, the applier, ZMQ subscribers with gap replay, liveness. */
export { decodeKvEventBatch, KvEventApplier, KvEventManager, KvEventSubscriber, TieredPrefixIndex, EventLiveness } from './events/index.js';
export type { KvCacheEvent, KvEventBatch, EventStatus, KvEventHooks } from './events/index.js';
/** Every Prometheus metric, in a registry of its own. */
export { KvgateMetrics } from './metrics/index.js';
