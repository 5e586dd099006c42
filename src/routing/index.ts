/**
 * Routers: they decide which worker serves a request and, for push routers,
 * dispatch it and guard its lifecycle.
 * - `KvRouter`: the KV-cache-aware chooser (decides, does not send).
 * - `PushRouter`: select + book + dispatch + guard for one pool of workers, in
 *   every mode (kv, round-robin, random, power-of-two, least-loaded, direct).
 * - `PrefillRouter`: disaggregated prefill/decode (SGLang bootstrap and vLLM
 *   kv_transfer_params handoffs).
 * - `ModelRouter`: everything that routes one model, behind `ModelRouterPort`.
 */
export { KvRouter, resolvePin } from './kv-router.js';
export type {
  KvRouteRequest, KvRouterOptionsInit, RoutingHints, ResolvedPin, AdmissionResult, QueueTicket, Rejection,
  RoutingDecision, ScheduleOutcome, WorkerInfo, WorkerLoad, WorkerSummary, WorkerType,
} from './kv-router.js';
export { RoundRobinRouter, RandomRouter, PowerOfTwoRouter, LeastLoadedRouter, createSimpleRouter } from './simple-routers.js';
export type { Candidate, LoadSource, SimpleRouter, SimpleRouterMode } from './simple-routers.js';
export { DirectRouter, directPin, resolveDpRank } from './direct-router.js';
export type { DirectHints, DirectPhase, DirectWorker } from './direct-router.js';
export { PushRouter, ROUTER_MODES } from './push-router.js';
export type { RouterMode, LegRequest, LegResponse, LegBody, Selection, PushRouterOptions } from './push-router.js';
export { PrefillRouter } from './prefill-router.js';
export type { PrefillState, PrefillRouterOptions, DisaggQuery } from './prefill-router.js';
export { ModelRouter, toRoutingHints, eventMetricsHooks } from './model-router.js';
export type { ModelRouterOptions } from './model-router.js';
export type {
  ModelRouterPort, PreparedRequest, RoutedResponse, RoutedBody, QueryResult, WorkerRef, SseEvent, EndpointKind,
  RoutingHints as PortRoutingHints,
} from './router-port.js';
