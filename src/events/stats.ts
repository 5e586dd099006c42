/**
 * Observation hooks of KV-event ingestion, and plain counters built on them.
 *
 * src/events does not know prom-client: the metrics layer either reads
 * `KvEventCounters.snapshot()` on scrape, or passes its own hooks and labels
 * them as it likes. Hooks run synchronously on the ingestion path, so they
 * must be cheap and must not throw.
 */
import { slotKey, type WorkerRank } from '../common/index.js';
import { APPLY_STATUSES, type ApplyStatus } from './applier.js';
import { CONNECTION_CHANGES, type ConnectionChange } from './connection-watch.js';
import { DECODE_ERROR_KINDS, type DecodeErrorKind, type KvCacheEventType, type KvEventDecodeError } from './types.js';

/**
 * What `onConnection` reports of a slot's subscription: its socket's connection made or lost (`ConnectionChange`,
 * connection-watch.ts), or `ended`: the subscription gave up for good (its socket's receive failed, an error ZMQ
 * does not recover from). Its socket is closed and nothing subscribes again, so the slot hears no more events
 * (it goes `stale` once requests reach it) until its subscription is replaced; it no longer counts as connected.
 */
export type SubscriptionChange = ConnectionChange | 'ended';
const SUBSCRIPTION_CHANGES: readonly SubscriptionChange[] = [...CONNECTION_CHANGES, 'ended'];

/** Where a batch came from: the live SUB stream or a replay reply. */
export type BatchOrigin = 'live' | 'replay';

/**
 * How a replay ended:
 * - `recovered`: every missing batch came back.
 * - `incomplete`: the engine's buffer no longer held some of them; the slot was reset.
 * - `failed`: no answer (timeout, socket error); the slot was reset when it had state.
 */
export type ReplayOutcome = 'recovered' | 'incomplete' | 'failed';

/**
 * Why a slot's index was dropped:
 * - `restart`: the publisher restarted (its sequence started over, confirmed).
 * - `gap_without_replay`: batches were lost and no replay endpoint is configured.
 * - `replay_failed` / `replay_incomplete`: see ReplayOutcome.
 * - `inconsistent`: the stream stayed inconsistent longer than its bound.
 * - `apply_failed`: handling a batch threw (a bug on the apply path, not the engine's doing); the stream
 *   starts over from the next live batch.
 */
export type ResetReason =
  'restart' | 'gap_without_replay' | 'replay_failed' | 'replay_incomplete' | 'inconsistent' | 'apply_failed';

/**
 * Why a batch was dropped unapplied (a live one; `garbage` and `refused` also a replayed one):
 * - `queue_full`: the slot's queue was full (the hole is replayed later).
 * - `pending_full`: it arrived ahead of a gap while a replay was in flight, past
 *   the batches the slot parks meanwhile (the next replay recovers it).
 * - `garbage`: its sequence number cannot be the publisher's (absurdly far
 *   ahead, live or in a replay's answer, beyond the publisher's newest, or
 *   restart evidence refuted).
 * - `refused`: in sequence (live or replayed), but an event in it did not decode (an event of an unknown kind is
 *   skipped instead, `onUnknownSkipped`, and refuses nothing): none of its stores is applied
 *   (slot-writer.ts), only its removals (`onSalvaged`); its seq is used up, as a batch that does not decode at all.
 */
export type DropReason = 'queue_full' | 'pending_full' | 'garbage' | 'refused';

/** A decode failure with the (worker, rank) it came from. */
export interface DecodeErrorReport extends KvEventDecodeError, WorkerRank {
  /** Sequence number of the batch, when the frames got that far. */
  readonly seq: bigint | undefined;
}

export interface KvEventHooks {
  /** A message with a valid sequence number reached the slot. */
  onBatch?(slot: WorkerRank, origin: BatchOrigin): void;
  /** One event was applied (or refused) with this status. */
  onApplied?(slot: WorkerRank, type: KvCacheEventType, status: ApplyStatus): void;
  onDecodeError?(report: DecodeErrorReport): void;
  /** A live batch arrived with `got > expected`. */
  onGap?(slot: WorkerRank, expected: bigint, got: bigint): void;
  /** A batch at or below the cursor (already applied) was skipped. */
  onStale?(slot: WorkerRank, seq: bigint): void;
  /** A replay finished; `batches` is how many replayed batches were applied. */
  onReplay?(slot: WorkerRank, outcome: ReplayOutcome, batches: number): void;
  /** The slot's index was dropped; `blocks` is how many blocks it held. */
  onReset?(slot: WorkerRank, reason: ResetReason, blocks: number): void;
  /** A batch was dropped unapplied (see DropReason). */
  onDropped?(slot: WorkerRank, reason: DropReason, seq: bigint): void;
  /** `events` removals (`BlockRemoved`, `AllBlocksCleared`) of a `refused` batch were applied (slot-writer.ts). */
  onSalvaged?(slot: WorkerRank, events: number): void;
  /**
   * `events` events of a batch had a kind kvgate does not know (a tag beside BlockStored, BlockRemoved and
   * AllBlocksCleared: an engine newer than kvgate) and were skipped; the rest of the batch was applied
   * (slot-writer.ts, `accept`). Not decode errors.
   */
  onUnknownSkipped?(slot: WorkerRank, events: number): void;
  /** A replay request was sent (at most one per slot is in flight). */
  onReplayRequested?(slot: WorkerRank, fromSeq: bigint): void;
  /** A reset for `reason` kept the replica snapshot the slot was just seeded from (slot-writer.ts, `seeded`). */
  onSeedKept?(slot: WorkerRank, reason: ResetReason): void;
  /** The slot's SUB socket connected to its publisher, or lost it (connection-watch.ts), or its subscription ended. */
  onConnection?(slot: WorkerRank, change: SubscriptionChange): void;
  /**
   * The ingestion thread that replaced a failed one refused to subscribe the slot again (`error`: ZMQ's, such as
   * no room for a socket): its subscription is over, as after `ended`. A first subscription's refusal is instead
   * the rejection of `KvEventManager.add`.
   */
  onResubscribeRefused?(slot: WorkerRank, error: string): void;
}

/** Calls every hook set in order. */
export function combineHooks(...all: (KvEventHooks | undefined)[]): KvEventHooks {
  const hs = all.filter((h): h is KvEventHooks => h !== undefined);
  if (hs.length === 1) return hs[0]!;
  return {
    onBatch: (slot, o) => {
      for (const h of hs) h.onBatch?.(slot, o);
    },
    onApplied: (slot, t, s) => {
      for (const h of hs) h.onApplied?.(slot, t, s);
    },
    onDecodeError: (rep) => {
      for (const h of hs) h.onDecodeError?.(rep);
    },
    onGap: (slot, e, g) => {
      for (const h of hs) h.onGap?.(slot, e, g);
    },
    onStale: (slot, s) => {
      for (const h of hs) h.onStale?.(slot, s);
    },
    onReplay: (slot, o, b) => {
      for (const h of hs) h.onReplay?.(slot, o, b);
    },
    onReset: (slot, why, b) => {
      for (const h of hs) h.onReset?.(slot, why, b);
    },
    onDropped: (slot, why, s) => {
      for (const h of hs) h.onDropped?.(slot, why, s);
    },
    onSalvaged: (slot, n) => {
      for (const h of hs) h.onSalvaged?.(slot, n);
    },
    onUnknownSkipped: (slot, n) => {
      for (const h of hs) h.onUnknownSkipped?.(slot, n);
    },
    onReplayRequested: (slot, s) => {
      for (const h of hs) h.onReplayRequested?.(slot, s);
    },
    onSeedKept: (slot, why) => {
      for (const h of hs) h.onSeedKept?.(slot, why);
    },
    onConnection: (slot, c) => {
      for (const h of hs) h.onConnection?.(slot, c);
    },
    onResubscribeRefused: (slot, e) => {
      for (const h of hs) h.onResubscribeRefused?.(slot, e);
    },
  };
}

/** Counters of one (worker, rank). */
export interface SlotCounters {
  batches: number;
  /** Events whose status left the index as the engine meant (ok, truncated, not_found). */
  eventsApplied: number;
  /** Events refused (parent_not_found, block_size_mismatch, ...). */
  eventsRefused: number;
  decodeErrors: number;
  gaps: number;
  replays: number;
  replayRequests: number;
  resets: number;
  dropped: number;
}

export interface KvEventCountersSnapshot {
  batches: Record<BatchOrigin, number>;
  /** Events by type and status. */
  events: Record<KvCacheEventType, Record<ApplyStatus, number>>;
  decodeErrors: Record<DecodeErrorKind, number>;
  gaps: number;
  staleBatches: number;
  replays: Record<ReplayOutcome, number>;
  replayRequests: number;
  replayedBatches: number;
  resets: Record<ResetReason, number>;
  /** Resets that kept a replica snapshot's blocks instead, by the reset's reason. */
  seedsKept: Record<ResetReason, number>;
  dropped: Record<DropReason, number>;
  /** Removals of `refused` batches applied (`onSalvaged`), over every slot. */
  salvagedRemovals: number;
  /** Events of a kind kvgate does not know, skipped (`onUnknownSkipped`), over every slot. */
  unknownSkipped: number;
  /** SUB sockets' connections made and lost, and subscriptions ended, over every slot. */
  connections: Record<SubscriptionChange, number>;
  /** Per `"workerId:dpRank"`. */
  slots: Record<string, SlotCounters>;
}

function zeros<K extends string>(keys: readonly K[]): Record<K, number> {
  const out = {} as Record<K, number>;
  for (const k of keys) out[k] = 0;
  return out;
}

const ORIGINS: readonly BatchOrigin[] = ['live', 'replay'];
const OUTCOMES: readonly ReplayOutcome[] = ['recovered', 'incomplete', 'failed'];
const RESETS: readonly ResetReason[] = [
  'restart',
  'gap_without_replay',
  'replay_failed',
  'replay_incomplete',
  'inconsistent',
  'apply_failed',
];
const DROPS: readonly DropReason[] = ['queue_full', 'pending_full', 'garbage', 'refused'];

/** Counts everything the hooks report; `snapshot()` returns a deep copy. */
export class KvEventCounters implements KvEventHooks {
  #s: KvEventCountersSnapshot = KvEventCounters.#empty();
  readonly #slots = new Map<string, SlotCounters>();
  /** The slot object of the last call, and what it named then (a caller may reuse an object for another slot). */
  #lastSlot: WorkerRank | undefined;
  #last: { named: WorkerRank; counters: SlotCounters } | undefined;

  static #empty(): KvEventCountersSnapshot {
    return {
      batches: zeros(ORIGINS),
      events: { stored: zeros(APPLY_STATUSES), removed: zeros(APPLY_STATUSES), cleared: zeros(APPLY_STATUSES) },
      decodeErrors: zeros(DECODE_ERROR_KINDS),
      gaps: 0,
      staleBatches: 0,
      replays: zeros(OUTCOMES),
      replayRequests: 0,
      replayedBatches: 0,
      resets: zeros(RESETS),
      seedsKept: zeros(RESETS),
      dropped: zeros(DROPS),
      salvagedRemovals: 0,
      unknownSkipped: 0,
      connections: zeros(SUBSCRIPTION_CHANGES),
      slots: {},
    };
  }

  #slot(slot: WorkerRank): SlotCounters {
    // Events come in runs of one slot, reported with the stream's own slot object: found without a key.
    const last = this.#last;
    if (slot === this.#lastSlot && slot.workerId === last!.named.workerId && slot.dpRank === last!.named.dpRank)
      return last!.counters;
    const key = slotKey(slot.workerId, slot.dpRank);
    let s = this.#slots.get(key);
    if (s === undefined) {
      s = {
        batches: 0,
        eventsApplied: 0,
        eventsRefused: 0,
        decodeErrors: 0,
        gaps: 0,
        replays: 0,
        replayRequests: 0,
        resets: 0,
        dropped: 0,
      };
      this.#slots.set(key, s);
    }
    this.#lastSlot = slot;
    this.#last = { named: { workerId: slot.workerId, dpRank: slot.dpRank }, counters: s };
    return s;
  }

  onBatch(slot: WorkerRank, origin: BatchOrigin): void {
    this.#s.batches[origin]++;
    this.#slot(slot).batches++;
  }

  onApplied(slot: WorkerRank, type: KvCacheEventType, status: ApplyStatus): void {
    this.#s.events[type][status]++;
    const s = this.#slot(slot);
    if (status === 'ok' || status === 'truncated' || status === 'not_found') s.eventsApplied++;
    else s.eventsRefused++;
  }

  onDecodeError(report: DecodeErrorReport): void {
    this.#s.decodeErrors[report.kind]++;
    this.#slot(report).decodeErrors++;
  }

  onGap(slot: WorkerRank): void {
    this.#s.gaps++;
    this.#slot(slot).gaps++;
  }

  onStale(): void {
    this.#s.staleBatches++;
  }

  onReplay(slot: WorkerRank, outcome: ReplayOutcome, batches: number): void {
    this.#s.replays[outcome]++;
    this.#s.replayedBatches += batches;
    this.#slot(slot).replays++;
  }

  onReset(slot: WorkerRank, reason: ResetReason): void {
    this.#s.resets[reason]++;
    this.#slot(slot).resets++;
  }

  onDropped(slot: WorkerRank, reason: DropReason): void {
    this.#s.dropped[reason]++;
    this.#slot(slot).dropped++;
  }

  onSalvaged(_slot: WorkerRank, events: number): void {
    this.#s.salvagedRemovals += events;
  }

  onUnknownSkipped(_slot: WorkerRank, events: number): void {
    this.#s.unknownSkipped += events;
  }

  onReplayRequested(slot: WorkerRank): void {
    this.#s.replayRequests++;
    this.#slot(slot).replayRequests++;
  }

  onSeedKept(_slot: WorkerRank, reason: ResetReason): void {
    this.#s.seedsKept[reason]++;
  }

  onConnection(_slot: WorkerRank, change: SubscriptionChange): void {
    this.#s.connections[change]++;
  }

  /** Forgets one slot's counters (its subscription is gone: a worker that left takes them along). */
  forgetSlot(slot: WorkerRank): void {
    this.#slots.delete(slotKey(slot.workerId, slot.dpRank));
    if (
      this.#last !== undefined &&
      this.#last.named.workerId === slot.workerId &&
      this.#last.named.dpRank === slot.dpRank
    ) {
      this.#last = undefined;
      this.#lastSlot = undefined;
    }
  }

  /** Counters of one slot (zeros if it never reported anything). */
  slot(slot: WorkerRank): SlotCounters {
    return { ...this.#slot(slot) };
  }

  /** Total events by status over all types, applied and refused. */
  get eventsTotal(): number {
    let n = 0;
    for (const byStatus of Object.values(this.#s.events)) for (const v of Object.values(byStatus)) n += v;
    return n;
  }

  snapshot(): KvEventCountersSnapshot {
    const copy = structuredClone(this.#s);
    for (const [k, v] of this.#slots) copy.slots[k] = { ...v };
    return copy;
  }
}
