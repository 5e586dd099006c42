/**
 * The table of kvgate's own metrics: each series' name, help, labels and buckets, in one place.
 * `KvgateMetrics` (index.ts) builds one prom-client metric per entry and exposes it under the
 * entry's key, typed from the table. docs/metrics.md lists every series, and a test keeps that
 * table equal to what `/metrics` exports. Buckets follow Dynamo's router metrics so dashboards
 * carry over.
 */
import type { Counter, Gauge, Histogram } from 'prom-client';
import { EVENT_METRIC_DEFINITIONS } from './definitions-events.js';
import { WORKER_METRIC_DEFINITIONS } from './definitions-workers.js';
import { TENANT_METRIC_DEFINITIONS } from './definitions-tenants.js';
import { SESSION_METRIC_DEFINITIONS } from './definitions-sessions.js';
import { MW, type MetricDefinition } from './definition-types.js';

function expBuckets(start: number, factor: number, count: number): number[] {
  const out: number[] = [];
  for (let i = 0, v = start; i < count; i++, v *= factor) out.push(Number(v.toPrecision(6)));
  return out;
}

function logBuckets(min: number, max: number, count: number): number[] {
  const out: number[] = [];
  const f = Math.pow(max / min, 1 / (count - 1));
  for (let i = 0; i < count; i++) out.push(Number((min * Math.pow(f, i)).toPrecision(4)));
  return out;
}

/** Dynamo's TTFT buckets: 0.001 to 480 s, 18 log-spaced. Also used for whole requests. */
const LATENCY_BUCKETS = logBuckets(0.001, 480, 18);

/** Label sets shared by several metrics (MW, the model and pool, in definition-types.ts). */
const MWW = ['model', 'worker_type', 'worker_id'] as const;
const WL = ['model', 'worker_id', 'dp_rank', 'worker_type'] as const;

export type { MetricDefinition } from './definition-types.js';

export const METRIC_DEFINITIONS = {
  // ---- process and build
  buildInfo: {
    kind: 'gauge',
    name: 'kvgate_build_info',
    help: 'Always 1; labels name the kvgate version and the Node.js version running it.',
    labelNames: ['version', 'node_version'],
  },
  // ---- tracing (src/cli/tracing-loss.ts; the series appear, at zero, when tracing is on)
  tracingSpansDropped: {
    kind: 'counter',
    name: 'kvgate_tracing_spans_dropped_total',
    help:
      'Spans lost before reaching the OTLP collector: export_failed (an export it did not take), queue_full, ' +
      'rejected (by its partial success).',
    labelNames: ['reason'],
  },
  // ---- router requests
  requests: {
    kind: 'counter',
    name: 'kvgate_router_requests_total',
    help: 'Requests dispatched to an engine (dispatch succeeded).',
    labelNames: MW,
  },
  requestsStarted: {
    kind: 'counter',
    name: 'kvgate_router_requests_started_total',
    help: 'Requests admitted by the scheduler.',
    labelNames: MW,
  },
  requestErrors: {
    kind: 'counter',
    name: 'kvgate_router_request_errors_total',
    help: 'Requests that failed, by kvgate error code.',
    labelNames: ['model', 'code'],
  },
  ttft: {
    kind: 'histogram',
    name: 'kvgate_router_time_to_first_token_seconds',
    help: 'Time to first token measured at the router, per worker.',
    labelNames: MWW,
    buckets: LATENCY_BUCKETS,
  },
  itl: {
    kind: 'histogram',
    name: 'kvgate_router_inter_token_latency_seconds',
    help: 'Average inter-token latency per request, per worker.',
    labelNames: MWW,
    buckets: logBuckets(0.001, 2, 13),
  },
  isl: {
    kind: 'histogram',
    name: 'kvgate_router_input_sequence_tokens',
    help: 'Prompt tokens per request.',
    labelNames: MW,
    buckets: logBuckets(50, 128_000, 12),
  },
  osl: {
    kind: 'histogram',
    name: 'kvgate_router_output_sequence_tokens',
    help: 'Output tokens per request (only requests with output).',
    labelNames: MW,
    buckets: logBuckets(50, 32_000, 10),
  },
  predictedKvHitRate: {
    kind: 'histogram',
    name: 'kvgate_router_kv_hit_rate',
    help: 'Predicted overlap blocks / prompt blocks of the chosen worker.',
    labelNames: MW,
    buckets: Array.from({ length: 21 }, (_, i) => i / 20),
  },
  kvTransferEstimated: {
    kind: 'histogram',
    name: 'kvgate_router_kv_transfer_estimated_latency_seconds',
    help: 'Decode first token minus prefill completion (disaggregated).',
    labelNames: ['model'],
    buckets: logBuckets(0.001, 10, 15),
  },
  disaggRequests: {
    kind: 'counter',
    name: 'kvgate_router_disagg_requests_total',
    help:
      'Disaggregated requests by prefill worker (attributed: tracker, direct target, payload), handoff (bootstrap|sync) ' +
      'and outcome (decoded|prefill_failed|decode_failed).',
    labelNames: ['model', 'prefill_worker_id', 'handoff', 'outcome'],
  },
  disaggFallbacks: {
    kind: 'counter',
    name: 'kvgate_router_disagg_fallbacks_total',
    help: 'Requests served aggregated because every prefill worker of a disaggregated model was gone.',
    labelNames: ['model'],
  },
  disaggDecisions: {
    kind: 'counter',
    name: 'kvgate_router_disagg_decisions_total',
    help: "Requests of a model with a prefill pool, by the disaggregation policy's decision (disaggregated or aggregated) and its reason.",
    labelNames: ['model', 'decision', 'reason'],
  },
  prefillPoolActive: {
    kind: 'gauge',
    name: 'kvgate_prefill_pool_active',
    help:
      "1 while the model's prefill pool has a prefill worker available (requests run disaggregated); 0 before the " +
      'first one and once the last is gone (served aggregated, or refused under enforce_disagg).',
    labelNames: ['model'],
  },
  prefillPoolTransitions: {
    kind: 'counter',
    name: 'kvgate_prefill_pool_transitions_total',
    help:
      "The model's prefill pool switching, by the state it went to: active (a prefill worker available after none) " +
      'or inactive (its last prefill worker gone).',
    labelNames: ['model', 'to'],
  },
  nonMaxOverlapSelections: {
    kind: 'counter',
    name: 'kvgate_router_non_max_overlap_selections_total',
    help: 'Selections of a worker other than the one with the most cached blocks.',
    labelNames: MW,
  },
  localityLostBlocks: {
    kind: 'counter',
    name: 'kvgate_router_locality_lost_blocks_total',
    help: 'Cached blocks given up by selections of a worker other than the one with the most cached blocks.',
    labelNames: MW,
  },
  retries: {
    kind: 'counter',
    name: 'kvgate_router_retries_total',
    help: 'Dispatches retried on another worker before any byte was sent.',
    labelNames: ['model', 'reason'],
  },
  migrations: {
    kind: 'counter',
    name: 'kvgate_router_migrations_total',
    help:
      'Streams moved to another worker after a migratable failure: outcome started (one per continuation dispatched), ' +
      'succeeded or failed (one per request that migrated).',
    labelNames: ['model', 'worker_type', 'outcome'],
  },
  migrationsSkipped: {
    kind: 'counter',
    name: 'kvgate_router_migrations_skipped_total',
    help: 'Migratable stream failures not migrated, by reason (max_seq_len|not_migratable|pinned|no_token_ids).',
    labelNames: ['model', 'worker_type', 'reason'],
  },
  engineTimeouts: {
    kind: 'counter',
    name: 'kvgate_router_engine_timeouts_total',
    help:
      'Engine legs cut for making no progress (kind first_byte|stream_idle|connection_wait: the first-byte deadline ' +
      "expired while the leg waited for one of kvgate's connections to the worker); each is a migratable failure.",
    labelNames: ['model', 'worker_type', 'kind'],
  },
  engineProtocolErrors: {
    kind: 'counter',
    name: 'kvgate_router_engine_protocol_errors_total',
    help:
      'Engine answers that broke the protocol, by violation (content_type, content_encoding, truncated_event, redirect, ' +
      'not_json, too_large, event_too_large, no_final_status, unfinished).',
    labelNames: ['model', 'worker_type', 'violation'],
  },
  engineErrorEvents: {
    kind: 'counter',
    name: 'kvgate_router_engine_error_events_total',
    help:
      'Error events engines sent inside a stream they had begun, by kind: refused (a 4xx code: the client gets the ' +
      "engine's message without addresses) or failed (the client gets kvgate's error, the log the engine's text).",
    labelNames: ['model', 'worker_type', 'kind'],
  },
  // ---- prediction against the engines' reports
  predictionErrorTokens: {
    kind: 'histogram',
    name: 'kvgate_router_prediction_error_tokens',
    help: 'Engine-reported cached tokens minus the router-predicted overlap tokens.',
    labelNames: MW,
    buckets: [-8192, -1024, -256, -64, -16, -1, 0, 1, 16, 64, 256, 1024, 8192],
  },
  predictionExact: {
    kind: 'counter',
    name: 'kvgate_router_prediction_total',
    help: 'Requests whose engine-reported cached tokens were compared with the prediction (outcome exact|under|over).',
    labelNames: ['model', 'worker_type', 'outcome'],
  },
  // ---- routing overhead (Dynamo's compute buckets, 0.001 ms x 2^k, in seconds)
  overhead: {
    kind: 'histogram',
    name: 'kvgate_router_overhead_seconds',
    help: 'Routing overhead by stage (block_hashing, indexer_find_matches, scheduling, total).',
    labelNames: ['model', 'stage'],
    buckets: expBuckets(1e-6, 2, 15),
  },
  // ---- per-worker load
  workerActivePrefillTokens: {
    kind: 'gauge',
    name: 'kvgate_worker_active_prefill_tokens',
    help: 'Uncached prompt tokens booked and not yet prefilled.',
    labelNames: WL,
    scraped: true,
  },
  workerActiveDecodeBlocks: {
    kind: 'gauge',
    name: 'kvgate_worker_active_decode_blocks',
    help: 'KV blocks of in-flight requests as booked by the router.',
    labelNames: WL,
    scraped: true,
  },
  workerActiveRequests: {
    kind: 'gauge',
    name: 'kvgate_worker_active_requests',
    help: 'In-flight requests booked on the worker.',
    labelNames: WL,
    scraped: true,
  },
  workerIndexBlocks: {
    kind: 'gauge',
    name: 'kvgate_worker_index_blocks',
    help: 'Blocks the prefix index holds for the worker.',
    labelNames: WL,
    scraped: true,
  },
  workerKvEventsLive: {
    kind: 'gauge',
    name: 'kvgate_worker_kv_events_live',
    help: "1 while the worker's KV events are live; 0 when routing uses approximate mode for it.",
    labelNames: ['model', 'worker_id', 'worker_type'],
  },
  workerKvEventsTransitions: {
    kind: 'counter',
    name: 'kvgate_worker_kv_events_transitions_total',
    help:
      "The worker's KV events changing, by the state they went to: live, stale (silent while serving after events " +
      'came) or silent (no event since the worker joined, though requests were sent).',
    labelNames: ['model', 'worker_id', 'to'],
  },
  // ---- queue and backpressure
  queuePendingRequests: {
    kind: 'gauge',
    name: 'kvgate_router_queue_pending_requests',
    help: 'Requests parked in the router queue.',
    labelNames: MW,
  },
  queuePendingIslTokens: {
    kind: 'gauge',
    name: 'kvgate_router_queue_pending_isl_tokens',
    help: 'Prompt tokens of requests parked in the router queue.',
    labelNames: MW,
  },
  backpressure: {
    kind: 'counter',
    name: 'kvgate_router_backpressure_total',
    help: 'Requests rejected by queue-depth backpressure.',
    labelNames: MW,
  },
  // ---- engines that do not serve the model's name
  workerServedModelMismatch: {
    kind: 'gauge',
    name: 'kvgate_worker_served_model_mismatch',
    help:
      "1 while the worker's engine does not list the model's served_model_name in its /v1/models (the worker is not " +
      'routed to); 0 once it does.',
    labelNames: ['model', 'worker_id'],
  },
  // ---- fleet membership and hot reconfiguration
  workerMembership: {
    kind: 'counter',
    name: 'kvgate_worker_membership_changes_total',
    help:
      'Workers joining (change=joined) and leaving (change=left) a model at runtime, then done draining (change=drained), ' +
      'and, in kvgate picker and the kubernetes source, endpoints handed over between two listed pods (change=handed_over) ' +
      'and pods not routed ' +
      'because a newer pod lists their endpoint (change=shadowed), by the source that reported them ' +
      '(static: the config file, on reload; inference_pool: the pods of kvgate picker).',
    labelNames: ['model', 'source', 'change'],
  },
  discoveryUpdates: {
    kind: 'counter',
    name: 'kvgate_discovery_updates_total',
    help:
      'Worker sets a discovery source reported for a model (source=file, etcd or kubernetes), by outcome: applied, ' +
      'unchanged, rejected (invalid: the previous workers stay).',
    labelNames: ['model', 'source', 'outcome'],
  },
  pickerRequests: {
    kind: 'counter',
    name: 'kvgate_picker_requests_total',
    help:
      'Requests the endpoint picker (kvgate picker) saw, by outcome: picked, passed (no body, a path it does not ' +
      'route: sent to an endpoint unscored, unbooked), no_endpoint (503), shed (429), ' +
      'bad_request (4xx), internal_error (5xx: the picker failed; logged with its cause), protocol_error (the stream ' +
      'ended with a gRPC error), reset (the stream ended before the response).',
    labelNames: ['model', 'outcome'],
  },
  pickerEndpoints: {
    kind: 'gauge',
    name: 'kvgate_picker_endpoints',
    help: 'Ready endpoints of the InferencePool the endpoint picker chooses from.',
    labelNames: ['model'],
  },
  configReloads: {
    kind: 'counter',
    name: 'kvgate_config_reloads_total',
    help:
      'Configuration reloads (trigger=sighup or admin) by outcome: applied, partial (a worker it adds could not join), ' +
      'unchanged, rejected (invalid or needing a restart: nothing changed), failed (applying it threw: rolled back).',
    labelNames: ['trigger', 'outcome'],
  },
  configReloadProcessFailures: {
    kind: 'counter',
    name: 'kvgate_config_reload_process_failures_total',
    help:
      'Under --processes N, processes that did not apply a POST /admin/reload, counted by the process asked: outcome ' +
      'rejected, failed, no_answer (not within 10 s), not_asked; failed_process its index (or primary: no answer).',
    labelNames: ['trigger', 'outcome', 'failed_process'],
  },
  // ---- bookkeeping
  bookingsExpired: {
    kind: 'counter',
    name: 'kvgate_router_bookings_expired_total',
    help:
      "Bookings force-freed because their request's end was never seen within active_request_expiry_secs (a lost " +
      'free: its load counted on the worker until then).',
    labelNames: ['model', 'worker_type'],
  },
  // ---- preprocessing
  conversationCacheBytes: {
    kind: 'gauge',
    name: 'kvgate_preprocess_conversation_cache_bytes',
    help:
      "Bytes the preprocessing threads' conversation caches hold (prompts, ids, hashes, each conversation's last " +
      'chat body), as last reported.',
    labelNames: ['model'],
    scraped: true,
  },
  conversationCacheEntries: {
    kind: 'gauge',
    name: 'kvgate_preprocess_conversation_cache_entries',
    help: "Conversations the preprocessing threads' conversation caches hold, as last reported.",
    labelNames: ['model'],
    scraped: true,
  },
  conversationTokens: {
    kind: 'counter',
    name: 'kvgate_preprocess_conversation_tokens_total',
    help:
      'Prompt tokens of text and chat prompts by source: reused (from the conversation cache, neither tokenized nor ' +
      'hashed again) or new.',
    labelNames: ['model', 'source'],
  },
  preprocessTasksCancelled: {
    kind: 'counter',
    name: 'kvgate_preprocess_tasks_cancelled_total',
    help:
      "Preprocessing tasks dropped from a thread's queue before they started, their request having ended (the client " +
      'left, its deadline, a forced shutdown), by task: body, tokenizer-body, chat, text, tokens, decode.',
    labelNames: ['task'],
  },
  preprocessThreadsLost: {
    kind: 'counter',
    name: 'kvgate_preprocess_threads_lost_total',
    help:
      'Preprocessing threads replaced, by reason: timeout (a task ran past the bound and its thread was stopped), ' +
      'exit (the thread died).',
    labelNames: ['reason'],
  },
  ...WORKER_METRIC_DEFINITIONS,
  ...EVENT_METRIC_DEFINITIONS,
  ...TENANT_METRIC_DEFINITIONS,
  ...SESSION_METRIC_DEFINITIONS,
  // ---- HTTP edge
  /** End to end, arrival to the last byte; `model` is empty off the model endpoints (and for a model not served). */
  requestDuration: {
    kind: 'histogram',
    name: 'kvgate_request_duration_seconds',
    help: 'HTTP request duration from arrival to the last byte, by model, endpoint (route) and status class (2xx..5xx).',
    labelNames: ['model', 'endpoint', 'status_class'],
    buckets: LATENCY_BUCKETS,
  },
} as const satisfies Record<string, MetricDefinition>;

type LabelOf<D> = D extends { labelNames: readonly (infer L extends string)[] } ? L : never;
type MetricOf<D> = D extends { kind: 'counter' }
  ? Counter<LabelOf<D>>
  : D extends { kind: 'gauge' }
    ? Gauge<LabelOf<D>>
    : Histogram<LabelOf<D>>;

/** The metric built from each entry of the table, under the entry's key. */
export type DefinedMetrics = {
  readonly [K in keyof typeof METRIC_DEFINITIONS]: MetricOf<(typeof METRIC_DEFINITIONS)[K]>;
};
