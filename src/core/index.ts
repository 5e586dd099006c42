/**
 * Pure routing logic: no I/O, no timers; time and randomness are injected
 * (`Clock`, `Rng` from src/common). What other layers and the library face
 * use: the router's knobs and their validation, the scheduler and its
 * request/decision types, the bookkeeping and approximate index it is built
 * on, and the pure pieces of disaggregated serving.
 */
export {
  KV_ROUTER_DEFAULTS,
  KV_ROUTER_CONFIG_FIELDS,
  resolveKvRouterConfig,
  kvEventsEnabled,
  kvRouterOptionsFromDynamo,
  parseRouterConfigOverride,
} from './config.js';
export type {
  KvRouterConfig,
  KvRouterOptions,
  KvRouterKnob,
  QueuePolicy,
  QueueDepthTier,
  ConfigFieldSpec,
  ConfigFieldKind,
} from './config.js';
export { ROUTER_PRESET_NAMES, isRouterPreset, routerPresetKnobs, routerPresetOptions } from './router-presets.js';
export type { RouterPreset } from './router-presets.js';
export { DEFAULT_MAX_PRIORITY_JUMP, MAX_PRIORITY_JUMP_LIMIT } from './queue.js';
export { TokenBucket } from './token-bucket.js';
export { BinaryHeap } from './binary-heap.js';
export type { StepCostModel } from './step-cost.js';
export { ActiveSequences, outputBlockDecay } from './active-sequences.js';
export type { SlotLoad, ActiveRequestInfo, SyncedBooking } from './active-request.js';
export type { PeerBookings, PeerApplyOutcome } from './peer-bookings.js';
export { ApproximateIndex } from './approximate.js';
export type { ApproximateIndexOptions } from './approximate.js';
export { RoutingDecision } from './decision.js';
export type { DecisionTiming, CandidateBreakdown } from './decision.js';
export { KvScheduler, STRUCTURAL_ROUTER_KNOBS } from './scheduler/kv-scheduler.js';
export { rejectionError } from './scheduler/types.js';
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
  BookkeepingObserver,
} from './scheduler/types.js';
export {
  FULL_ATTENTION_GROUP,
  MAX_KV_GROUPS,
  kvGroupSpecOf,
  kvGroupLabel,
  parseKvGroupLabel,
  hybridHitBlocks,
} from './kv-groups.js';
export type { KvCacheGroups, KvGroupSpec, KvGroupView } from './kv-groups.js';
export {
  ALWAYS_DISAGGREGATE,
  DISAGG_POLICY_MODES,
  computeBootstrapRoom,
  decideDisagg,
  randomRoomSeed,
  RequestTracker,
  type DisaggDecision,
  type DisaggPolicy,
} from './disagg/index.js';
