/**
 * The admin API's views of the gateway: the configuration with secrets
 * redacted, and each model's routing setup and servability.
 */
import type { GatewayConfig, ModelConfig } from '../config/index.js';
import type { ModelRouterPort } from './router-port.js';

/** The configuration as loaded, API keys counted, never shown. */
export function redactedConfig(config: GatewayConfig): unknown {
  return { ...config, apiKeys: `${config.apiKeys.length} configured (not shown)` };
}

export interface GatewayStatus {
  readonly preprocess: { readonly mode: string; readonly threads: number };
  readonly inflight: number;
  readonly draining: boolean;
}

/** `GET /admin/models`: per model its router mode, block size, whether it can serve now, tokenizer and workers. */
export function modelsStatus(config: GatewayConfig, ports: ReadonlyMap<string, ModelRouterPort>, status: GatewayStatus): unknown {
  return {
    ...status,
    models: config.models.map((m) => ({
      name: m.name,
      routerMode: m.routerMode,
      blockSize: m.blockSize,
      canServe: ports.get(m.name)!.canServe(),
      tokenizer: m.tokenizer.kind,
      workers: workersOf(m, ports.get(m.name)!),
    })),
  };
}

/** The model's configured workers with, where the router tracks them, health, state, last KV event and last error. */
function workersOf(m: ModelConfig, port: ModelRouterPort): unknown[] {
  const status = new Map((port.workerStatus?.() ?? []).map((w) => [w.id, w]));
  return m.workers.map((w) => {
    const st = status.get(w.id);
    return {
      id: w.id, url: w.url, role: w.role, engine: w.dialect, dpSize: w.dpSize, kvEvents: w.kvEvents?.endpoint,
      ...(st === undefined ? {} : {
        state: st.up ? 'up' : 'down', health: st.health, kvEventsState: st.kvEvents,
        lastEventAt: st.lastEventAt ?? null, lastProbeAt: st.lastProbeAt ?? null, lastError: st.lastError ?? null,
      }),
    };
  });
}
