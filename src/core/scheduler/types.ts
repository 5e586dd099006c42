/**
 * The scheduler's vocabulary: what a worker advertises, what a request asks
 * for, and how a scheduling attempt ends. No logic beyond `rejectionError`
 * and the error constructors the scheduler's files share.
 */
import type { KvCacheGroups } from '../kv-groups.js';
import type { Clock, RouterConfigOverride, RoutingHints, Rng, WorkerRank, WorkerRole } from '../../common/index.js';
import { KvgateError } from '../../errors/index.js';
import type { PrefixIndex, PromptHashes } from '../../wasm/index.js';
import type { SlotLoad, SyncedBooking } from '../active-request.js';
import type { KvRouterConfig, KvRouterOptions } from '../config.js';
import type { RoutingDecision } from '../decision.js';
import type { StepCostModel } from '../step-cost.js';

/** `max_num_batched_tokens` assumed when a worker does not advertise one (effectively never busy). */
export const DEFAULT_MAX_NUM_BATCHED_TOKENS = 10_000_000;

/** What a worker advertises about its capacity (from its model card or discovery). */
export interface WorkerCapacity {
  /** First data-parallel rank (default 0). */
  readonly dataParallelStartRank?: number;
  /** Number of data-parallel ranks (default 1); each rank is scheduled separately. */
  readonly dataParallelSize?: number;
  /** Engine batch token budget: the unit of prefill-busy and of the fractional prefill threshold. */
  readonly maxNumBatchedTokens?: number;
  /** KV blocks per rank: the unit of the decode overload threshold. */
  readonly totalKvBlocks?: number;
  /** Labels for routing constraints (`required_taints` filter, `preferred_taints` bias). */
  readonly taints?: readonly string[];
  /**
   * False when the router's view of this worker's cache cannot be trusted (its engine's block size or
   * tokenizer differs from the router's): its cached-prefix overlap is scored 0 (default true).
   */
  readonly kvOverlap?: boolean;
}

/** A registered worker. */
export interface WorkerSummary {
  readonly workerId: number;
  readonly dataParallelStartRank: number;
  readonly dataParallelSize: number;
  readonly maxNumBatchedTokens: number | undefined;
  readonly totalKvBlocks: number | undefined;
  readonly taints: readonly string[];
}

/** One slot's load, named. */
export interface WorkerLoad extends SlotLoad, WorkerRank {}

/**
 * A request as the scheduler sees it (pins already resolved for the phase). The routing hints it keeps after
 * its pins are resolved are the client's own (`RoutingHints`: the candidate list, taints, queue priority and
 * tier, expected output), one declaration for both.
 */
export interface SchedulingRequest extends Pick<
  RoutingHints,
  | 'allowedWorkerIds'
  | 'allowedDpRanks'
  | 'adapterRestricted'
  | 'routingConstraints'
  | 'priorityJump'
  | 'strictPriority'
  | 'expectedOutputTokens'
  | 'tenant'
> {
  /** Context id; unique among in-flight requests. */
  readonly requestId: string;
  /** Prompt length in tokens. */
  readonly isl: number;
  /** Hashes of the prompt's complete blocks (routing tokens); null = no prefix information. */
  readonly hashes: PromptHashes | null;
  /** Exact pin: only this worker... */
  readonly pinWorkerId?: number | undefined;
  /** ...and, if given, only this rank (validated against the worker's advertised ranks). */
  readonly pinDpRank?: number | undefined;
  /** Validated per-request overrides (see `parseRouterConfigOverride`). */
  readonly override?: RouterConfigOverride | undefined;
  /** Time already spent hashing, reported in the decision's timing. */
  readonly hashingMs?: number | undefined;
}

/** Why a request was turned away. Map to an error with `rejectionError`. */
export type Rejection =
  | {
      readonly kind: 'backpressure';
      readonly reason: 'MaxQueuedIslTokensExceeded';
      /** ISL tokens already queued. */
      readonly queuedIslTokens: number;
      /** The cap for this request's tier (tier cap × worker count). */
      readonly maxQueuedIslTokens: number;
      /** This request's cache-miss tokens (isl − best cached), which picked the tier. */
      readonly missingIslTokens: number;
    }
  | {
      readonly kind: 'shed';
      readonly reason: 'QueueFull';
      /** The tenant class shed (the newcomer's own: the most over its share). */
      readonly class: string;
      /** Requests queued, and the queue's capacity (requests per worker times the workers). */
      readonly queuedRequests: number;
      readonly capacity: number;
    }
  | {
      readonly kind: 'overloaded';
      readonly reason: 'AllWorkersOverloaded';
      /** Eligible slots, all over a busy threshold. */
      readonly eligibleSlots: number;
    };

/** How a parked request ended. The promise never rejects. */
export type AdmissionResult =
  | { readonly status: 'routed'; readonly decision: RoutingDecision }
  | { readonly status: 'cancelled' }
  | { readonly status: 'failed'; readonly error: KvgateError };

/** A parked request. Await `admitted`; call `cancel()` if the client goes away. */
export interface QueueTicket {
  readonly requestId: string;
  readonly admitted: Promise<AdmissionResult>;
  /** Withdraws the request; resolves `admitted` with `cancelled`. False if it already left the queue. */
  cancel(): boolean;
}

export type ScheduleOutcome =
  | { readonly status: 'routed'; readonly decision: RoutingDecision }
  | { readonly status: 'queued'; readonly ticket: QueueTicket }
  | { readonly status: 'rejected'; readonly rejection: Rejection };

/** `select` books the request (`book`) or only reports what it would do (`query`, Dynamo's query-only mode). */
export type SelectionMode = 'book' | 'query';

export interface KvSchedulerOptions {
  /** KV block size in tokens (engines' `--block-size`); all workers share it. */
  readonly blockSize: number;
  /** Router knobs (validated here). */
  readonly config?: KvRouterOptions | KvRouterConfig;
  /**
   * The most seconds a request's `priorityJump` moves it in the queue (default 10, at most 3600; 0 turns jumps off):
   * a larger jump is clamped to it, so no caller can park everyone else's requests behind its own. The gateway
   * bounds each request by its tenant class's `max_priority_jump` before it gets here, and sets this to 3600.
   */
  readonly maxPriorityJump?: number | undefined;
  /**
   * The engines' measured step times: with one, the cost model scores in predicted milliseconds
   * (`step-cost.ts`); without, the [v1.5] block-counting cost. The prediction is multiplied by
   * `prefillLoadScale` like the block count is, and kvgate's default scale (4) is calibrated for block
   * counting: give `prefillLoadScale: 1` with a step model, as `kvgate replay`'s `kv-step` policy does.
   */
  readonly stepCost?: StepCostModel | undefined;
  /**
   * The device-tier prefix index, fed by KV events. Created if omitted. In
   * approximate mode (`useKvEvents: false`) the scheduler records its own
   * decisions in it with the TTL.
   */
  readonly index?: PrefixIndex;
  /** Lower-tier indexes fed by tiered KV events, and an external shared cache (one pseudo-slot per cache). */
  readonly tierIndexes?: TierIndexes;
  readonly clock?: Clock;
  /** Uniform [0, 1) source for tie-breaks and softmax sampling. */
  readonly rng?: Rng;
  /** The side of a disaggregated deployment this scheduler routes for (default `aggregated`). */
  readonly workerType?: WorkerRole;
  /**
   * With KV events on: true for a worker whose events cannot be trusted right
   * now (never started, or stopped while it serves). Such a worker falls back
   * to approximate mode alone: the router records its own decisions for it
   * (with `routerTtlSecs`) and scores it on max(events overlap, recorded
   * overlap) until its events are live again.
   */
  readonly eventFallback?: ((workerId: number) => boolean) | undefined;
  /**
   * A hybrid model's KV-cache groups (src/events keeps them from the engines' events): the overlap of a
   * request on a worker is then the prefix every group can serve. Absent or one full-attention group: the
   * primary index's leading depth, as for every other model.
   */
  readonly kvGroups?: KvCacheGroups | undefined;
}

/**
 * Told of every change to the router's own bookings that moves load (replica
 * sync publishes them). Called synchronously inside the scheduler's calls:
 * it must not throw nor call back into the scheduler.
 */
export interface BookkeepingObserver {
  added(booking: SyncedBooking): void;
  prefillCompleted(requestId: string): void;
  /** The request now holds `outputBlocks` output blocks, the last added with `decay`. */
  outputBlock(requestId: string, outputBlocks: number, decay: number | undefined): void;
  /** Freed, expired, or dropped with its worker. */
  freed(requestId: string): void;
}

/** Lower-tier indexes (host-pinned memory, disk) and an external shared cache. */
export interface TierIndexes {
  readonly hostPinned?: PrefixIndex;
  readonly disk?: PrefixIndex;
  readonly shared?: PrefixIndex;
}

/** A typed error for a rejection, for hosts that surface it as HTTP 503. */
export function rejectionError(r: Rejection): KvgateError {
  if (r.kind === 'backpressure') {
    return new KvgateError(
      'KVG_ERR_BACKPRESSURE',
      `router queue full: ${r.queuedIslTokens} ISL tokens queued, cap ${r.maxQueuedIslTokens} ` +
        `for requests missing ${r.missingIslTokens} cached tokens`,
      {
        queuedIslTokens: r.queuedIslTokens,
        maxQueuedIslTokens: r.maxQueuedIslTokens,
        missingIslTokens: r.missingIslTokens,
      },
    );
  }
  if (r.kind === 'shed') return shedError(r.class, r.queuedRequests, r.capacity);
  return new KvgateError('KVG_ERR_OVERLOADED', `all ${r.eligibleSlots} eligible worker ranks are overloaded`, {
    eligibleSlots: r.eligibleSlots,
  });
}

/** A request of tenant class `cls` shed by the full router queue (529). */
export function shedError(cls: string, queued: number, capacity: number): KvgateError {
  return new KvgateError(
    'KVG_ERR_QUEUE_SHED',
    `the router queue is full (${queued} of ${capacity} requests) and tenant class ${cls} is the most over its share`,
    { class: cls, queuedRequests: queued, capacity },
  );
}

export function invalidArg(message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_ARGUMENT', message);
}

export function workerNotFound(workerId: number): KvgateError {
  return new KvgateError('KVG_ERR_UNKNOWN_WORKER', `worker ${workerId} is not registered`, { workerId });
}

export function duplicateRequest(requestId: string): KvgateError {
  return new KvgateError('KVG_ERR_DUPLICATE_REQUEST', `request ${requestId} is already in flight`, { requestId });
}

/** What a `KvScheduler.tick` did. */
export interface TickOutcome {
  /** This router's requests it force-freed: their end was never seen within `activeRequestExpirySecs`. */
  readonly expiredRequests: readonly string[];
  /** How many more of them a booking's own expiry check force-freed since the last tick (peers told then). */
  readonly expiredBetweenTicks: number;
  /** Approximate and predict-on-route entries expired. */
  readonly expiredEntries: number;
  /** Queued requests admitted. */
  readonly admitted: number;
}
