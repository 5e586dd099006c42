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
 * - **KV events**: `decodeKvEventBatch` reads vLLM's and SGLang's batches.
 * - **Errors**: every error kvgate raises on purpose is a `KvgateError` with
 *   a stable `code` (`docs/errors.md`).
 *
 * What `kvgate serve` is built from (the gateway, the fleet's routers, the
 * engine client, the KV-event manager, the metrics, the mocker) is the
 * `kvgate/gateway` entry point (src/gateway.ts), for programs that build
 * a gateway of their own; the export lists of both are pinned by a test.
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

// ---- Vocabulary, time, randomness, logging ------------------------------------
/** Injected time and randomness: `systemClock`, `ManualClock` (tests, simulation), `seededRng`. */
export { systemClock, ManualClock, seededRng, silentLogger } from './common/index.js';
export type {
  Clock,
  Rng,
  Logger,
  RoutingHints,
  RouterConfigOverride,
  RoutingConstraints,
  SessionHint,
  WorkerRank,
  WorkerPin,
  WorkerRole,
  RouterMode,
  EngineDialect,
  CancelSignal,
} from './common/index.js';

// ---- WASM: hashing and the prefix index ------------------------------------
/** Dynamo-exact block hashing (XXH3-64, seed 1337, chained sequence hashes) and the flat prefix index. */
export {
  xxh3,
  blockHashes,
  promptHashes,
  sequenceHashes,
  requestSeed,
  BLOCK_HASH_SEED,
  PrefixIndex,
} from './wasm/index.js';
export type { BlockHashOptions, PromptHashes, OverlapScores, RemoveResult } from './wasm/index.js';

// ---- Core: the router's knobs and the scheduler ---------------------------------
/** The router's knobs: defaults, validation (`resolveKvRouterConfig`), Dynamo names, per-request overrides. */
export {
  KV_ROUTER_DEFAULTS,
  KV_ROUTER_CONFIG_FIELDS,
  resolveKvRouterConfig,
  kvEventsEnabled,
  kvRouterOptionsFromDynamo,
  parseRouterConfigOverride,
} from './core/index.js';
export type { KvRouterConfig, KvRouterOptions, QueuePolicy, QueueDepthTier } from './core/index.js';
/** The scheduler and its parts a host may drive directly: bookkeeping, approximate mode, self-explaining decisions. */
export {
  KvScheduler,
  ActiveSequences,
  ApproximateIndex,
  RoutingDecision,
  rejectionError,
  outputBlockDecay,
} from './core/index.js';
export type {
  WorkerCapacity,
  WorkerSummary,
  WorkerLoad,
  SchedulingRequest,
  Rejection,
  AdmissionResult,
  QueueTicket,
  ScheduleOutcome,
  SelectionMode,
  KvSchedulerOptions,
  SlotLoad,
  ActiveRequestInfo,
  ApproximateIndexOptions,
  DecisionTiming,
  CandidateBreakdown,
} from './core/index.js';

// ---- Routing ----------------------------------------------------------------
/** `KvRouter`, the KV-cache-aware chooser, and pin resolution by phase. */
export { KvRouter, resolvePin } from './routing/index.js';
export type { KvRouteRequest } from './routing/index.js';

// ---- KV events ----------------------------------------------------------------
/** vLLM/SGLang KV-event batches decoded (ZMQ frames' payloads), to feed a `PrefixIndex` or `KvRouter.index`. */
export { decodeKvEventBatch } from './events/index.js';
export type { KvCacheEvent, KvEventBatch } from './events/index.js';
