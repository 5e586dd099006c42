/**
 * `/admin/models`'s live view of each worker, from the fleet's own state:
 * where it came from and its state (FleetMembers, which asks the registry and
 * the prober), its capacity (its config, and its engine's /metrics when read
 * on join) and when its latest KV event arrived (its model's router).
 */
import type { WorkerRegistry } from '../discovery/index.js';
import type { FleetStatus, WorkerLiveStatus } from '../frontend/index.js';
import type { ModelRouter } from '../routing/index.js';
import type { FleetMembers } from './membership.js';

export function fleetStatus(members: FleetMembers, registry: WorkerRegistry, routers: ReadonlyMap<string, ModelRouter>): FleetStatus {
  return {
    worker(id: number): WorkerLiveStatus | undefined {
      const state = members.state(id);
      if (state === undefined) return undefined;
      const w = registry.get(id) ?? members.drainingWorker(id);
      const age = w === undefined ? undefined : routers.get(w.model)?.kvEventAgeMs(id);
      return {
        source: members.sourceOf(id) ?? 'static',
        state,
        mismatch: members.mismatchOf(id),
        capacity: { totalKvBlocks: w?.totalKvBlocks ?? null, maxNumBatchedTokens: w?.maxNumBatchedTokens ?? null },
        lastKvEventAt: age === undefined ? null : new Date(Date.now() - age).toISOString(),
      };
    },
    draining: (model) => members.draining(model).map((d) => d.worker),
  };
}
