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
  prefillWorkerId?: number | undefined;
  prefillDpRank?: number | undefined;
}

export type DirectPhase = 'prefill' | 'decode' | 'aggregated';

const NAMED_BY: Record<DirectPhase, string> = {
  prefill: 'its prefill worker (x-prefill-instance-id header or nvext.prefill_worker_id)',
  decode: 'its decode worker (x-worker-instance-id header, nvext.decode_worker_id or nvext.backend_instance_id)',
  aggregated: 'its worker (x-worker-instance-id header, nvext.backend_instance_id or nvext.decode_worker_id)',
};

/**
 * The worker (and rank, if given) a request names for one phase in direct
 * mode: prefill -> `prefill_worker_id` with `prefill_dp_rank` else `dp_rank`;
 * decode or aggregated -> `decode_worker_id` else `backend_instance_id`, with
 * `dp_rank`. Throws KVG_ERR_MISSING_WORKER_ID saying where to name it.
 */
export function directPin(phase: DirectPhase, hints: DirectHints): { workerId: number; dpRank: number | undefined } {
  const id = phase === 'prefill' ? hints.prefillWorkerId : (hints.decodeWorkerId ?? hints.backendInstanceId);
  if (id === undefined) throw new KvgateError('KVG_ERR_MISSING_WORKER_ID', `router mode is direct: the request must name ${NAMED_BY[phase]}`);
  return { workerId: id, dpRank: phase === 'prefill' ? (hints.prefillDpRank ?? hints.dpRank) : hints.dpRank };
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
    const pin = directPin('aggregated', hints);
    const w = workers.get(pin.workerId);
    if (w === undefined) throw new KvgateError('KVG_ERR_UNKNOWN_WORKER', `worker ${pin.workerId} is not a worker of this model`, { workerId: pin.workerId });
    return { workerId: pin.workerId, dpRank: resolveDpRank(w, pin.dpRank) };
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
