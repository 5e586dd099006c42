/**
 * `/admin/models`'s live view of each worker, from the fleet's own state:
 * where it came from and its state (FleetMembers, which asks the registry and
 * the prober), its capacity (its config, and its engine's /metrics and
 * /v1/models when read on join: EngineChecks); the router adds health and
 * KV-event times.
 */
import type { WorkerRegistry } from '../discovery/index.js';
import type { FleetStatus, WorkerLiveStatus } from '../frontend/index.js';
import type { EngineChecks } from './engine-checks.js';
import type { FleetMembers } from './membership.js';

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
          totalKvBlocks: w?.totalKvBlocks ?? null, maxNumBatchedTokens: w?.maxNumBatchedTokens ?? null,
          engineBlockSize: engine.blockSize ?? null, maxModelLen: engine.maxModelLen ?? null,
        },
      };
    },
    draining: (model) => members.draining(model).map((d) => d.worker),
  };
}
