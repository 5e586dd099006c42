/**
 * The admin API's views of the gateway: the configuration with secrets
 * redacted, and each model's routing setup and servability.
 */
import type { GatewayConfig } from '../config/index.js';
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
      workers: m.workers.map((w) => ({ id: w.id, url: w.url, role: w.role, engine: w.dialect, dpSize: w.dpSize, kvEvents: w.kvEvents?.endpoint })),
    })),
  };
}
