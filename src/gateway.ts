/**
 * `import { startGateway, ... } from 'kvgate/gateway'`: what `kvgate serve` is
 * built from, for a program that builds a gateway of its own or embeds parts
 * of it: the config loader and the gateway starter, the routers that
 * dispatch (one pool's `PushRouter`, the `PrefillRouter`, the per-model
 * `ModelRouter` and their context), the worker registry and health prober,
 * the engine client, the KV-event manager and applier, the metrics, and the
 * simulated engines. These are kvgate's own building blocks: their options
 * follow kvgate's releases more closely than the `kvgate` entry point's.
 */

// ---- The gateway and its config -------------------------------------------------
export { loadGatewayConfig } from './config/index.js';
export type { GatewayConfig, ModelConfig, WorkerConfig } from './config/index.js';
export { startGateway } from './frontend/index.js';
export type { Gateway, GatewayOptions } from './frontend/index.js';

// ---- Routers that dispatch --------------------------------------------------------
/** The simple modes, one pool's push router, the prefill router, the per-model router, and their context. */
export { createSimpleRouter, PushRouter, PrefillRouter, ModelRouter, makeRouterContext } from './routing/index.js';
export type {
  RouterContext,
  SimpleRouter,
  LoadSource,
  PushRouterOptions,
  PrefillRouterOptions,
  ModelRouterOptions,
  ModelRouterPort,
  PreparedRequest,
  RoutedResponse,
  QueryResult,
} from './routing/index.js';

// ---- Workers, transport, KV events, metrics ------------------------------------------
/** The worker registry (membership, roles, availability) and active health probing. */
export { WorkerRegistry, HealthProber } from './discovery/index.js';
export type { WorkerInfo, KvEventEndpoints } from './discovery/index.js';
/** undici transport to engines: per-worker pools, incremental SSE, cancellation, typed errors. */
export { EngineClient } from './engines/index.js';
export type { EngineClientOptions } from './engines/index.js';
/** KV-event ingestion onto prefix indexes: the applier, the tiered index, ZMQ subscriptions with gap replay. */
export { KvEventApplier, KvEventManager, TieredPrefixIndex } from './events/index.js';
export type { KvEventHooks } from './events/index.js';
/** Every Prometheus metric, in a registry of its own. */
export { KvgateMetrics } from './metrics/index.js';

// ---- Simulated engines ---------------------------------------------------------------
/** Simulated vLLM/SGLang engines over HTTP and ZMQ, for tests and trials without GPUs. */
export { startMocker } from './mocker/index.js';
export type { MockerHandle, MockerInput } from './mocker/index.js';
