/**
 * The workers' part of kvgate's metric table (definitions.ts spreads it into the one table): each worker's state,
 * health probing, outlier ejection and readmission, and pool panic.
 */
import { MW, type MetricDefinition } from './definition-types.js';

export const WORKER_METRIC_DEFINITIONS = {
  // ---- worker state (loud failures)
  workerUp: {
    kind: 'gauge',
    name: 'kvgate_worker_up',
    help: '1 while the worker is routable (configured and passing its health probe); 0 while it is down.',
    labelNames: ['model', 'worker_id', 'worker_type'],
  },
  workerState: {
    kind: 'gauge',
    name: 'kvgate_worker_state',
    help: "1 for the worker's current health state (up, down, ejected, panic, kept, model_mismatch, unknown), 0 for the others.",
    labelNames: ['model', 'worker_id', 'state'],
  },
  workerBlockSizeMismatch: {
    kind: 'gauge',
    name: 'kvgate_worker_block_size_mismatch',
    help:
      "1 once the worker's engine says (its /metrics on join, or its KV events) it uses a block size other than the " +
      "model's block_size (its blocks are ignored, its KV overlap scored 0).",
    labelNames: ['model', 'worker_id'],
  },
  engineChecks: {
    kind: 'counter',
    name: 'kvgate_worker_engine_checks_total',
    help:
      "Checks of a joining worker's engine: check=block_size (its /metrics), kv_groups (the KV-cache layout its " +
      '/metrics states) or tokenizer (the canary probe), by outcome: ok, mismatch (kept out of KV-aware routing), ' +
      'unknown (a KV-cache group kvgate has no reuse rule for: kept out of KV-aware routing), unreadable (/metrics), ' +
      'inconclusive (probe).',
    labelNames: ['model', 'check', 'outcome'],
  },
  modelTokenizerMissing: {
    kind: 'gauge',
    name: 'kvgate_model_tokenizer_missing',
    help: "1 for a KV-routed model without a tokenizer (prefix hashes come from the byte-packing fallback and match no engine's blocks).",
    labelNames: ['model'],
  },
  modelServable: {
    kind: 'gauge',
    name: 'kvgate_model_servable',
    help:
      '1 while the model can be served (listed by /ready and /v1/models); 0 while it cannot (no worker available, or ' +
      'no prefill worker where the model may not be served aggregated).',
    labelNames: ['model'],
  },
  modelServableTransitions: {
    kind: 'counter',
    name: 'kvgate_model_servable_transitions_total',
    help:
      'The model becoming servable (to=servable: back in /ready and /v1/models) or unavailable (to=unavailable: ' +
      'gone from them, its requests refused).',
    labelNames: ['model', 'to'],
  },
  // ---- engine connections: each worker's pool of connections to its engine, read at every scrape
  workerEngineConnections: {
    kind: 'gauge',
    name: 'kvgate_worker_engine_connections',
    help:
      "Connections open to the worker's engine: state=busy (carrying a request) or idle (kept alive for the next); " +
      'busy reaches engine_connections.max_per_worker when every connection is in use.',
    labelNames: ['model', 'worker_id', 'state'],
    scraped: true,
  },
  workerEngineRequestsWaiting: {
    kind: 'gauge',
    name: 'kvgate_worker_engine_requests_waiting',
    help:
      "Requests to the worker's engine waiting for a connection: every one of engine_connections.max_per_worker " +
      'busy, or a new one still connecting. The engine has not seen them.',
    labelNames: ['model', 'worker_id'],
    scraped: true,
  },
  // ---- health probing
  healthTransitions: {
    kind: 'counter',
    name: 'kvgate_worker_health_transitions_total',
    help:
      "Health probing outcomes per worker: ejected (marked down), kept (failing, but the model's ejection limit is " +
      'reached: still routed), readmitted.',
    labelNames: ['model', 'worker_id', 'transition'],
  },
  workerEjections: {
    kind: 'counter',
    name: 'kvgate_worker_ejections_total',
    help:
      'Workers taken out of routing: health_probe (failed probes) or consecutive_errors (5xx answers, connection ' +
      'failures or malformed answers on dispatch).',
    labelNames: ['model', 'worker_id', 'reason'],
  },
  workerReadmissions: {
    kind: 'counter',
    name: 'kvgate_worker_readmissions_total',
    help:
      'Ejections lifted, by the reason of the ejection: health_probe (the probe passes again) or consecutive_errors ' +
      '(the ejection time is over, or a probe passes after connection failures alone).',
    labelNames: ['model', 'worker_id', 'reason'],
  },
  workerEjectionsRefused: {
    kind: 'counter',
    name: 'kvgate_worker_ejections_refused_total',
    help:
      "Ejections max_ejected_percent did not allow (that share of the model's workers is ejected already): the " +
      'failing worker stays routable. Counted once per failing streak.',
    labelNames: ['model', 'worker_id', 'reason'],
  },
  poolPanic: {
    kind: 'gauge',
    name: 'kvgate_pool_panic',
    help:
      "1 while the pool (a model's workers of one worker_type) has fewer healthy workers than its panic threshold: it " +
      'routes to all of them, ejected ones included.',
    labelNames: MW,
  },
} as const satisfies Record<string, MetricDefinition>;
