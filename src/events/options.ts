/**
 * What every piece of KV-event ingestion shares, and each component's tuning.
 *
 * The shared things (clock, logger, applier, hooks, liveness) form one
 * `IngestContext`, built once by the manager (or a test) and handed to every
 * subscriber and stream unchanged. Tuning is one Options / Filled / defaults
 * triple per component; each layer's options extend the one below, so a value
 * given to the manager reaches the stream without being restated.
 */
import { silentLogger, systemClock, type Clock, type Logger } from '../common/index.js';
import type { KvEventApplier } from './applier.js';
import { MAX_BATCH_ELEMENTS } from './decode.js';
import { DEFAULT_MAX_KV_GROUPS } from './group-indexes.js';
import type { EventLiveness } from './liveness.js';
import type { KvEventHooks } from './stats.js';
import { InlineScheduler, type ApplyScheduler } from './turn-scheduler.js';

/** The collaborators every subscriber and stream of one manager share. */
export interface IngestContext {
  readonly clock: Clock;
  /** Where warnings go (gaps, restarts, replay failures, decode errors), each naming the worker. */
  readonly logger: Logger;
  /** The applier (and through it the indexes) to keep true. */
  readonly applier: KvEventApplier;
  /** Observers (counters, metrics); called synchronously, must not throw. */
  readonly hooks: KvEventHooks;
  /** Per-slot liveness; streams report usable batches to it. */
  readonly liveness: EventLiveness | undefined;
  /** When queued events are applied: a slice per event-loop turn (the manager's), or at once. */
  readonly scheduler: ApplyScheduler;
}

/**
 * An ingestion context from its parts: system clock, no logging, no hooks, no
 * liveness unless given, and events applied as they arrive (no turn budget).
 */
export function ingestContext(
  parts: { applier: KvEventApplier } & Partial<Omit<IngestContext, 'applier'>>,
): IngestContext {
  return {
    applier: parts.applier,
    clock: parts.clock ?? systemClock,
    logger: parts.logger ?? silentLogger,
    hooks: parts.hooks ?? {},
    liveness: parts.liveness,
    scheduler: parts.scheduler ?? new InlineScheduler(),
  };
}

/** Tuning of one slot's ordered stream. */
export interface KvEventStreamOptions {
  /** Live batches parked behind a gap before new ones are dropped (and recovered by a later replay). */
  maxPendingBatches?: number | undefined;
  /** Live batches received and not yet applied before new ones are dropped (the hole is replayed). */
  maxQueuedBatches?: number | undefined;
  /** How far out of order batches may arrive and still be put back in order, in sequence numbers. */
  reorderWindow?: number | undefined;
  /** A seq further ahead of the cursor than this is garbage, not a gap. */
  maxSeqJump?: number | undefined;
  /** Restart-like batches (duplicates, or far below the newest seen) needed to declare a publisher restart; seq 0 again is enough alone. */
  restartConfirmations?: number | undefined;
  /** A stream inconsistent (garbage, unconfirmed restart evidence, an unfilled gap) this long is reset, ms. */
  inconsistentAfterMs?: number | undefined;
  /** At most one log line per kind of problem per interval, ms. */
  logIntervalMs?: number | undefined;
  /**
   * Msgpack elements (hashes, tokens) one batch may hold in all; a larger one is refused unread (`too_large`).
   * On an ingestion thread too: the thread decodes with the same bound (decode.ts, `MAX_BATCH_ELEMENTS`).
   */
  maxBatchElements?: number | undefined;
}
export type FilledKvEventStreamOptions = Required<{
  [K in keyof KvEventStreamOptions]: NonNullable<KvEventStreamOptions[K]>;
}>;
export const kDefaultStreamOptions: FilledKvEventStreamOptions = Object.freeze({
  maxPendingBatches: 100_000,
  maxQueuedBatches: 10_000,
  reorderWindow: 64,
  maxSeqJump: 1_000_000,
  restartConfirmations: 2,
  inconsistentAfterMs: 5000,
  logIntervalMs: 10_000,
  maxBatchElements: MAX_BATCH_ELEMENTS,
});

/** Tuning of one slot's sockets, and of its stream. */
export interface KvEventSubscriberOptions extends KvEventStreamOptions {
  /** Per replay reply message, ms. */
  replayTimeoutMs?: number | undefined;
  /** SUB receive high-water mark in messages (vLLM's PUB default). */
  receiveHighWaterMark?: number | undefined;
  /**
   * The largest message a SUB socket takes, bytes: a larger one ends the connection unread (connection-watch.ts
   * connects again), so a publisher cannot make the gateway allocate without bound. A batch of a 128k-token
   * prefill's stored blocks is well under 2 MiB.
   */
  maxMessageBytes?: number | undefined;
  /**
   * Payload bytes of one replay answer at most (it is held whole before it is applied): past them the replay
   * fails, counted and logged as any failed replay. A full vLLM buffer (10,000 batches) at 50 KiB a batch.
   * Each reply message is bounded by `maxMessageBytes` too.
   */
  maxReplyBytes?: number | undefined;
}
export type FilledKvEventSubscriberOptions = Required<{
  [K in keyof KvEventSubscriberOptions]: NonNullable<KvEventSubscriberOptions[K]>;
}>;
export const kDefaultSubscriberOptions: FilledKvEventSubscriberOptions = Object.freeze({
  ...kDefaultStreamOptions,
  replayTimeoutMs: 2000,
  receiveHighWaterMark: 100_000,
  maxMessageBytes: 64 * 2 ** 20,
  maxReplyBytes: 512 * 2 ** 20,
});

/**
 * Tuning of a fleet's ingestion (a manager's, the `kv_events` config section), and of every
 * subscriber it starts; the manager's constructor takes it with its collaborators (`KvEventManagerOptions`).
 */
export interface KvEventOptions extends KvEventSubscriberOptions {
  /** Silence while serving after which a slot is `stale` (and how long a cleared slot stays degraded), ms. */
  staleAfterMs?: number | undefined;
  /** Events applied per event-loop turn at most, over every slot of the manager. */
  maxEventsPerTurn?: number | undefined;
  /** Time spent applying events per event-loop turn at most, ms. */
  maxTurnMs?: number | undefined;
  /**
   * Threads that receive, decode and hash the events (shared by every manager of the process with the same
   * count); 0 keeps the sockets and the decoding on the main thread. Judging and applying stay on the main thread.
   */
  ingestThreads?: number | undefined;
  /**
   * KV-cache groups of one model at most, its primary included: read by whoever builds the model's
   * `KvGroupIndexes` (its `maxGroups`; routing's kvPool), not by the manager.
   */
  maxKvGroups?: number | undefined;
}
export type FilledKvEventOptions = Required<{ [K in keyof KvEventOptions]: NonNullable<KvEventOptions[K]> }>;
export const kDefaultKvEventOptions: FilledKvEventOptions = Object.freeze({
  ...kDefaultSubscriberOptions,
  staleAfterMs: 30_000,
  maxEventsPerTurn: 2000,
  maxTurnMs: 4,
  ingestThreads: 0,
  maxKvGroups: DEFAULT_MAX_KV_GROUPS,
});

/** `defaults` with every field of `given` that is set (an explicit `undefined` keeps the default). */
export function fillOptions<F extends object>(
  defaults: F,
  given: { [K in keyof F]?: F[K] | undefined } | undefined,
): F {
  const out = { ...defaults };
  if (given === undefined) return out;
  for (const key of Object.keys(defaults) as (keyof F)[]) {
    const v = given[key];
    if (v !== undefined) out[key] = v as F[keyof F];
  }
  return out;
}
