/**
 * Conditional disaggregation in an offline P/D run: each arrival is decided by the model's `disagg_policy` (core's
 * `decideDisagg`, the gateway's rule) before it is routed. A disaggregated request takes the P/D path; an aggregated
 * one is served whole on a decode-pool engine (which computes its prompt itself), as the gateway serves it on a
 * decode worker that can serve alone.
 *
 * The load the `prefill_load` and `either` modes read is the prefill pool's estimate, as the gateway keeps it
 * (Dynamo's `PrefillLoadEstimator`): per prefill worker, the uncached prompt tokens of the prefill legs routed there
 * whose prefill has not completed; the decision reads the least loaded worker's. `PrefillLoadRouter` keeps it by
 * wrapping the prefill pool's router, so any routing policy gets the same estimate.
 */
import { decideDisagg, type DisaggDecision, type DisaggPolicy } from '../core/index.js';
import type { ReplayRouter, RouteChoice, RouteRequest } from './policy.js';

/** The prefill pool's router, counting each worker's queued prefill tokens (booked at routing, released at the prefill's end). */
export class PrefillLoadRouter implements ReplayRouter {
  readonly policy: string;
  readonly #inner: ReplayRouter;
  /** Queued prefill tokens by worker id. */
  readonly #queued = new Map<number, number>();
  /** In-flight prefill legs: key to (worker, tokens booked). */
  readonly #legs = new Map<string, { workerId: number; tokens: number }>();

  constructor(inner: ReplayRouter) {
    this.#inner = inner;
    this.policy = inner.policy;
  }

  route(req: RouteRequest, candidates: readonly number[]): RouteChoice | Promise<RouteChoice> {
    const choice = this.#inner.route(req, candidates);
    const book = (c: RouteChoice): RouteChoice => {
      const tokens = Math.max(0, req.tokens.length - (c.predictedCachedTokens ?? 0));
      this.#legs.set(req.key, { workerId: c.workerId, tokens });
      this.#queued.set(c.workerId, (this.#queued.get(c.workerId) ?? 0) + tokens);
      return c;
    };
    return choice instanceof Promise ? choice.then(book) : book(choice);
  }

  /** The least loaded of `workerIds`: its queued prefill tokens (0 for a pool with an idle worker). */
  leastLoaded(workerIds: readonly number[]): number {
    let least = Infinity;
    for (const id of workerIds) least = Math.min(least, this.#queued.get(id) ?? 0);
    return least === Infinity ? 0 : least;
  }

  prefillCompleted(key: string): void {
    this.#release(key);
    this.#inner.prefillCompleted(key);
  }

  outputTokens(key: string, produced: number): void {
    this.#inner.outputTokens(key, produced);
  }

  finished(key: string): void {
    this.#release(key);
    this.#inner.finished(key);
  }

  applyKvEvents(...a: Parameters<ReplayRouter['applyKvEvents']>): void {
    this.#inner.applyKvEvents(...a);
  }

  tick(): void {
    this.#inner.tick();
  }

  nextEventTime(): number | undefined {
    return this.#inner.nextEventTime?.();
  }

  runUntil(t: number): void {
    this.#inner.runUntil?.(t);
  }

  /** Idempotent: a leg's tokens leave the queue at its prefill's first token or its end, whichever comes first. */
  #release(key: string): void {
    const leg = this.#legs.get(key);
    if (leg === undefined) return;
    this.#legs.delete(key);
    this.#queued.set(leg.workerId, (this.#queued.get(leg.workerId) ?? 0) - leg.tokens);
  }
}

/** One run's per-request decisions under a policy, with the prefill pool's load estimate. */
export class ConditionalDisagg {
  readonly #policy: DisaggPolicy;
  readonly #load: PrefillLoadRouter;
  readonly #prefillWorkers: readonly number[];

  constructor(policy: DisaggPolicy, load: PrefillLoadRouter, prefillWorkers: readonly number[]) {
    this.#policy = policy;
    this.#load = load;
    this.#prefillWorkers = prefillWorkers;
  }

  /** The decision for a prompt of `promptTokens` now (the gateway passes the prompt length too). */
  decide(promptTokens: number): DisaggDecision {
    return decideDisagg(this.#policy, promptTokens, () => this.#load.leastLoaded(this.#prefillWorkers));
  }
}
