/**
 * Direct routing (Dynamo's DirectRoutingRouter): the worker is chosen outside
 * kvgate (for example by a Kubernetes endpoint picker) and named in the
 * request; kvgate only validates and dispatches. The worker id comes from
 * `decode_worker_id`, else `backend_instance_id` (nvext or the
 * `x-worker-instance-id` header, already merged into the hints).
 */
import { KvgateError } from '../errors/index.js';
import type { Candidate } from './simple-routers.js';

export interface DirectHints {
  backendInstanceId?: number | undefined;
  decodeWorkerId?: number | undefined;
  dpRank?: number | undefined;
}

export interface DirectWorker {
  readonly workerId: number;
  /** Ranks the worker serves: dpStart .. dpStart + dpSize - 1. */
  readonly dpStart: number;
  readonly dpSize: number;
}

export class DirectRouter {
  readonly name = 'direct';

  /** The pinned (worker, rank), or a typed error naming what is missing or wrong. */
  resolve(hints: DirectHints, workers: ReadonlyMap<number, DirectWorker>): Candidate {
    const id = hints.decodeWorkerId ?? hints.backendInstanceId;
    if (id === undefined) {
      throw new KvgateError('KVG_ERR_MISSING_WORKER_ID',
        'router mode is direct: name the worker with the x-worker-instance-id header or nvext.backend_instance_id');
    }
    const w = workers.get(id);
    if (w === undefined) throw new KvgateError('KVG_ERR_UNKNOWN_WORKER', `worker ${id} is not a worker of this model`, { workerId: id });
    return { workerId: id, dpRank: resolveDpRank(w, hints.dpRank) };
  }
}

/** A pinned rank must be one the worker advertises; with no pin, a single-rank worker's rank. */
export function resolveDpRank(w: DirectWorker, dpRank: number | undefined): number {
  if (dpRank === undefined) return w.dpStart;
  if (!Number.isInteger(dpRank) || dpRank < w.dpStart || dpRank >= w.dpStart + w.dpSize) {
    throw new KvgateError('KVG_ERR_INVALID_DP_RANK',
      `dp_rank ${dpRank} is not served by worker ${w.workerId} (ranks ${w.dpStart}..${w.dpStart + w.dpSize - 1})`, { workerId: w.workerId, dpRank });
  }
  return dpRank;
}
