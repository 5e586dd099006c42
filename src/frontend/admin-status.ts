/**
 * The admin API's views of the gateway: the configuration with secrets
 * redacted, and each model's routing setup and servability.
 */
import type { GatewayConfig, WorkerConfig } from '../config/index.js';
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

/** What the fleet knows of one worker beyond its config (the CLI's FleetMembers, prober and routers). */
export interface WorkerLiveStatus {
  /** static (the config file), file (a workers_file), etcd. */
  readonly source: string;
  /** joining, ready, draining, mismatched, down. */
  readonly state: string;
  /** Why the worker is mismatched (its engine's model or block size), when it is. */
  readonly mismatch?: string | undefined;
  readonly capacity: { readonly totalKvBlocks: number | null; readonly maxNumBatchedTokens: number | null; readonly engineBlockSize?: number | null };
  /** When its latest KV event arrived (ISO 8601), null before the first or without KV events. */
  readonly lastKvEventAt: string | null;
}

/** The live side of `/admin/models`: each worker's status, and the workers that left and still finish requests. */
export interface FleetStatus {
  worker(id: number): WorkerLiveStatus | undefined;
  draining(model: string): readonly WorkerConfig[];
}

/**
 * `GET /admin/models`: per model its router mode, block size, whether it can serve now, tokenizer and workers
 * (with `fleet`: each worker's source, state, capacity and last KV-event time, draining workers included).
 */
export function modelsStatus(config: GatewayConfig, ports: ReadonlyMap<string, ModelRouterPort>, status: GatewayStatus, fleet?: FleetStatus): unknown {
  return {
    ...status,
    models: config.models.map((m) => ({
      name: m.name,
      routerMode: m.routerMode,
      blockSize: m.blockSize,
      canServe: ports.get(m.name)!.canServe(),
      tokenizer: m.tokenizer.kind,
      workers: [...m.workers, ...(fleet?.draining(m.name) ?? [])].map((w) => ({
        id: w.id, url: w.url, role: w.role, engine: w.dialect, dpSize: w.dpSize, kvEvents: w.kvEvents?.endpoint, ...fleet?.worker(w.id),
      })),
    })),
  };
}
