/**
 * Routers: they decide which worker serves a request and, for push routers,
 * dispatch it and guard its lifecycle. See README.md for one request's path
 * through these files.
 * - `KvRouter`: the KV-cache-aware chooser (decides, does not send).
 * - `PushRouter` (push/): select + book + dispatch + guard for one pool of
 *   workers, in every mode; the mode is a `LegSelector`.
 * - `PrefillRouter` (disagg/): disaggregated prefill/decode, one strategy per
 *   handoff protocol (SGLang bootstrap, vLLM kv_transfer_params).
 * - `ModelRouter`: everything that routes one model, behind `ModelRouterPort`.
 * - `RouterContext`: clock, rng, logger and metrics, built once and handed down.
 */
export { makeRouterContext } from './context.js';
export type { RouterContext } from './context.js';
export { KvRouter } from './kv-router.js';
export type { KvBookkeeping, KvRouteRequest, KvRouterOptionsInit } from './kv-router.js';
export { directPin, resolveDpRank, resolvePin } from './pins.js';
export { StickySessions, DEFAULT_SESSION_TTL_MS } from './sticky-sessions.js';
export type { SessionBinding } from './sticky-sessions.js';
export { RoundRobinRouter, RandomRouter, PowerOfTwoRouter, LeastLoadedRouter, createSimpleRouter } from './push/simple-routers.js';
export type { LoadSource, SimpleRouter } from './push/simple-routers.js';
export { PushRouter } from './push/push-router.js';
export type { PushRouterOptions } from './push/push-router.js';
export type { LegRequest, LegResponse, LegBody, Selection } from './push/types.js';
export { PrefillRouter } from './disagg/prefill-router.js';
export type { PrefillState, PrefillRouterOptions, DisaggQuery } from './disagg/prefill-router.js';
export { decodeOverrideOf, decodeRouterOverride, prefillPoolConfig } from './disagg/handoff.js';
export { ModelRouter, eventMetricsHooks } from './model-router.js';
export type { ModelRouterOptions } from './model-router.js';
export type {
  ModelRouterPort, PreparedRequest, RoutedResponse, RoutedBody, QueryResult, SseEvent, EndpointKind, RoutingHints,
} from './router-port.js';
