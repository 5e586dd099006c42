/**
 * Load-agnostic and load-aware routers for the non-KV modes (Dynamo's
 * PushRouter modes): round-robin, random, power-of-two choices and
 * least-loaded. Each has `peek` (what `select` would choose now, changing
 * nothing) and `select` (choose and advance). Randomised routers pre-draw
 * their next choice, so a `peek` followed by `select` agree.
 *
 * WorkerRanks are (worker, dp rank) slots; load comes from the router's own
 * bookkeeping through `LoadSource`, never from the engines.
 *
 * A leg that avoids workers its request failed on (a retry, a migration's
 * continuation) is a `retry` turn. The rotating routers keep a rotation per
 * turn, so retries rotate among themselves and never move the rotation of
 * first attempts: otherwise each failing request would advance it twice, and
 * with two workers every first attempt would land on the failing one.
 */
import type { Rng, SimpleRouterMode, WorkerRank } from '../../common/index.js';
import { KvgateError } from '../../errors/index.js';

/** The router's own view of a slot's load (in-flight requests booked on it). */
export interface LoadSource {
  activeRequests(slot: WorkerRank): number;
}

/** `first`: a request's first attempt; `retry`: a leg that avoids workers its request failed on. */
export type Turn = 'first' | 'retry';

export interface SimpleRouter {
  readonly name: SimpleRouterMode;
  /** What `select` with the same turn would choose now, changing nothing. */
  peek(candidates: readonly WorkerRank[], turn?: Turn): WorkerRank;
  /** Chooses and advances (only the rotation of `turn`, where the router rotates). */
  select(candidates: readonly WorkerRank[], turn?: Turn): WorkerRank;
}

/** A rotating router's positions, one per turn. */
class Rotations {
  readonly #at: Record<Turn, number> = { first: 0, retry: 0 };

  at(turn: Turn): number {
    return this.#at[turn];
  }

  advance(turn: Turn): void {
    this.#at[turn] = (this.#at[turn] + 1) % 0x40000000;
  }
}

function nonEmpty(candidates: readonly WorkerRank[]): void {
  if (candidates.length === 0) throw new KvgateError('KVG_ERR_NO_WORKERS', 'no worker is available for this request');
}

class RoundRobinRouter implements SimpleRouter {
  readonly name = 'round-robin';
  readonly #next = new Rotations();

  peek(candidates: readonly WorkerRank[], turn: Turn = 'first'): WorkerRank {
    nonEmpty(candidates);
    return candidates[this.#next.at(turn) % candidates.length]!;
  }

  select(candidates: readonly WorkerRank[], turn: Turn = 'first'): WorkerRank {
    const c = this.peek(candidates, turn);
    this.#next.advance(turn);
    return c;
  }
}

class RandomRouter implements SimpleRouter {
  readonly name = 'random';
  readonly #rng: Rng;
  #draw: number;

  constructor(rng: Rng) {
    this.#rng = rng;
    this.#draw = rng();
  }

  peek(candidates: readonly WorkerRank[]): WorkerRank {
    nonEmpty(candidates);
    return candidates[Math.floor(this.#draw * candidates.length)]!;
  }

  select(candidates: readonly WorkerRank[]): WorkerRank {
    const c = this.peek(candidates);
    this.#draw = this.#rng();
    return c;
  }
}

/** Two distinct random candidates; the less loaded wins (the first on a tie). */
class PowerOfTwoRouter implements SimpleRouter {
  readonly name = 'power-of-two';
  readonly #rng: Rng;
  readonly #load: LoadSource;
  #a: number;
  #b: number;

  constructor(rng: Rng, load: LoadSource) {
    this.#rng = rng;
    this.#load = load;
    this.#a = rng();
    this.#b = rng();
  }

  peek(candidates: readonly WorkerRank[]): WorkerRank {
    nonEmpty(candidates);
    const n = candidates.length;
    if (n === 1) return candidates[0]!;
    const i = Math.floor(this.#a * n);
    // The second pick is uniform over the other n-1 candidates.
    let j = Math.floor(this.#b * (n - 1));
    if (j >= i) j++;
    const ci = candidates[i]!;
    const cj = candidates[j]!;
    return this.#load.activeRequests(cj) < this.#load.activeRequests(ci) ? cj : ci;
  }

  select(candidates: readonly WorkerRank[]): WorkerRank {
    const c = this.peek(candidates);
    this.#a = this.#rng();
    this.#b = this.#rng();
    return c;
  }
}

/** The candidate with the fewest in-flight requests; ties rotate so equal load spreads. */
class LeastLoadedRouter implements SimpleRouter {
  readonly name = 'least-loaded';
  readonly #load: LoadSource;
  readonly #rotation = new Rotations();

  constructor(load: LoadSource) {
    this.#load = load;
  }

  peek(candidates: readonly WorkerRank[], turn: Turn = 'first'): WorkerRank {
    nonEmpty(candidates);
    const n = candidates.length;
    const at = this.#rotation.at(turn);
    let best = candidates[at % n]!;
    let bestLoad = this.#load.activeRequests(best);
    for (let k = 1; k < n; k++) {
      const c = candidates[(at + k) % n]!;
      const l = this.#load.activeRequests(c);
      if (l < bestLoad) {
        best = c;
        bestLoad = l;
      }
    }
    return best;
  }

  select(candidates: readonly WorkerRank[], turn: Turn = 'first'): WorkerRank {
    const c = this.peek(candidates, turn);
    this.#rotation.advance(turn);
    return c;
  }
}

export function createSimpleRouter(mode: SimpleRouterMode, deps: { rng: Rng; load: LoadSource }): SimpleRouter {
  switch (mode) {
    case 'round-robin':
      return new RoundRobinRouter();
    case 'random':
      return new RandomRouter(deps.rng);
    case 'power-of-two':
      return new PowerOfTwoRouter(deps.rng, deps.load);
    case 'least-loaded':
      return new LeastLoadedRouter(deps.load);
  }
}
