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
 * - `kvPool`: a `KvRouter` with its KV-event ingestion (a model's pool, or the endpoint picker's).
 * - `KvEventsWatch`: a pool's KV-event liveness as an operator sees it (a model's workers, or the picker's pods).
 */
export { makeRouterContext } from './context.js';
export type { RouterContext } from './context.js';
export { KvRouter } from './kv-router.js';
export { holdIndexToBudget, kvPool, reportIndexBytes } from './kv-pool.js';
export type { EventWatch } from './event-hooks.js';
export { KvEventsWatch } from './kv-events-watch.js';
export type { WatchedWorker } from './kv-events-watch.js';
export type { KvRouteRequest } from './kv-router.js';
export { resolvePin } from './pins.js';
export { createSimpleRouter } from './push/simple-routers.js';
export type { LoadSource, SimpleRouter } from './push/simple-routers.js';
export { PushRouter } from './push/push-router.js';
export type { PushRouterOptions } from './push/push-router.js';
export type { LegRequest } from './push/types.js';
export { PrefillRouter } from './disagg/prefill-router.js';
export type { PrefillRouterOptions } from './disagg/prefill-router.js';
export { decodeOverrideOf, prefillPoolConfig } from './disagg/handoff.js';
export { ModelRouter } from './model-router.js';
export { StickySessions, pinsSessions } from './sticky-sessions.js';
export type { ModelRouterOptions } from './model-router.js';
export type {
  ModelRouterPort,
  PreparedRequest,
  RoutedResponse,
  QueryResult,
  SseEvent,
  EndpointKind,
} from './router-port.js';
export { probeTokenizer, compareStoredBlocks } from './tokenizer-probe.js';
/** Judging a joining engine's KV-cache layout (fleet's engine checks) uses core's reading of group labels. */
export { parseKvGroupLabel, kvGroupLabel } from '../core/index.js';
export type { TokenizerProbeResult } from './tokenizer-probe.js';
/** A dp rank's KV-event publisher (the engine's port + rank, as vLLM binds it): the picker subscribes a pod's ranks. */
export { dpRankEndpoint } from '../events/index.js';
