/**
 * The simple modes (round-robin, random, power-of-two, least-loaded): a pin
 * is honoured when the request has one (`resolvePin`), otherwise the mode's
 * rule picks among the eligible slots by this pool's own load. A leg that
 * excludes workers (its request failed there) takes the rule's `retry` turn.
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
    // A leg avoiding workers its request failed on is a retry: it must not move the rotation of first attempts.
    const turn = exclude !== undefined && exclude.size > 0 ? 'retry' : 'first';
    const slot = mode === 'query' ? this.#rule.peek(candidates, turn) : this.#rule.select(candidates, turn);
    return { slot, pinned: false };
  }
}
