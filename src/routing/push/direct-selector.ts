/**
 * Direct mode (Dynamo's DirectRoutingRouter): the worker is chosen outside
 * kvgate (for example by a Kubernetes endpoint picker) and named in the
 * request; kvgate only validates the pin and dispatches. A request that names
 * no worker is refused (KVG_ERR_MISSING_WORKER_ID, saying where to name it).
 */
import type { RoutingHints, WorkerRank, WorkerRole } from '../../common/index.js';
import { directPin } from '../pins.js';
import { LocalSelector, pinnedSlot } from './selector.js';
import type { LegRequest } from './types.js';

export class DirectSelector extends LocalSelector {
  /**
   * The slot a leg of `role` names.
   * @throws KvgateError KVG_ERR_MISSING_WORKER_ID, KVG_ERR_UNKNOWN_WORKER, KVG_ERR_INVALID_DP_RANK.
   */
  slotFor(role: WorkerRole, routing: RoutingHints): WorkerRank {
    return pinnedSlot(this.pool, directPin(role, routing));
  }

  protected choose(req: LegRequest): { slot: WorkerRank; pinned: boolean } {
    return { slot: this.slotFor(req.phase, req.routing), pinned: true };
  }
}
