/**
 * The KV-aware half of one pool in KV mode: the KvRouter (decisions and
 * bookkeeping) and, when KV events are on, the subscriptions feeding its
 * prefix index. The prefill pool's KvRouter does not track active blocks (as
 * in Dynamo's prefill router, it scores on overlap and prompt load only).
 */
import type { KvSlotSnapshot, WorkerRole } from '../common/index.js';
import {
  FULL_ATTENTION_GROUP,
  MAX_PRIORITY_JUMP_LIMIT,
  kvGroupLabel,
  type KvGroupSpec,
  type KvRouterOptions,
} from '../core/index.js';
import type { WorkerInfo } from '../discovery/index.js';
import type { EvictionReport } from '../wasm/index.js';
import {
  KvEventApplier,
  KvEventManager,
  KvGroupIndexes,
  TieredPrefixIndex,
  dpRankEndpoint,
  type KvEventApplierOptions,
  type KvEventOptions,
  type SaltEvictionReport,
} from '../events/index.js';
import type { RouterContext } from './context.js';
import { prefillPoolConfig } from './disagg/handoff.js';
import { eventHooks, ingestThreadRestartCounter, type EventWatch } from './event-hooks.js';
import { KvRouter } from './kv-router.js';

/** What of the model's options a KV pool reads. */
export interface KvPoolOptions {
  readonly model: string;
  readonly blockSize: number;
  /** Eagle block hashing (the model's `eagle`): its engines' bigram KV events are read and hashed as such. */
  readonly eagle?: boolean | undefined;
  readonly routerConfig?: KvRouterOptions | undefined;
  readonly kvEvents?: KvEventOptions | undefined;
  readonly kvEventsStaleAfterMs?: number | undefined;
  /** A peer replica's prefix index by pool role (warm start): the pool's subscriptions start from it. */
  readonly kvSeeds?: ((role: 'decode' | 'prefill') => readonly KvSlotSnapshot[] | undefined) | undefined;
}

/** Group indexes kept as label values; an engine's others (its index is its own, any integer) are `other`. */
const MAX_GROUP_LABEL = 31;

/**
 * The labels of a group's count. The group index and an unknown kind's name are the engine's: bounded here (an
 * index past them is `other`, any kind kvgate does not know `unknown`; the log line names it), so an
 * engine's events cannot grow the series set.
 */
function kvGroupMetricLabels(groupIdx: number, spec: KvGroupSpec): { group: string; kind: string } {
  const group =
    Number.isSafeInteger(groupIdx) && groupIdx >= 0 && groupIdx < MAX_GROUP_LABEL ? String(groupIdx) : 'other';
  return { group, kind: spec.kind === 'unknown' ? 'unknown' : kvGroupLabel(spec) };
}

export function kvPool(
  role: WorkerRole,
  opts: KvPoolOptions,
  ctx: RouterContext,
  watch: EventWatch,
): { kvRouter: KvRouter; events: KvEventManager | undefined } {
  let events: KvEventManager | undefined;
  let groups: KvGroupIndexes | undefined;
  const config: KvRouterOptions = role === 'prefill' ? prefillPoolConfig(opts.routerConfig) : { ...opts.routerConfig };
  const kvRouter = new KvRouter({
    blockSize: opts.blockSize,
    clock: ctx.clock,
    rng: ctx.rng,
    workerType: role,
    config,
    // The frontend has bounded each request's jump by its tenant class's `max_priority_jump` (at most this limit):
    // the router's own bound (10 s by default) must not cut a class allowed more.
    maxPriorityJump: MAX_PRIORITY_JUMP_LIMIT,
    // A worker whose KV events never started or went silent is scored in approximate mode alone.
    eventFallback: (workerId) => events !== undefined && events.eventStatus(workerId) !== 'live',
    // Hybrid attention: the other KV-cache groups the events announce (read lazily: built just below).
    kvGroups: {
      primarySpec: () => groups?.primarySpec() ?? FULL_ATTENTION_GROUP,
      others: () => groups?.others() ?? [],
    },
  });
  boundIndex(kvRouter, { model: opts.model, worker_type: role }, ctx);
  if (kvRouter.config.useKvEvents) {
    const onSpec = (groupIdx: number, spec: KvGroupSpec): void =>
      ctx.metrics?.kvCacheGroupChanges.labels(kvGroupMetricLabels(groupIdx, spec)).inc();
    const refused = { model: opts.model, worker_type: role };
    groups = new KvGroupIndexes({
      primary: kvRouter.index,
      logger: ctx.logger,
      clock: ctx.clock,
      onSpec,
      maxGroups: opts.kvEvents?.maxKvGroups,
      onRefused: () => ctx.metrics?.kvCacheGroupsRefused.labels(refused).inc(),
      onBookForgotten: (n) => ctx.metrics?.kvCacheGroupBookForgotten.labels(refused).inc(n),
    });
    const indexes = new TieredPrefixIndex(kvRouter.index);
    const applier = new KvEventApplier({
      blockSize: opts.blockSize,
      indexes,
      groups,
      eagle: opts.eagle,
      ...saltHooks(ctx, { model: opts.model, worker_type: role }),
    });
    events = new KvEventManager({
      applier,
      clock: ctx.clock,
      logger: ctx.logger,
      ...opts.kvEvents,
      ...(opts.kvEventsStaleAfterMs !== undefined ? { staleAfterMs: opts.kvEventsStaleAfterMs } : {}),
      hooks: eventHooks(ctx.metrics, watch, opts.blockSize),
      seeds: opts.kvSeeds?.(role === 'prefill' ? 'prefill' : 'decode'),
      onIndexRebuild: () => ctx.metrics?.indexRebuilds.labels({ model: opts.model, worker_type: role }).inc(),
      onIngestThreadRestart: ingestThreadRestartCounter(ctx.metrics),
    });
  }
  return { kvRouter, events };
}

/**
 * Holds `kvRouter`'s prefix index, with every index that shares its memory budget (a hybrid model's other KV-cache
 * groups, `KvGroupIndexes`; the lower storage tiers, `TieredPrefixIndex`), to the router's
 * `router_index_memory_budget_mib`, when its config has one; `onEvict` hears of each eviction. What builds a KV
 * router and feeds its index (a gateway's pool, below; `kvgate replay`'s routers) bounds it through this one
 * function, so a replay's index is what the gateway's would be. A router without a budget is left as it is.
 */
export function holdIndexToBudget(kvRouter: KvRouter, onEvict?: (report: EvictionReport) => void): void {
  const budgetMib = kvRouter.config.routerIndexMemoryBudgetMib;
  if (budgetMib !== null) kvRouter.index.setMemoryBudget(Math.floor(budgetMib * 2 ** 20), onEvict);
}

/**
 * Puts the pool's prefix index under its memory budget (`holdIndexToBudget`): each eviction is counted, and the
 * first of an episode (they had been under three quarters of the budget) is a warn line, the rest debug lines.
 */
function boundIndex(kvRouter: KvRouter, labels: { model: string; worker_type: WorkerRole }, ctx: RouterContext): void {
  holdIndexToBudget(kvRouter, (report) => {
    const m = ctx.metrics;
    m?.indexEvictedEntries.labels(labels).inc(report.entries);
    m?.indexBytes.labels(labels).set(report.bytesAfter);
    const fields = { worker_type: labels.worker_type, budget_bytes: kvRouter.index.memoryBudget, ...report };
    if (!report.episodeStart) {
      ctx.logger.debug(fields, 'prefix index evicted blocks under its memory budget');
      return;
    }
    m?.indexEvictionEpisodes.labels(labels).inc();
    ctx.logger.warn(
      fields,
      'prefix index reached its memory budget: evicting the least recently matched blocks (logged once per episode)',
    );
  });
}

/**
 * Counts the salt memory's evictions (the first of an episode a warn line, the rest debug lines, as the index's
 * budget) and the root events whose salt was ambiguous (a debug line each: an engine's doing, not kvgate's state).
 */
function saltHooks(
  ctx: RouterContext,
  labels: { model: string; worker_type: WorkerRole },
): Pick<KvEventApplierOptions, 'onSaltEvicted' | 'onSaltAmbiguous'> {
  return {
    onSaltEvicted: (report: SaltEvictionReport) => {
      ctx.metrics?.saltMemoryEvictions.labels(labels).inc(report.evicted);
      const fields = { ...labels, ...report };
      if (!report.episodeStart) ctx.logger.debug(fields, 'KV-event salt memory evicted a salted block');
      else {
        ctx.logger.warn(
          fields,
          'KV-event salt memory reached its cap: forgetting the oldest salted blocks; later events extending them ' +
            'are hashed unsalted (logged once per episode)',
        );
      }
    },
    onSaltAmbiguous: () => {
      ctx.metrics?.ambiguousSalts.labels(labels).inc();
      ctx.logger.debug(labels, 'KV event with more than one cache-salt candidate in extra_keys: hashed unsalted');
    },
  };
}

/**
 * Sets the gauge of the bytes a pool's prefix index holds (each tick): the router's index and those sharing its
 * memory budget (a hybrid model's other KV-cache groups, the lower storage tiers), what
 * `router_index_memory_budget_mib` bounds.
 */
export function reportIndexBytes(ctx: RouterContext, model: string, role: WorkerRole, kvRouter: KvRouter): void {
  ctx.metrics?.indexBytes.labels({ model, worker_type: role }).set(kvRouter.index.pooledBytes);
}

/**
 * A tick's force-freed bookings (`KvRouter.tick`): requests whose end this router never saw within
 * `active_request_expiry_secs` (a lost free: their load was counted on the worker until now). Counted, and a warn
 * line naming a few of them, once per tick that freed any.
 */
export function reportExpiredBookings(
  ctx: RouterContext,
  model: string,
  role: WorkerRole,
  tick: ReturnType<KvRouter['tick']> | undefined,
): void {
  if (tick === undefined) return;
  const expired = tick.expiredRequests.length + tick.expiredBetweenTicks;
  if (expired === 0) return;
  ctx.metrics?.bookingsExpired.labels({ model, worker_type: role }).inc(expired);
  ctx.logger.warn(
    { workerType: role, expired, requestIds: tick.expiredRequests.slice(0, 5) },
    `${expired} booking(s) force-freed: their requests' ends were never seen within active_request_expiry_secs`,
  );
}

/**
 * Subscribes a pool's KV-event ingestion to a joining worker's publishers, one per dp rank (rank i's
 * endpoints are the worker's shifted by i × its port stride). A worker that publishes no KV events is not subscribed.
 * A rank that cannot be subscribed (an endpoint with no port to shift, one ZMQ refuses, no room for a socket) is
 * a warning naming it and a count, and its slot routes approximately: one worker's registration never fails the others'.
 */
export function subscribeWorker(events: KvEventManager, w: WorkerInfo, ctx: RouterContext): void {
  const src = w.kvEvents;
  if (src === undefined) return;
  for (let i = 0; i < w.dpSize; i++) {
    const rank = w.dpStart + i;
    const refused = (err: unknown): void => {
      ctx.metrics?.kvEventSubscriptionsRefused.labels({ worker_id: String(w.id), dp_rank: String(rank) }).inc();
      ctx.logger.warn(
        { workerId: w.id, dpRank: rank, endpoint: src.endpoint, err: err instanceof Error ? err.message : String(err) },
        `worker ${w.id} rank ${rank}: KV events not subscribed; its slot routes approximately`,
      );
    };
    try {
      const stride = i * (src.dpPortStride ?? 1);
      events
        .add({
          workerId: w.id,
          dpRank: rank,
          endpoint: dpRankEndpoint(src.endpoint, stride),
          replayEndpoint: src.replayEndpoint === undefined ? undefined : dpRankEndpoint(src.replayEndpoint, stride),
          topic: src.topic,
        })
        .catch(refused);
    } catch (err) {
      refused(err);
    }
  }
}
