/**
 * The admin API's views of the gateway: the configuration with secrets
 * redacted, and each model's routing setup and servability.
 */
import { withoutCredentials, type GatewayConfig, type ModelConfig, type WorkerConfig } from '../config/index.js';
import type { FleetStatus } from '../fleet/index.js';
import type { ModelRouterPort } from './router-port.js';

/** The configuration as loaded, API keys counted, never shown; NATS and OTLP URLs without their credentials. */
export function redactedConfig(config: GatewayConfig): unknown {
  const members = config.tenants.members.map((m) => ({ ...m, apiKeys: `${m.apiKeys.length} configured (not shown)` }));
  const { otlpEndpoint } = config.tracing;
  return {
    ...config,
    apiKeys: `${config.apiKeys.length} configured (not shown)`,
    tenants: { ...config.tenants, members },
    // `nats://user:pass@host` and `nats://token@host` are how NATS takes credentials.
    replicas: { ...config.replicas, natsServers: config.replicas.natsServers.map(withoutCredentials) },
    tracing: {
      ...config.tracing,
      otlpEndpoint: otlpEndpoint === undefined ? undefined : withoutCredentials(otlpEndpoint),
    },
  };
}

export interface GatewayStatus {
  readonly preprocess: { readonly mode: string; readonly threads: number };
  readonly inflight: number;
  readonly draining: boolean;
}

/**
 * `GET /admin/models`: per model its router mode, block size, whether it can serve now, tokenizer and workers
 * (with `fleet`: each worker's source, lifecycle state and capacity, draining workers included).
 */
export function modelsStatus(
  config: GatewayConfig,
  ports: ReadonlyMap<string, ModelRouterPort>,
  status: GatewayStatus,
  fleet?: FleetStatus,
): unknown {
  return {
    ...status,
    models: config.models.map((m) => ({
      name: m.name,
      routerMode: m.routerMode,
      blockSize: m.blockSize,
      canServe: ports.get(m.name)!.canServe(),
      tokenizer: m.tokenizer.kind,
      workers: workersOf(m, ports.get(m.name)!, fleet),
    })),
  };
}

/**
 * The model's workers (configured, discovered, and those that left and still finish requests) with, where
 * known, the fleet's view (source, lifecycle state, capacity) and the router's (health, KV-event state, last
 * event, last probe and its error).
 */
function workersOf(m: ModelConfig, port: ModelRouterPort, fleet: FleetStatus | undefined): unknown[] {
  const status = new Map((port.workerStatus?.() ?? []).map((w) => [w.id, w]));
  const all: readonly WorkerConfig[] = [...m.workers, ...(fleet?.draining(m.name) ?? [])];
  return all.map((w) => {
    const st = status.get(w.id);
    return {
      id: w.id,
      url: w.url,
      role: w.role,
      engine: w.dialect,
      dpSize: w.dpSize,
      kvEvents: w.kvEvents?.endpoint,
      ...(st === undefined
        ? {}
        : {
            state: st.up ? 'ready' : 'down',
            health: st.health,
            kvEventsState: st.kvEvents,
            ...(st.kvEventRanksConnected === undefined ? {} : { kvEventRanksConnected: st.kvEventRanksConnected }),
            lastEventAt: st.lastEventAt ?? null,
            lastProbeAt: st.lastProbeAt ?? null,
            lastError: st.lastError ?? null,
          }),
      ...fleet?.worker(w.id),
    };
  });
}
