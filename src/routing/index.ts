/**
 * Routers: they decide which worker serves a request (and, for push routers,
 * dispatch it). `KvRouter` is the KV-cache-aware chooser.
 */
export { KvRouter, resolvePin } from './kv-router.js';
export type {
  KvRouteRequest, KvRouterOptionsInit, RoutingHints, ResolvedPin, AdmissionResult, QueueTicket, Rejection,
  RoutingDecision, ScheduleOutcome, WorkerInfo, WorkerLoad, WorkerSummary, WorkerType,
} from './kv-router.js';
