/**
 * The KV-event and prefix-index part of kvgate's metric table (definitions.ts spreads it into the one table):
 * event streams, their gaps and replays, and the index's memory and evictions.
 */
import { MW, type MetricDefinition } from './definition-types.js';

export const EVENT_METRIC_DEFINITIONS = {
  // ---- KV events
  kvEventsApplied: {
    kind: 'counter',
    name: 'kvgate_kv_events_applied_total',
    help:
      'KV events applied to the prefix index, by type and status; event_type="unknown", status="skipped": events of ' +
      'a kind kvgate does not know (an engine newer than kvgate), skipped, the rest of their batch applied.',
    labelNames: ['event_type', 'status'],
  },
  kvCacheGroupsRefused: {
    kind: 'counter',
    name: 'kvgate_kv_cache_group_refusals_total',
    help:
      "KV events refused because they name a KV-cache group past the model's kv_events.max_kv_groups (each such " +
      'event; the group gets no index, its blocks are not indexed).',
    labelNames: ['model', 'worker_type'],
  },
  kvCacheGroupBookForgotten: {
    kind: 'counter',
    name: 'kvgate_kv_cache_group_book_forgotten_total',
    help:
      "Blocks a hybrid model's hash book (which group holds each block of a worker rank) forgot at its bound, about " +
      "router_index_memory_budget_mib's bytes: least recently used first; a group's later event under one is " +
      'parent_not_found.',
    labelNames: ['model', 'worker_type'],
  },
  kvCacheGroupChanges: {
    kind: 'counter',
    name: 'kvgate_kv_cache_group_changes_total',
    help:
      "KV-cache groups of a hybrid model learned from its engines' KV events, or changed, by group index and kind " +
      '(full, sliding:<tokens>, mamba, unknown; group 0..30, other past them).',
    labelNames: ['group', 'kind'],
  },
  kvEventDecodeErrors: {
    kind: 'counter',
    name: 'kvgate_kv_event_decode_errors_total',
    help: 'KV event messages that could not be decoded, by kind.',
    labelNames: ['worker_id', 'kind'],
  },
  kvEventGaps: {
    kind: 'counter',
    name: 'kvgate_kv_event_gaps_total',
    help: "Gaps detected in a publisher's sequence numbers.",
    labelNames: ['worker_id', 'dp_rank'],
  },
  kvEventDropped: {
    kind: 'counter',
    name: 'kvgate_kv_event_dropped_total',
    help:
      'KV event batches dropped unapplied: queue_full (replayed later), pending_full (parked behind a replay past the ' +
      'bound; recovered by the next replay), garbage (sequence numbers the publisher never sent) or refused (an ' +
      'event in it did not decode: none of its stores applied, its removals are).',
    labelNames: ['worker_id', 'dp_rank', 'reason'],
  },
  kvEventRefusedRemovals: {
    kind: 'counter',
    name: 'kvgate_kv_event_refused_removals_applied_total',
    help:
      'Removal events (BlockRemoved, AllBlocksCleared) of refused KV event batches applied to the prefix index: ' +
      'the blocks the engine evicted leave the index though the batch stores nothing.',
    labelNames: ['worker_id', 'dp_rank'],
  },
  kvEventSeedsKept: {
    kind: 'counter',
    name: 'kvgate_kv_event_seeds_kept_total',
    help:
      'Resets that kept the replica snapshot a slot was just seeded from (the engine could not replay what came after ' +
      'it, or applying a batch failed before any was), by the reset reason: the blocks stay, and live events ' +
      'continue from there.',
    labelNames: ['worker_id', 'dp_rank', 'reason'],
  },
  kvEventResets: {
    kind: 'counter',
    name: 'kvgate_kv_event_resets_total',
    help:
      "Times a worker's index slot was cleared, by reason (restart, gap_without_replay, replay_failed, " +
      'replay_incomplete, inconsistent, apply_failed).',
    labelNames: ['worker_id', 'dp_rank', 'reason'],
  },
  kvEventReplays: {
    kind: 'counter',
    name: 'kvgate_kv_event_replays_total',
    help: 'Replay requests to a publisher, by outcome.',
    labelNames: ['worker_id', 'dp_rank', 'outcome'],
  },
  kvEventPublisherRestarts: {
    kind: 'counter',
    name: 'kvgate_kv_event_publisher_restarts_total',
    help: 'Publisher restarts detected (sequence went backwards); the slot was cleared.',
    labelNames: ['worker_id', 'dp_rank'],
  },
  kvEventConnectionChanges: {
    kind: 'counter',
    name: 'kvgate_kv_event_connection_changes_total',
    help:
      "A (worker, dp rank) SUB socket's connection to its engine's publisher made (connected) or lost (disconnected: " +
      'the engine went away, or sent a message over the size limit), or its subscription given up for good (ended: ' +
      'the socket failed; the slot routes approximately until the subscription is replaced).',
    labelNames: ['worker_id', 'dp_rank', 'change'],
  },
  kvEventSubscriptionsRefused: {
    kind: 'counter',
    name: 'kvgate_kv_event_subscriptions_refused_total',
    help:
      '(worker, dp rank) KV-event subscriptions that could not be made (an endpoint kvgate cannot offset or ZMQ refuses, ' +
      'no room for a socket), or made again on an ingestion thread restarted after a failure; the slot routes approximately.',
    labelNames: ['worker_id', 'dp_rank'],
  },
  kvEventIngestThreadRestarts: {
    kind: 'counter',
    name: 'kvgate_kv_event_ingest_thread_restarts_total',
    help:
      'KV-event ingestion threads (kv_events.ingest_threads) restarted after they failed, by reason (uncaught_exception, ' +
      'unhandled_rejection, died, exited); their streams subscribe again and replay what was lost.',
    labelNames: ['reason'],
  },
  // ---- prefix index
  indexBytes: {
    kind: 'gauge',
    name: 'kvgate_index_memory_bytes',
    help:
      "Bytes of WASM memory the pool's prefix index holds, every KV-cache group's and storage tier's included " +
      '(router_index_memory_budget_mib bounds them together).',
    labelNames: MW,
  },
  indexEvictedEntries: {
    kind: 'counter',
    name: 'kvgate_index_evicted_entries_total',
    help:
      '(block, worker rank) entries evicted from the prefix index (any KV-cache group or tier) under its memory ' +
      'budget, least recently matched first.',
    labelNames: MW,
  },
  indexEvictionEpisodes: {
    kind: 'counter',
    name: 'kvgate_index_eviction_episodes_total',
    help: 'Times the prefix index reached its memory budget after having been under three quarters of it.',
    labelNames: MW,
  },
  saltMemoryEvictions: {
    kind: 'counter',
    name: 'kvgate_kv_event_salt_memory_evictions_total',
    help:
      "Salted blocks whose cache salt was forgotten under the salt memory's cap (vLLM reports a request's salt on " +
      'its first event only; a later event extending an evicted block is hashed unsalted).',
    labelNames: MW,
  },
  ambiguousSalts: {
    kind: 'counter',
    name: 'kvgate_kv_event_ambiguous_salts_total',
    help: 'vLLM stored events whose block 0 extra_keys held more than one string besides the LoRA name: hashed unsalted.',
    labelNames: MW,
  },
  indexRebuilds: {
    kind: 'counter',
    name: 'kvgate_index_rebuilds_total',
    help: "Times the prefix index was discarded after a WASM allocation failure and rebuilt from the engines' replay buffers.",
    labelNames: MW,
  },
} as const satisfies Record<string, MetricDefinition>;
