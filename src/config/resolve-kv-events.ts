/**
 * The `kv_events` section: the bounds of KV-event ingestion (src/events' `KvEventOptions`, field for field, so
 * the fleet hands them to every model's ingestion unchanged) and the threads that receive and decode. Each is
 * read only at start (reload.ts refuses a change).
 */
import { MAX_KV_GROUPS } from '../core/index.js';
import { DEFAULT_INGEST_THREADS, GATEWAY_DEFAULTS } from './defaults.js';
import type { ConfigReader } from './reader.js';
import type { GatewayConfig, KvEventsConfig } from './types.js';

const KEYS = [
  'queue_batches',
  'pending_batches',
  'events_per_turn',
  'turn_budget_ms',
  'reorder_window',
  'max_seq_jump',
  'restart_confirmations',
  'inconsistent_after_ms',
  'stale_after_ms',
  'replay_timeout_ms',
  'receive_high_water_mark',
  'max_message_bytes',
  'max_replay_bytes',
  'max_batch_elements',
  'max_kv_groups',
  'ingest_threads',
];

const MIB = 2 ** 20;

export function readKvEventBounds(root: ConfigReader): Pick<GatewayConfig, 'kvEvents' | 'kvIngestThreads'> {
  const d = GATEWAY_DEFAULTS.kvEvents;
  const threads = DEFAULT_INGEST_THREADS;
  const r = root.child('kv_events');
  if (r === undefined) return { kvEvents: { ...d }, kvIngestThreads: threads };
  r.allowOnly(KEYS);
  const kvEvents: KvEventsConfig = {
    maxQueuedBatches: r.int('queue_batches', d.maxQueuedBatches, { min: 1, max: 10_000_000 }),
    maxPendingBatches: r.int('pending_batches', d.maxPendingBatches, { min: 1, max: 10_000_000 }),
    maxEventsPerTurn: r.int('events_per_turn', d.maxEventsPerTurn, { min: 1, max: 10_000_000 }),
    maxTurnMs: r.num('turn_budget_ms', d.maxTurnMs, { min: 0, exclusiveMin: true, max: 1000 }),
    reorderWindow: r.int('reorder_window', d.reorderWindow, { min: 1, max: 1_000_000 }),
    maxSeqJump: r.int('max_seq_jump', d.maxSeqJump, { min: 1, max: Number.MAX_SAFE_INTEGER }),
    restartConfirmations: r.int('restart_confirmations', d.restartConfirmations, { min: 1, max: 1000 }),
    inconsistentAfterMs: r.int('inconsistent_after_ms', d.inconsistentAfterMs, { min: 1, max: 86_400_000 }),
    staleAfterMs: r.int('stale_after_ms', d.staleAfterMs, { min: 1, max: 86_400_000 }),
    replayTimeoutMs: r.int('replay_timeout_ms', d.replayTimeoutMs, { min: 1, max: 600_000 }),
    // ZMQ reads 0 as no bound at all: a publisher could then make the gateway queue without limit.
    receiveHighWaterMark: r.int('receive_high_water_mark', d.receiveHighWaterMark, { min: 1, max: 10_000_000 }),
    maxMessageBytes: r.int('max_message_bytes', d.maxMessageBytes, { min: 1024, max: 2048 * MIB }),
    maxReplyBytes: r.int('max_replay_bytes', d.maxReplyBytes, { min: 1024, max: 65_536 * MIB }),
    maxBatchElements: r.int('max_batch_elements', d.maxBatchElements, { min: 1024, max: 64 * MIB }),
    // At most 32: ingestion keeps a bit per group for each block (src/events' group-indexes.ts).
    maxKvGroups: r.int('max_kv_groups', d.maxKvGroups, { min: 1, max: MAX_KV_GROUPS }),
  };
  if (kvEvents.maxReplyBytes < kvEvents.maxMessageBytes)
    r.problem(
      'max_replay_bytes',
      `must be at least kv_events.max_message_bytes (${kvEvents.maxMessageBytes}), got ${kvEvents.maxReplyBytes}: ` +
        'a replay could not bring back one batch of the largest size a subscription takes',
    );
  return { kvEvents, kvIngestThreads: r.int('ingest_threads', threads, { min: 0, max: 64 }) };
}
