/**
 * `/admin/models`'s live view of each worker, from the fleet's own state:
 * where it came from and its state (FleetMembers, which asks the registry and
 * the prober), its capacity (its config, and its engine's /metrics and
 * /v1/models when read on join: EngineChecks); the router adds health and
 * KV-event times.
 */
import type { WorkerConfig } from '../config/index.js';
import type { WorkerRegistry } from '../discovery/index.js';
import type { EngineChecks } from './engine-checks.js';
import type { FleetMembers } from './membership.js';

/** What the fleet knows of one worker beyond its config (FleetMembers, the prober and the routers). */
export interface WorkerLiveStatus {
  /** static (the config file), file (a workers_file), etcd, kubernetes. */
  readonly source: string;
  /** joining, ready, draining, mismatched, down. */
  readonly state: string;
  /** Why the worker is mismatched (its engine's model, block size or tokenizer), when it is. */
  readonly mismatch?: string | undefined;
  /**
   * KV blocks per rank (the config's, else its engine's), batch budget, and the engine's block size and
   * context length as it reported them.
   */
  readonly capacity: {
    readonly totalKvBlocks: number | null;
    readonly maxNumBatchedTokens: number | null;
    readonly engineBlockSize?: number | null;
    readonly maxModelLen?: number | null;
    /** The KV-cache groups its engine stated on join (`full`, `sliding:128`, `mamba`, ...); null: none stated. */
    readonly kvCacheGroups?: readonly string[] | null;
  };
}

/** The live side of `/admin/models`: each worker's status, and the workers that left and still finish requests. */
export interface FleetStatus {
  worker(id: number): WorkerLiveStatus | undefined;
  draining(model: string): readonly WorkerConfig[];
}

export function fleetStatus(members: FleetMembers, registry: WorkerRegistry, checks: EngineChecks): FleetStatus {
  return {
    worker(id: number): WorkerLiveStatus | undefined {
      const state = members.state(id);
      if (state === undefined) return undefined;
      const w = registry.effective(id) ?? members.drainingWorker(id);
      const engine = checks.engineOf(id);
      return {
        source: members.sourceOf(id) ?? 'static',
        state,
        mismatch: members.mismatchOf(id),
        capacity: {
          totalKvBlocks: w?.totalKvBlocks ?? null,
          maxNumBatchedTokens: w?.maxNumBatchedTokens ?? null,
          engineBlockSize: engine.blockSize ?? null,
          maxModelLen: engine.maxModelLen ?? null,
          kvCacheGroups: engine.kvGroups ?? null,
        },
      };
    },
    draining: (model) => members.draining(model).map((d) => d.worker),
  };
}
