/**
 * The steps an offline run's arrival paths share (the aggregated path in
 * `offline.ts`, the P/D legs in `offline-disagg.ts`): submitting a leg to an
 * engine with load accounting, routing through a router that may queue,
 * recording admissions, completions and failures. `OfflineLegs` owns the
 * run's progress counters: requests done, and routes still waiting in a
 * router's queue (the event loop yields while there are any).
 */
import type { ManualClock } from '../common/index.js';
import type { CoreRequest, VirtualRequestListener } from '../mocker/index.js';
import type { Engine } from './offline-pools.js';
import type { ReplayRouter, RouteChoice, RouteRequest } from './policy.js';
import type { RequestOutcome } from './results.js';
import type { HitTimeline } from './timeline.js';
import type { ReplayRequest } from './workload.js';

/** One request as it arrives: its outcome record, its key, its synthesised prompt and the replica the front door chose. */
export interface Arrival {
  readonly r: ReplayRequest;
  readonly o: RequestOutcome;
  readonly key: string;
  readonly tokens: number[];
  /** The router replica every leg of the request goes through. */
  readonly replica: number;
}

export interface OfflineLegsOptions {
  /** The run's virtual clock: a route admitted from a queue takes effect at its time. */
  readonly clock: ManualClock;
  /** The engines' context limit: a request whose prompt and max_tokens exceed it fails without routing. */
  readonly maxModelLen: number;
  readonly hits: HitTimeline;
  /** One per request, by request index. */
  readonly outcomes: readonly RequestOutcome[];
  /** Called as requests complete (or fail). */
  readonly onProgress?: (done: number, total: number) => void;
  /** Called when a request ended (finished or failed), at the virtual time it did: closed-loop turns wait on it. */
  readonly onEnded?: (index: number, at: number) => void;
  /** By request index, each of its legs' engine `priority` (session-start priority); undefined: none sent. */
  readonly priorities?: readonly number[] | undefined;
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

export class OfflineLegs {
  readonly #opts: OfflineLegsOptions;
  #done = 0;
  /** Routes waiting in a router's queue (their admission settles a promise). */
  #pendingRoutes = 0;

  constructor(opts: OfflineLegsOptions) {
    this.#opts = opts;
  }

  get pendingRoutes(): number {
    return this.#pendingRoutes;
  }

  /** Counts a request as done (finished or failed). */
  finish(o: RequestOutcome): void {
    this.#done++;
    this.#opts.onEnded?.(o.index, this.#opts.clock.now());
    this.#opts.onProgress?.(this.#done, this.#opts.outcomes.length);
  }

  /** Ends a request as failed; its first error is the one recorded. */
  fail(o: RequestOutcome, err: unknown): void {
    if (o.error === null) o.error = message(err);
    this.finish(o);
  }

  /** Submits a leg of `r` to an engine, counting it on its load timeline until it ends. */
  submit(e: Engine, r: ReplayRequest, req: CoreRequest, at: number, listener: VirtualRequestListener): void {
    e.pool.timeline.add(e.row, at, 1);
    const release = (t: number): void => e.pool.timeline.add(e.row, t, -1);
    const priority = this.#opts.priorities?.[r.index];
    e.ve.submit(priority === undefined ? req : { ...req, priority: Math.round(priority) }, at, {
      ...listener,
      onFinish: (info, t) => {
        release(t);
        listener.onFinish?.(info, t);
      },
      onError: (err, t) => {
        release(t);
        listener.onError?.(err, t);
      },
    });
  }

  /** Why the request cannot be served at all (prompt + max_tokens over max_model_len), or null. */
  tooLong(r: ReplayRequest): string | null {
    const max = this.#opts.maxModelLen;
    return r.inputLength + r.outputLength > max
      ? `prompt (${r.inputLength}) + max_tokens (${r.outputLength}) exceeds max_model_len ${max} (line ${r.line})`
      : null;
  }

  /** Runs `then` with the router's choice now, or when a queued request is admitted (at that virtual time). */
  routeThen(
    router: ReplayRouter,
    req: RouteRequest,
    candidates: readonly number[],
    then: (c: RouteChoice, at: number) => void,
    onError: (err: unknown) => void,
  ): void {
    const clock = this.#opts.clock;
    let result: RouteChoice | Promise<RouteChoice>;
    try {
      result = router.route(req, candidates);
    } catch (err) {
      onError(err);
      return;
    }
    if (!(result instanceof Promise)) {
      then(result, clock.now());
      return;
    }
    this.#pendingRoutes++;
    result.then(
      (c) => {
        this.#pendingRoutes--;
        then(c, clock.now());
      },
      (err: unknown) => {
        this.#pendingRoutes--;
        onError(err);
      },
    );
  }

  /**
   * Records a leg's admission on the engine that computes the prompt: the hit it got, counted
   * at the request's arrival (as the load generator does online and as the infinite-cache bound
   * is windowed), so hits and bound over time compare the same requests.
   */
  admitted(o: RequestOutcome, r: ReplayRequest, cached: number, at: number): void {
    o.admittedMs = at;
    o.cachedTokens = cached;
    this.#opts.hits.record(o.arrivalMs, r.inputLength, cached);
  }
}
