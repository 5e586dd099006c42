/**
 * Which worker a request names, by the role of the leg being routed. Two
 * rules, one per router family:
 * - `resolvePin` (kv and simple modes): a pin is optional; a prefill leg never
 *   falls back to `backendInstanceId` (only a decode or aggregated one does).
 * - `directPin` (direct mode): the request must name its worker; a decode or
 *   aggregated leg takes `decodeWorkerId` first.
 * `resolveDpRank` checks a pinned rank against the ranks a worker serves.
 */
import type { RoutingHints, WorkerPin, WorkerRole } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

/**
 * Which pin applies to a leg of `role`: prefill -> `prefillWorkerId` with
 * `prefillDpRank` else `dpRank`; decode -> `decodeWorkerId` else
 * `backendInstanceId`, with `dpRank`; aggregated -> `backendInstanceId` with
 * `dpRank`. Undefined when unpinned.
 */
export function resolvePin(role: WorkerRole, hints: RoutingHints | undefined): WorkerPin | undefined {
  if (hints === undefined) return undefined;
  let workerId: number | undefined;
  let dpRank: number | undefined;
  switch (role) {
    case 'prefill':
      workerId = hints.prefillWorkerId;
      dpRank = hints.prefillDpRank ?? hints.dpRank;
      break;
    case 'decode':
      workerId = hints.decodeWorkerId ?? hints.backendInstanceId;
      dpRank = hints.dpRank;
      break;
    case 'aggregated':
      workerId = hints.backendInstanceId;
      dpRank = hints.dpRank;
      break;
  }
  return workerId === undefined ? undefined : { workerId, dpRank };
}

const NAMED_BY: Record<WorkerRole, string> = {
  prefill: 'its prefill worker (x-prefill-instance-id header or nvext.prefill_worker_id)',
  decode: 'its decode worker (x-worker-instance-id header, nvext.decode_worker_id or nvext.backend_instance_id)',
  aggregated: 'its worker (x-worker-instance-id header, nvext.backend_instance_id or nvext.decode_worker_id)',
};

/**
 * The worker (and rank, if given) a request names for one leg in direct
 * mode: prefill -> `prefillWorkerId` with `prefillDpRank` else `dpRank`;
 * decode or aggregated -> `decodeWorkerId` else `backendInstanceId`, with
 * `dpRank`.
 * @throws KvgateError KVG_ERR_MISSING_WORKER_ID saying where to name it.
 */
export function directPin(role: WorkerRole, hints: RoutingHints): WorkerPin {
  const id = role === 'prefill' ? hints.prefillWorkerId : (hints.decodeWorkerId ?? hints.backendInstanceId);
  if (id === undefined)
    throw new KvgateError(
      'KVG_ERR_MISSING_WORKER_ID',
      `router mode is direct: the request must name ${NAMED_BY[role]}`,
    );
  return { workerId: id, dpRank: role === 'prefill' ? (hints.prefillDpRank ?? hints.dpRank) : hints.dpRank };
}

/** The ranks a worker serves: dpStart .. dpStart + dpSize - 1. */
export interface RankRange {
  readonly id: number;
  readonly dpStart: number;
  readonly dpSize: number;
}

/**
 * A pinned rank must be one the worker serves; with no rank given, the worker's first.
 * @throws KvgateError KVG_ERR_INVALID_DP_RANK naming the worker's ranks.
 */
export function resolveDpRank(w: RankRange, dpRank: number | undefined): number {
  if (dpRank === undefined) return w.dpStart;
  if (!Number.isInteger(dpRank) || dpRank < w.dpStart || dpRank >= w.dpStart + w.dpSize) {
    throw new KvgateError(
      'KVG_ERR_INVALID_DP_RANK',
      `dp_rank ${dpRank} is not served by worker ${w.id} (ranks ${w.dpStart}..${w.dpStart + w.dpSize - 1})`,
      { workerId: w.id, dpRank },
    );
  }
  return dpRank;
}
