/**
 * Builds the router a replay drives for one pool of engines, from a policy
 * spec: the real `KvRouter` (with the KV-event applier feeding its index, as
 * the live gateway does) or a simple load-based router.
 *
 * The router's prefix index, with a hybrid model's KV-cache group indexes and
 * the storage tiers beside it, is held to the config's
 * `router_index_memory_budget_mib` as the gateway's pool holds it (routing's
 * `holdIndexToBudget`).
 *
 * Roles, as Dynamo's PrefillRouter sets them and the gateway's ModelRouter
 * does: `prefill` pools get a KvRouter with active-block tracking off (the
 * prefill scheduler scores on overlap and prompt-token load only); `decode`
 * pools route every request with routing's decode override {overlap credit 0,
 * no assumed reuse, no prefill tracking}, i.e. pure decode-load balancing.
 */
import type { Clock, Rng, WorkerRank, WorkerRole } from '../common/index.js';
import { FULL_ATTENTION_GROUP, outputBlockDecay, rejectionError, type StepCostModel } from '../core/index.js';
import { KvEventApplier, KvGroupIndexes, TieredPrefixIndex, type KvCacheEvent } from '../events/index.js';
import type { KvEvent } from '../mocker/index.js';
import { decodeOverrideOf, holdIndexToBudget, KvRouter, prefillPoolConfig } from '../routing/index.js';
import { toCacheEvent } from './kv-event-bridge.js';
import { ReplicaSet, type ReplicaOptions } from './router-replicas.js';
import type { IndexUse } from './results.js';
import {
  SimpleReplayRouter,
  type PolicySpec,
  type ReplayRouter,
  type RouteChoice,
  type RouteRequest,
} from './policy.js';

export interface ReplayRouterContext {
  readonly role: WorkerRole;
  /** Every worker of the pool (registered with the router up front). */
  readonly workerIds: readonly number[];
  /** The engines' KV block size. */
  readonly blockSize: number;
  readonly clock: Clock;
  readonly rng: Rng;
  /** What the engines advertise (busy and overload thresholds use them). */
  readonly maxNumBatchedTokens: number;
  readonly totalKvBlocks: number;
  /** The engines' measured step times (`--perf-profile`), for the `kv-step` policy's time-unit cost. */
  readonly stepCost?: StepCostModel | undefined;
}

/** Dynamo's decode-leg override in disaggregated serving (a replayed request carries no override of its own). */
const DECODE_OVERRIDE = decodeOverrideOf(undefined);

/** The KV router under replay: real scheduler, real bookkeeping, real prefix index fed by the engines' events. */
class KvReplayRouter implements ReplayRouter {
  readonly policy: string;
  readonly router: KvRouter;
  readonly applier: KvEventApplier;
  readonly #role: WorkerRole;
  readonly #allWorkers: string;
  /** Output-block progress per in-flight request (only when the config tracks output blocks), as the gateway's leg guard keeps it. */
  readonly #outputs = new Map<string, { readonly isl: number; readonly expected: number; blocks: number }>();
  /** KV events the applier refused, by status (should stay empty: the mocker and router hash alike). */
  readonly rejectedEvents = new Map<string, number>();
  /** The most bytes the prefix index held with the indexes sharing its budget (read each tick), and its evictions. */
  #peakBytes = 0;
  #evictedEntries = 0;

  constructor(spec: Extract<PolicySpec, { kind: 'kv' }>, ctx: ReplayRouterContext) {
    this.policy = spec.name;
    this.#role = ctx.role;
    const config = ctx.role === 'prefill' ? prefillPoolConfig(spec.options) : spec.options;
    let groups: KvGroupIndexes | undefined;
    this.router = new KvRouter({
      blockSize: ctx.blockSize,
      config,
      clock: ctx.clock,
      rng: ctx.rng,
      workerType: ctx.role,
      stepCost: spec.stepCost === true ? ctx.stepCost : undefined,
      // A hybrid engine's KV-cache groups, as `kvgate serve` keeps them (read lazily: built just below).
      kvGroups: {
        primarySpec: () => groups?.primarySpec() ?? FULL_ATTENTION_GROUP,
        others: () => groups?.others() ?? [],
      },
    });
    // The index and every group's beside it under the config's `router_index_memory_budget_mib`, as the gateway's.
    holdIndexToBudget(this.router, (report) => {
      this.#evictedEntries += report.entries;
    });
    // `kv-one-group` leaves them out: the one-group index of before, for comparison.
    if (spec.oneGroup !== true) groups = new KvGroupIndexes({ primary: this.router.index });
    for (const w of ctx.workerIds)
      this.router.addWorker(w, { maxNumBatchedTokens: ctx.maxNumBatchedTokens, totalKvBlocks: ctx.totalKvBlocks });
    this.#allWorkers = ctx.workerIds.join(',');
    const indexes = new TieredPrefixIndex(this.router.index);
    this.applier = new KvEventApplier({ blockSize: ctx.blockSize, indexes, groups });
  }

  route(req: RouteRequest, candidates: readonly number[]): RouteChoice | Promise<RouteChoice> {
    const restrict = candidates.join(',') !== this.#allWorkers;
    const outcome = this.router.schedule({
      requestId: req.key,
      tokens: req.tokens,
      phase: this.#role,
      routing: {
        expectedOutputTokens: req.expectedOutputTokens,
        ...(restrict ? { allowedWorkerIds: candidates } : {}),
      },
      ...(this.#role === 'decode' ? { routerConfigOverride: DECODE_OVERRIDE } : {}),
    });
    const bs = this.router.blockSize;
    const booked = (workerId: number, overlapBlocks: number): RouteChoice => {
      if (this.router.config.routerTrackOutputBlocks) {
        this.#outputs.set(req.key, {
          isl: req.tokens.length,
          expected: req.expectedOutputTokens,
          blocks: Math.ceil(req.tokens.length / bs),
        });
      }
      return { workerId, predictedCachedTokens: overlapBlocks * bs };
    };
    switch (outcome.status) {
      case 'routed':
        return booked(outcome.decision.workerId, outcome.decision.overlapBlocks);
      case 'rejected':
        throw rejectionError(outcome.rejection);
      case 'queued':
        return outcome.ticket.admitted.then((r) => {
          if (r.status === 'routed') return booked(r.decision.workerId, r.decision.overlapBlocks);
          if (r.status === 'failed') throw r.error;
          throw new Error(`request ${req.key} was withdrawn from the router queue`);
        });
    }
  }

  prefillCompleted(key: string): void {
    this.router.markPrefillCompleted(key);
  }

  /** One output block per `blockSize` tokens past the prompt, with Dynamo's decay (what the gateway's leg guard reports). */
  outputTokens(key: string, produced: number): void {
    const o = this.#outputs.get(key);
    if (o === undefined) return;
    const blocks = Math.ceil((o.isl + produced) / this.router.blockSize);
    const decay = outputBlockDecay(produced, o.expected);
    while (o.blocks < blocks) {
      o.blocks++;
      this.router.addOutputBlock(key, decay);
    }
  }

  finished(key: string): void {
    this.#outputs.delete(key);
    this.router.free(key);
  }

  applyKvEvents(workerId: number, events: readonly KvEvent[]): void {
    // Engines emit one BlockRemoved per evicted block (as vLLM does); a run of
    // adjacent removals is applied as one event, which changes the index
    // identically (removals do not cascade) at a fraction of the calls.
    // Simulated engines have one rank: their events are the (worker, rank 0) slot's, one pair per call.
    const slot = { workerId, dpRank: 0 };
    let removed: bigint[] = [];
    const flush = (): void => {
      if (removed.length === 0) return;
      this.#apply(slot, toCacheEvent({ type: 'removed', blockHashes: removed }));
      removed = [];
    };
    for (const ev of events) {
      if (ev.type === 'removed') {
        for (const h of ev.blockHashes) removed.push(h);
        continue;
      }
      flush();
      this.#apply(slot, toCacheEvent(ev));
    }
    flush();
  }

  #apply(slot: WorkerRank, ev: KvCacheEvent): void {
    const status = this.applier.applyEvent(slot, ev);
    if (status !== 'ok') this.rejectedEvents.set(status, (this.rejectedEvents.get(status) ?? 0) + 1);
  }

  tick(): void {
    this.router.tick();
    this.#readIndexBytes();
  }

  indexUse(): IndexUse {
    this.#readIndexBytes();
    const budget = this.router.index.memoryBudget;
    return {
      budgetBytes: budget > 0 ? budget : null,
      peakBytes: this.#peakBytes,
      evictedEntries: this.#evictedEntries,
    };
  }

  #readIndexBytes(): void {
    const bytes = this.router.index.pooledBytes;
    if (bytes > this.#peakBytes) this.#peakBytes = bytes;
  }
}

function createReplayRouter(spec: PolicySpec, ctx: ReplayRouterContext): ReplayRouter {
  if (spec.kind === 'kv') return new KvReplayRouter(spec, ctx);
  return new SimpleReplayRouter(spec.mode, ctx.rng);
}

/**
 * The router for one pool under a policy: one router, or `replicas.count` of them behind a front
 * door (each with the RNG `rngOf(replica)`), sharing their KV bookkeeping when sync is on.
 */
export function createPoolRouter(
  spec: PolicySpec,
  ctx: Omit<ReplayRouterContext, 'rng'>,
  replicas: ReplicaOptions,
  rngOf: (replica: number) => Rng,
): ReplayRouter {
  if (replicas.count === 1) return createReplayRouter(spec, { ...ctx, rng: rngOf(0) });
  const routers = Array.from({ length: replicas.count }, (_, i) => createReplayRouter(spec, { ...ctx, rng: rngOf(i) }));
  const synced = replicas.sync ? routers.flatMap((r) => (r instanceof KvReplayRouter ? [r.router] : [])) : [];
  return new ReplicaSet(routers, synced.length === routers.length ? synced : null, ctx.clock, replicas.syncDelayMs);
}
