/**
 * The simple modes (round-robin, random, power-of-two, least-loaded): a pin
 * is honoured when the request has one (`resolvePin`), otherwise the mode's
 * rule picks among the eligible slots by this pool's own load.
 */
import type { Rng, SimpleRouterMode, WorkerRank } from '../../common/index.js';
import { resolvePin } from '../pins.js';
import { LocalSelector, eligibleSlots, pinnedSlot, type PoolMembers } from './selector.js';
import { createSimpleRouter, type SimpleRouter } from './simple-routers.js';
import type { LegRequest } from './types.js';

export class SimpleSelector extends LocalSelector {
  readonly #rule: SimpleRouter;

  constructor(pool: PoolMembers, mode: SimpleRouterMode, rng: Rng) {
    super(pool);
    this.#rule = createSimpleRouter(mode, { rng, load: this });
  }

  protected choose(
    req: LegRequest,
    mode: 'book' | 'query',
    exclude: ReadonlySet<number> | undefined,
  ): { slot: WorkerRank; pinned: boolean } {
    const pin = resolvePin(req.phase, req.routing);
    if (pin !== undefined) return { slot: pinnedSlot(this.pool, pin), pinned: true };
    const candidates = eligibleSlots(this.pool, req.routing, exclude);
    return { slot: mode === 'query' ? this.#rule.peek(candidates) : this.#rule.select(candidates), pinned: false };
  }
}
