/**
 * The KV-event hooks of one model: counters in the metrics registry, and the
 * worker watch told of replays and of a block size other than the model's.
 */
import type { WorkerRank } from '../common/index.js';
import type { IngestThreadRestartReason, KvEventHooks } from '../events/index.js';
import { FastCounterChild, type KvgateMetrics } from '../metrics/index.js';
import type { WorkerWatch } from './worker-watch.js';

/** A slot's metric labels. */
function slotLabels(slot: WorkerRank): { worker_id: string; dp_rank: string } {
  return { worker_id: String(slot.workerId), dp_rank: String(slot.dpRank) };
}

/** Who is told of a worker's replays and of a block size other than the model's (the gateway's `WorkerWatch`). */
export type EventWatch = Pick<WorkerWatch, 'blockSizeMismatch' | 'replayed'>;

/** KV-event counters exported as Prometheus metrics; a block size other than the model's is reported per worker. */
export function eventHooks(m: KvgateMetrics | undefined, watch: EventWatch, blockSize: number): KvEventHooks {
  const onBlockSizeMismatch = (slot: WorkerRank): void => watch.blockSizeMismatch(slot.workerId, blockSize);
  const onReplay: KvEventHooks['onReplay'] = (slot, outcome, applied) => {
    if (outcome === 'recovered') watch.replayed(slot, applied);
    m?.kvEventReplays.labels({ worker_id: String(slot.workerId), dp_rank: String(slot.dpRank), outcome }).inc();
  };
  if (m === undefined)
    return { onApplied: (s, _t, status) => status === 'block_size_mismatch' && onBlockSizeMismatch(s), onReplay };
  // onApplied runs once per event (hundreds of thousands a second under load): each (type, status) series is
  // found once, by two property reads, and incremented in place (FastCounterChild), where prom-client's own child
  // validates and hashes its labels on every increment (9 % of the main thread's CPU in a profile).
  const applied: Partial<Record<string, Partial<Record<string, FastCounterChild>>>> = {};
  return {
    onApplied: (slot, type, status) => {
      if (status === 'block_size_mismatch') onBlockSizeMismatch(slot);
      const byStatus = (applied[type] ??= {});
      (byStatus[status] ??= new FastCounterChild(m.kvEventsApplied, { event_type: type, status })).inc();
    },
    onDecodeError: (rep) => m.kvEventDecodeErrors.labels({ worker_id: String(rep.workerId), kind: rep.kind }).inc(),
    onGap: (slot) => m.kvEventGaps.labels(slotLabels(slot)).inc(),
    onReplay,
    onDropped: (slot, reason) => m.kvEventDropped.labels({ ...slotLabels(slot), reason }).inc(),
    onSalvaged: (slot, events) => m.kvEventRefusedRemovals.labels(slotLabels(slot)).inc(events),
    // Beside the applied events' statuses, under a type and status of their own (stable labels, never the
    // engine's tag: that string is the engine's to choose).
    onUnknownSkipped: (_slot, events) =>
      m.kvEventsApplied.labels({ event_type: 'unknown', status: 'skipped' }).inc(events),
    onReset: (slot, reason) => {
      m.kvEventResets.labels({ ...slotLabels(slot), reason }).inc();
      if (reason === 'restart') m.kvEventPublisherRestarts.labels(slotLabels(slot)).inc();
    },
    onConnection: (slot, change) => m.kvEventConnectionChanges.labels({ ...slotLabels(slot), change }).inc(),
    onSeedKept: (slot, reason) => m.kvEventSeedsKept.labels({ ...slotLabels(slot), reason }).inc(),
    // Counted with the refusals of first subscriptions (subscribeWorker): either way the slot has none.
    onResubscribeRefused: (slot) => m.kvEventSubscriptionsRefused.labels(slotLabels(slot)).inc(),
  };
}

const restartCounters = new WeakMap<KvgateMetrics, (reason: IngestThreadRestartReason) => void>();

/**
 * The counter of ingestion-thread restarts of a registry: one function per registry, so that the process's
 * threads, shared by every model's manager, count each restart once however many managers give it
 * (`KvEventManagerOptions.onIngestThreadRestart`).
 */
export function ingestThreadRestartCounter(
  m: KvgateMetrics | undefined,
): ((reason: IngestThreadRestartReason) => void) | undefined {
  if (m === undefined) return undefined;
  let count = restartCounters.get(m);
  if (count === undefined) {
    count = (reason) => m.kvEventIngestThreadRestarts.labels({ reason }).inc();
    restartCounters.set(m, count);
  }
  return count;
}
