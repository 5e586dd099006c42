/**
 * Session pins in replay (`session_affinity: pin`): one pool's sticky sessions, the gateway's own
 * `StickySessions` on the virtual clock. As in the gateway, each pool keeps its own bindings (a disaggregated
 * fleet's prefill and decode pools each pin a session to the worker that served it there), and a session whose
 * binding is live, or an unbound subagent whose parent's is, has that worker as its only candidate, whatever
 * the load.
 */
import type { Clock, SessionHint } from '../common/index.js';
import { StickySessions } from '../routing/index.js';

export class PoolPins {
  readonly #sessions: StickySessions;
  readonly #workerIds: readonly number[];

  constructor(clock: Clock, workerIds: readonly number[]) {
    this.#sessions = new StickySessions(clock);
    this.#workerIds = workerIds;
  }

  /** The request's candidates: its session's bound worker (or its parent's) while in the pool, else the whole pool. */
  candidates(session: SessionHint | undefined): readonly number[] {
    const sticky = this.#sessions.stickySlot(session, (id) => this.#workerIds.includes(id));
    return sticky === undefined ? this.#workerIds : [sticky.workerId];
  }

  /** The session's request was routed to `workerId`: bind the session there, or slide its binding. */
  served(session: SessionHint | undefined, workerId: number): void {
    this.#sessions.served(session, { workerId, dpRank: 0 });
  }
}
