/**
 * Every Prometheus metric kvgate exports, defined once, named after the
 * Prometheus naming guide: one `kvgate_` prefix, base units (`_seconds`),
 * `_total` on counters only; Node's process metrics keep their standard
 * names (`process_*`, `nodejs_*`). docs/metrics.md lists each one, and a test
 * keeps that table equal to what `/metrics` exports.
 *
 * A `KvgateMetrics` owns its own Registry so several gateways or routers can
 * live in one process (tests, embedding); the HTTP edge serves
 * `registry.metrics()`. Buckets follow Dynamo's router metrics so dashboards
 * carry over.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { kvgateVersion } from '../version.js';
import { discoveryWatchMetrics, type DiscoveryWatchMetrics } from './discovery-watch.js';
import { httpEdgeMetrics } from './http.js';
import { replicaMetrics, type ReplicaMetrics } from './replicas.js';

export type { ReplicaMetrics } from './replicas.js';
export { FastCounterChild, FastHistogramChild } from './fast-children.js';

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

export interface KvgateMetricsOptions {
  registry?: Registry;
  /** Also export Node.js process metrics (CPU, memory, event loop lag) under their standard names. Default true. */
  processMetrics?: boolean;
}

/** Label sets shared by several metrics. */
const MW = ['model', 'worker_type'] as const;
const MWW = ['model', 'worker_type', 'worker_id'] as const;
const WL = ['model', 'worker_id', 'dp_rank', 'worker_type'] as const;

export class KvgateMetrics {
  readonly registry: Registry;
  /** Writers of the per-worker load gauges, run at each scrape (see `onScrape`). */
  readonly #scrapeHooks = new Set<() => void>();
  #textSource: (() => Promise<string>) | undefined;

  // Build.
  readonly buildInfo: Gauge<'version' | 'node_version'>;

  // Router request metrics (per model and worker type: aggregated, prefill or decode).
  readonly requests: Counter<'model' | 'worker_type'>;
  readonly requestsStarted: Counter<'model' | 'worker_type'>;
  readonly requestErrors: Counter<'model' | 'code'>;
  readonly ttft: Histogram<'model' | 'worker_type' | 'worker_id'>;
  readonly itl: Histogram<'model' | 'worker_type' | 'worker_id'>;
  readonly isl: Histogram<'model' | 'worker_type'>;
  readonly osl: Histogram<'model' | 'worker_type'>;
  readonly predictedKvHitRate: Histogram<'model' | 'worker_type'>;
  readonly kvTransferEstimated: Histogram<'model'>;
  readonly disaggRequests: Counter<'model' | 'prefill_worker_id' | 'handoff' | 'outcome'>;
  readonly disaggFallbacks: Counter<'model'>;
  readonly nonMaxOverlapSelections: Counter<'model' | 'worker_type'>;
  readonly retries: Counter<'model' | 'reason'>;
  readonly engineTimeouts: Counter<'model' | 'worker_type' | 'kind'>;
  readonly engineProtocolErrors: Counter<'model' | 'worker_type' | 'violation'>;
  readonly migrations: Counter<'model' | 'worker_type' | 'outcome'>;
  readonly migrationsSkipped: Counter<'model' | 'worker_type' | 'reason'>;

  // Engine-reported truth against the router's prediction.
  readonly predictionErrorTokens: Histogram<'model' | 'worker_type'>;
  readonly predictionExact: Counter<'model' | 'worker_type' | 'outcome'>;

  // Routing overhead, by stage, in seconds.
  readonly overhead: Histogram<'model' | 'stage'>;

  // Per-worker load as booked by the router.
  readonly workerActivePrefillTokens: Gauge<'model' | 'worker_id' | 'dp_rank' | 'worker_type'>;
  readonly workerActiveDecodeBlocks: Gauge<'model' | 'worker_id' | 'dp_rank' | 'worker_type'>;
  readonly workerActiveRequests: Gauge<'model' | 'worker_id' | 'dp_rank' | 'worker_type'>;
  readonly workerIndexBlocks: Gauge<'model' | 'worker_id' | 'dp_rank' | 'worker_type'>;
  readonly workerKvEventsLive: Gauge<'model' | 'worker_id' | 'worker_type'>;
  readonly workerServedModelMismatch: Gauge<'model' | 'worker_id'>;
  readonly workerUp: Gauge<'model' | 'worker_id' | 'worker_type'>;
  readonly workerState: Gauge<'model' | 'worker_id' | 'state'>;
  readonly workerBlockSizeMismatch: Gauge<'model' | 'worker_id'>;
  readonly engineChecks: Counter<'model' | 'check' | 'outcome'>;
  readonly modelTokenizerMissing: Gauge<'model'>;
  readonly healthTransitions: Counter<'model' | 'worker_id' | 'transition'>;
  readonly workerEjections: Counter<'model' | 'worker_id' | 'reason'>;
  readonly poolPanic: Gauge<'model' | 'worker_type'>;
  readonly workerMembership: Counter<'model' | 'source' | 'change'>;
  readonly configReloads: Counter<'trigger' | 'outcome'>;
  readonly discoveryUpdates: Counter<'model' | 'source' | 'outcome'>;
  readonly discoveryWatch: DiscoveryWatchMetrics;

  // Queue and backpressure.
  readonly queuePendingRequests: Gauge<'model' | 'worker_type'>;
  readonly queuePendingIslTokens: Gauge<'model' | 'worker_type'>;
  readonly backpressure: Counter<'model' | 'worker_type'>;

  // Sticky sessions.
  readonly sessions: Gauge<'model' | 'worker_type'>;
  readonly sessionLimits: Counter<'model' | 'worker_type' | 'limit'>;

  // KV events.
  readonly kvEventsApplied: Counter<'event_type' | 'status'>;
  readonly kvEventDecodeErrors: Counter<'worker_id' | 'kind'>;
  readonly kvEventGaps: Counter<'worker_id' | 'dp_rank'>;
  readonly kvEventDropped: Counter<'worker_id' | 'dp_rank' | 'reason'>;
  readonly kvEventResets: Counter<'worker_id' | 'dp_rank' | 'reason'>;
  readonly kvEventReplays: Counter<'worker_id' | 'dp_rank' | 'outcome'>;
  readonly kvEventPublisherRestarts: Counter<'worker_id' | 'dp_rank'>;

  // Frontend.
  readonly httpRequests: Counter<'route' | 'status'>;
  readonly httpRejections: Counter<'code'>;
  readonly httpClientAddressFallbacks: Counter<'reason'>;
  readonly httpPendingConnections: Gauge;
  readonly inflight: Gauge;

  // Replica sync.
  readonly replicas: ReplicaMetrics;
  /** End to end, arrival to the last byte; `model` is empty off the model endpoints (and for a model not served). */
  readonly requestDuration: Histogram<'model' | 'endpoint' | 'status_class'>;

  constructor(opts: KvgateMetricsOptions = {}) {
    const registers = [(this.registry = opts.registry ?? new Registry())];
    // ---- process and build
    if (opts.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
    this.buildInfo = new Gauge({
      name: 'kvgate_build_info',
      help: 'Always 1; labels name the kvgate version and the Node.js version running it.',
      labelNames: ['version', 'node_version'],
      registers,
    });
    this.buildInfo.set({ version: kvgateVersion(), node_version: process.version }, 1);
    // The per-worker load gauges are read from the router's bookkeeping when scraped, never left at a stale value.
    const collect = (): void => {
      for (const hook of this.#scrapeHooks) hook();
    };
    // ---- router requests
    this.requests = new Counter({
      name: 'kvgate_router_requests_total',
      help: 'Requests dispatched to an engine (dispatch succeeded).',
      labelNames: MW,
      registers,
    });
    this.requestsStarted = new Counter({
      name: 'kvgate_router_requests_started_total',
      help: 'Requests admitted by the scheduler.',
      labelNames: MW,
      registers,
    });
    this.requestErrors = new Counter({
      name: 'kvgate_router_request_errors_total',
      help: 'Requests that failed, by kvgate error code.',
      labelNames: ['model', 'code'],
      registers,
    });
    this.ttft = new Histogram({
      name: 'kvgate_router_time_to_first_token_seconds',
      help: 'Time to first token measured at the router, per worker.',
      labelNames: MWW,
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.itl = new Histogram({
      name: 'kvgate_router_inter_token_latency_seconds',
      help: 'Average inter-token latency per request, per worker.',
      labelNames: MWW,
      buckets: logBuckets(0.001, 2, 13),
      registers,
    });
    this.isl = new Histogram({
      name: 'kvgate_router_input_sequence_tokens',
      help: 'Prompt tokens per request.',
      labelNames: MW,
      buckets: logBuckets(50, 128_000, 12),
      registers,
    });
    this.osl = new Histogram({
      name: 'kvgate_router_output_sequence_tokens',
      help: 'Output tokens per request (only requests with output).',
      labelNames: MW,
      buckets: logBuckets(50, 32_000, 10),
      registers,
    });
    this.predictedKvHitRate = new Histogram({
      name: 'kvgate_router_kv_hit_rate',
      help: 'Predicted overlap blocks / prompt blocks of the chosen worker.',
      labelNames: MW,
      buckets: Array.from({ length: 21 }, (_, i) => i / 20),
      registers,
    });
    this.kvTransferEstimated = new Histogram({
      name: 'kvgate_router_kv_transfer_estimated_latency_seconds',
      help: 'Decode first token minus prefill completion (disaggregated).',
      labelNames: ['model'],
      buckets: logBuckets(0.001, 10, 15),
      registers,
    });
    this.disaggRequests = new Counter({
      name: 'kvgate_router_disagg_requests_total',
      help: 'Disaggregated requests by prefill worker (attributed: tracker, direct target, payload), handoff (bootstrap|sync) and outcome (decoded|prefill_failed|decode_failed).',
      labelNames: ['model', 'prefill_worker_id', 'handoff', 'outcome'],
      registers,
    });
    this.disaggFallbacks = new Counter({
      name: 'kvgate_router_disagg_fallbacks_total',
      help: 'Requests served aggregated because every prefill worker of a disaggregated model was gone.',
      labelNames: ['model'],
      registers,
    });
    this.nonMaxOverlapSelections = new Counter({
      name: 'kvgate_router_non_max_overlap_selections_total',
      help: 'Selections of a worker other than the one with the most cached blocks.',
      labelNames: MW,
      registers,
    });
    this.retries = new Counter({
      name: 'kvgate_router_retries_total',
      help: 'Dispatches retried on another worker before any byte was sent.',
      labelNames: ['model', 'reason'],
      registers,
    });
    this.migrations = new Counter({
      name: 'kvgate_router_migrations_total',
      help: 'Streams moved to another worker after a migratable failure: outcome started (one per continuation dispatched), succeeded or failed (one per request that migrated).',
      labelNames: ['model', 'worker_type', 'outcome'],
      registers,
    });
    this.migrationsSkipped = new Counter({
      name: 'kvgate_router_migrations_skipped_total',
      help: 'Migratable stream failures not migrated, by reason (max_seq_len|not_migratable|pinned|no_token_ids).',
      labelNames: ['model', 'worker_type', 'reason'],
      registers,
    });
    this.engineTimeouts = new Counter({
      name: 'kvgate_router_engine_timeouts_total',
      help: 'Engine legs cut for making no progress (kind first_byte|stream_idle); each is a migratable failure.',
      labelNames: ['model', 'worker_type', 'kind'],
      registers,
    });
    this.engineProtocolErrors = new Counter({
      name: 'kvgate_router_engine_protocol_errors_total',
      help: 'Engine answers that broke the protocol, by violation (content_type, truncated_event, redirect, not_json, too_large, event_too_large, no_final_status).',
      labelNames: ['model', 'worker_type', 'violation'],
      registers,
    });
    // ---- prediction against the engines' reports
    this.predictionErrorTokens = new Histogram({
      name: 'kvgate_router_prediction_error_tokens',
      help: 'Engine-reported cached tokens minus the router-predicted overlap tokens.',
      labelNames: MW,
      buckets: [-8192, -1024, -256, -64, -16, -1, 0, 1, 16, 64, 256, 1024, 8192],
      registers,
    });
    this.predictionExact = new Counter({
      name: 'kvgate_router_prediction_total',
      help: 'Requests whose engine-reported cached tokens were compared with the prediction (outcome exact|under|over).',
      labelNames: ['model', 'worker_type', 'outcome'],
      registers,
    });
    // ---- routing overhead (Dynamo's compute buckets, 0.001 ms x 2^k, in seconds)
    this.overhead = new Histogram({
      name: 'kvgate_router_overhead_seconds',
      help: 'Routing overhead by stage (block_hashing, indexer_find_matches, scheduling, total).',
      labelNames: ['model', 'stage'],
      buckets: expBuckets(1e-6, 2, 15),
      registers,
    });
    // ---- per-worker load
    this.workerActivePrefillTokens = new Gauge({
      name: 'kvgate_worker_active_prefill_tokens',
      help: 'Uncached prompt tokens booked and not yet prefilled.',
      labelNames: WL,
      registers,
      collect,
    });
    this.workerActiveDecodeBlocks = new Gauge({
      name: 'kvgate_worker_active_decode_blocks',
      help: 'KV blocks of in-flight requests as booked by the router.',
      labelNames: WL,
      registers,
      collect,
    });
    this.workerActiveRequests = new Gauge({
      name: 'kvgate_worker_active_requests',
      help: 'In-flight requests booked on the worker.',
      labelNames: WL,
      registers,
      collect,
    });
    this.workerIndexBlocks = new Gauge({
      name: 'kvgate_worker_index_blocks',
      help: 'Blocks the prefix index holds for the worker.',
      labelNames: WL,
      registers,
      collect,
    });
    this.workerKvEventsLive = new Gauge({
      name: 'kvgate_worker_kv_events_live',
      help: "1 while the worker's KV events are live; 0 when routing uses approximate mode for it.",
      labelNames: ['model', 'worker_id', 'worker_type'],
      registers,
    });
    // ---- queue and backpressure
    this.queuePendingRequests = new Gauge({
      name: 'kvgate_router_queue_pending_requests',
      help: 'Requests parked in the router queue.',
      labelNames: MW,
      registers,
    });
    this.queuePendingIslTokens = new Gauge({
      name: 'kvgate_router_queue_pending_isl_tokens',
      help: 'Prompt tokens of requests parked in the router queue.',
      labelNames: MW,
      registers,
    });
    this.backpressure = new Counter({
      name: 'kvgate_router_backpressure_total',
      help: 'Requests rejected by queue-depth backpressure.',
      labelNames: MW,
      registers,
    });
    // ---- engines that do not serve the model's name
    this.workerServedModelMismatch = new Gauge({
      name: 'kvgate_worker_served_model_mismatch',
      help: "1 while the worker's engine does not list the model's served_model_name in its /v1/models (the worker is not routed to); 0 once it does.",
      labelNames: ['model', 'worker_id'],
      registers,
    });
    // ---- worker state (loud failures)
    this.workerUp = new Gauge({
      name: 'kvgate_worker_up',
      help: '1 while the worker is routable (configured and passing its health probe); 0 while it is down.',
      labelNames: ['model', 'worker_id', 'worker_type'],
      registers,
    });
    this.workerState = new Gauge({
      name: 'kvgate_worker_state',
      help: "1 for the worker's current health state (up, down, ejected, panic, kept, model_mismatch, unknown), 0 for the others.",
      labelNames: ['model', 'worker_id', 'state'],
      registers,
    });
    this.workerBlockSizeMismatch = new Gauge({
      name: 'kvgate_worker_block_size_mismatch',
      help: "1 once the worker's engine says (its /metrics on join, or its KV events) it uses a block size other than the model's block_size (its blocks are ignored, its KV overlap scored 0).",
      labelNames: ['model', 'worker_id'],
      registers,
    });
    this.engineChecks = new Counter({
      name: 'kvgate_worker_engine_checks_total',
      labelNames: ['model', 'check', 'outcome'],
      registers,
      help: "Checks of a joining worker's engine: check=block_size (its /metrics) or tokenizer (the canary probe), by outcome: ok, mismatch (kept out of KV-aware routing), unreadable (/metrics), inconclusive (probe).",
    });
    this.modelTokenizerMissing = new Gauge({
      name: 'kvgate_model_tokenizer_missing',
      help: "1 for a KV-routed model without a tokenizer (prefix hashes come from the byte-packing fallback and match no engine's blocks).",
      labelNames: ['model'],
      registers,
    });
    // ---- health probing
    this.healthTransitions = new Counter({
      name: 'kvgate_worker_health_transitions_total',
      help: "Health probing outcomes per worker: ejected (marked down), kept (failing, but the model's ejection limit is reached: still routed), readmitted.",
      labelNames: ['model', 'worker_id', 'transition'],
      registers,
    });
    this.workerEjections = new Counter({
      name: 'kvgate_worker_ejections_total',
      labelNames: ['model', 'worker_id', 'reason'],
      registers,
      help: 'Workers taken out of routing: health_probe (failed probes) or consecutive_errors (5xx answers, connection failures or malformed answers on dispatch).',
    });
    this.poolPanic = new Gauge({
      name: 'kvgate_pool_panic',
      help: "1 while the pool (a model's workers of one worker_type) has fewer healthy workers than its panic threshold: it routes to all of them, ejected ones included.",
      labelNames: MW,
      registers,
    });
    // ---- fleet membership and hot reconfiguration
    this.workerMembership = new Counter({
      name: 'kvgate_worker_membership_changes_total',
      help: 'Workers joining (change=joined) and leaving (change=left) a model at runtime, by the source that reported them (static: the config file, on reload).',
      labelNames: ['model', 'source', 'change'],
      registers,
    });
    this.discoveryUpdates = new Counter({
      name: 'kvgate_discovery_updates_total',
      help: 'Worker sets a discovery source reported for a model (source=file, etcd or kubernetes), by outcome: applied, unchanged, rejected (invalid: the previous workers stay).',
      labelNames: ['model', 'source', 'outcome'],
      registers,
    });
    this.discoveryWatch = discoveryWatchMetrics(registers);
    this.configReloads = new Counter({
      name: 'kvgate_config_reloads_total',
      help: 'Configuration reloads (trigger=sighup or admin) by outcome: applied, unchanged, rejected (invalid or needing a restart: nothing changed).',
      labelNames: ['trigger', 'outcome'],
      registers,
    });
    // ---- sticky sessions
    this.sessions = new Gauge({
      name: 'kvgate_router_sessions',
      help: 'Sticky session bindings held.',
      labelNames: MW,
      registers,
    });
    this.sessionLimits = new Counter({
      name: 'kvgate_router_session_limits_total',
      help: 'Sticky session limits applied: limit=timeout (a requested timeout clamped to the maximum) or capacity (the least recently used binding dropped).',
      labelNames: ['model', 'worker_type', 'limit'],
      registers,
    });
    // ---- KV events
    this.kvEventsApplied = new Counter({
      name: 'kvgate_kv_events_applied_total',
      help: 'KV events applied to the prefix index, by type and status.',
      labelNames: ['event_type', 'status'],
      registers,
    });
    this.kvEventDecodeErrors = new Counter({
      name: 'kvgate_kv_event_decode_errors_total',
      help: 'KV event messages that could not be decoded, by kind.',
      labelNames: ['worker_id', 'kind'],
      registers,
    });
    this.kvEventGaps = new Counter({
      name: 'kvgate_kv_event_gaps_total',
      help: "Gaps detected in a publisher's sequence numbers.",
      labelNames: ['worker_id', 'dp_rank'],
      registers,
    });
    this.kvEventDropped = new Counter({
      name: 'kvgate_kv_event_dropped_total',
      help: 'KV event batches dropped unapplied: queue_full (replayed later) or garbage (sequence numbers the publisher never sent).',
      labelNames: ['worker_id', 'dp_rank', 'reason'],
      registers,
    });
    this.kvEventResets = new Counter({
      name: 'kvgate_kv_event_resets_total',
      help: "Times a worker's index slot was cleared, by reason (restart, gap_without_replay, replay_failed, replay_incomplete, inconsistent).",
      labelNames: ['worker_id', 'dp_rank', 'reason'],
      registers,
    });
    this.kvEventReplays = new Counter({
      name: 'kvgate_kv_event_replays_total',
      help: 'Replay requests to a publisher, by outcome.',
      labelNames: ['worker_id', 'dp_rank', 'outcome'],
      registers,
    });
    this.kvEventPublisherRestarts = new Counter({
      name: 'kvgate_kv_event_publisher_restarts_total',
      help: 'Publisher restarts detected (sequence went backwards); the slot was cleared.',
      labelNames: ['worker_id', 'dp_rank'],
      registers,
    });
    // ---- HTTP edge
    ({
      requests: this.httpRequests,
      rejections: this.httpRejections,
      clientAddressFallbacks: this.httpClientAddressFallbacks,
      pendingConnections: this.httpPendingConnections,
      inflight: this.inflight,
    } = httpEdgeMetrics(registers, collect));
    this.replicas = replicaMetrics(registers);
    this.requestDuration = new Histogram({
      name: 'kvgate_request_duration_seconds',
      help: 'HTTP request duration from arrival to the last byte, by model, endpoint (route) and status class (2xx..5xx).',
      labelNames: ['model', 'endpoint', 'status_class'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
  }

  /**
   * Runs `hook` whenever the per-worker load gauges are scraped (it writes them
   * from the bookkeeping). Returns the function that removes it.
   */
  onScrape(hook: () => void): () => void {
    this.#scrapeHooks.add(hook);
    return () => this.#scrapeHooks.delete(hook);
  }

  /**
   * Serves `text()` from `source` instead of this registry alone (a `--processes N` cluster: the series
   * of every process, gathered by the primary).
   */
  textFrom(source: () => Promise<string>): void {
    this.#textSource = source;
  }

  /** Prometheus text exposition of every metric. */
  async text(): Promise<string> {
    return this.#textSource !== undefined ? this.#textSource() : this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
