/**
 * Pure routing logic: no I/O, no timers; time and randomness are injected.
 * Configuration, the cost model and selection, active-sequence bookkeeping,
 * the queue, approximate mode and the scheduler that ties them together, plus
 * the pure pieces of disaggregated serving.
 */
export { systemClock, ManualClock, seededRng } from './clock.js';
export type { Clock, Rng } from './clock.js';
export {
  KV_ROUTER_DEFAULTS, KV_ROUTER_CONFIG_FIELDS, resolveKvRouterConfig, kvEventsEnabled, kvRouterOptionsFromFlags,
  kvRouterOptionsFromDynamo, parseRouterConfigOverride,
} from './config.js';
export type { KvRouterConfig, KvRouterOptions, RouterConfigOverride, QueuePolicy, QueueDepthTier, ConfigFieldSpec } from './config.js';
export { costOf, candidateCost, costV11 } from './cost.js';
export type { CostKnobs, CandidateLoad, CostRequest } from './cost.js';
export { pickLowest, softmaxProbabilities, sampleIndex } from './selection.js';
export { ActiveSequences, outputBlockDecay, EXPIRY_CHECK_INTERVAL_MS } from './active-sequences.js';
export type { SlotLoad, BookingInput, ActiveRequestInfo } from './active-sequences.js';
export { ApproximateIndex, DEFAULT_APPROXIMATE_TTL_MS } from './approximate.js';
export type { ApproximateIndexOptions } from './approximate.js';
export { RequestQueue, QueueEntry, queueKey, backpressureCap } from './queue.js';
export { RoutingDecision, BREAKDOWN_STRIDE } from './decision.js';
export type { DecisionTiming, CandidateBreakdown } from './decision.js';
export { KvScheduler, rejectionError, DEFAULT_MAX_NUM_BATCHED_TOKENS } from './scheduler.js';
export type {
  WorkerType, WorkerInfo, WorkerSummary, WorkerLoad, SchedulingRequest, Rejection, AdmissionResult, QueueTicket,
  ScheduleOutcome, SelectionMode, KvSchedulerOptions,
} from './scheduler.js';
export * from './disagg/index.js';
