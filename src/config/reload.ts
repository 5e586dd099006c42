/**
 * Hot reconfiguration: what may change in a running gateway, and what a
 * reload changed. A reloaded file goes through `loadGatewayConfig` like the
 * first one; `reloadProblems` then refuses the fields that are read only at
 * start (listeners, tokenizers, block sizes, modes, pools, tracing, KV-event
 * bounds, replica sync), each named with its file path, so a reload is applied
 * whole or not at all: every field is either here or in `configChanges`, since
 * one in neither would be dropped by a reload that said nothing of it. Reloadable: each
 * model's workers, router preset and router knobs (not the structural ones), `limits` (but
 * the header, request and session bounds), `auth`, `tenants`, `shutdown`.
 */
import { KV_ROUTER_CONFIG_FIELDS, STRUCTURAL_ROUTER_KNOBS, type KvRouterConfig } from '../core/index.js';
import type { FlaggedField } from './load.js';
import type { ConfigProblem } from './reader.js';
import { withoutCredentials } from './redact.js';
import { keysChange, tenantChanges } from './tenant-changes.js';
import type { GatewayConfig, LimitsConfig, ModelConfig, WorkerConfig } from './types.js';

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);

/** Gateway-wide fields read only at start: their file path and value. */
const RESTART_FIELDS: readonly [string, (c: GatewayConfig) => unknown][] = [
  ['listen', (c) => c.listen],
  ['listen.backlog', (c) => c.listenBacklog],
  ['admin', (c) => c.admin],
  ['health', (c) => c.health],
  // Each worker's engine pool is sized when it opens: a new size would hold for workers joining after the reload only.
  ['engine_connections.max_per_worker', (c) => c.engineConnections.maxPerWorker],
  ['preprocess', (c) => c.preprocess],
  ['log.level', (c) => c.logLevel],
  ['processes', (c) => c.processes],
  ['kv_events.ingest_threads', (c) => c.kvIngestThreads],
  // The KV-event pools, the replica sync and the tracer are built once at start with these.
  ['kv_events.queue_batches', (c) => c.kvEvents.maxQueuedBatches],
  ['kv_events.pending_batches', (c) => c.kvEvents.maxPendingBatches],
  ['kv_events.events_per_turn', (c) => c.kvEvents.maxEventsPerTurn],
  ['kv_events.turn_budget_ms', (c) => c.kvEvents.maxTurnMs],
  ['kv_events.reorder_window', (c) => c.kvEvents.reorderWindow],
  ['kv_events.max_seq_jump', (c) => c.kvEvents.maxSeqJump],
  ['kv_events.restart_confirmations', (c) => c.kvEvents.restartConfirmations],
  ['kv_events.inconsistent_after_ms', (c) => c.kvEvents.inconsistentAfterMs],
  ['kv_events.stale_after_ms', (c) => c.kvEvents.staleAfterMs],
  ['kv_events.replay_timeout_ms', (c) => c.kvEvents.replayTimeoutMs],
  ['kv_events.receive_high_water_mark', (c) => c.kvEvents.receiveHighWaterMark],
  ['kv_events.max_message_bytes', (c) => c.kvEvents.maxMessageBytes],
  ['kv_events.max_replay_bytes', (c) => c.kvEvents.maxReplyBytes],
  ['kv_events.max_batch_elements', (c) => c.kvEvents.maxBatchElements],
  ['kv_events.max_kv_groups', (c) => c.kvEvents.maxKvGroups],
  ['replicas.nats.servers', (c) => c.replicas.natsServers],
  ['replicas.nats.reconnect_wait_ms', (c) => c.replicas.natsConnection.reconnectTimeWaitMs],
  ['replicas.nats.max_reconnect_attempts', (c) => c.replicas.natsConnection.maxReconnectAttempts],
  ['replicas.nats.ping_interval_ms', (c) => c.replicas.natsConnection.pingIntervalMs],
  ['replicas.nats.max_pings_out', (c) => c.replicas.natsConnection.maxPingsOut],
  ['replicas.nats.connect_timeout_ms', (c) => c.replicas.natsConnection.connectTimeoutMs],
  ['replicas.router_id', (c) => c.replicas.routerId],
  ['replicas.subject_prefix', (c) => c.replicas.subjectPrefix],
  ['replicas.heartbeat_ms', (c) => c.replicas.heartbeatMs],
  ['replicas.peer_timeout_ms', (c) => c.replicas.peerTimeoutMs],
  ['replicas.max_queued_ops', (c) => c.replicas.maxQueuedOps],
  ['replicas.warm_start', (c) => c.replicas.warmStart],
  ['replicas.warm_start_timeout_ms', (c) => c.replicas.warmStartTimeoutMs],
  ['replicas.snapshot_chunk_bytes', (c) => c.replicas.snapshotChunkBytes],
  ['replicas.max_snapshot_bytes', (c) => c.replicas.maxSnapshotBytes],
  ['tracing.otlp_endpoint', (c) => c.tracing.otlpEndpoint],
  ['tracing.sample_ratio', (c) => c.tracing.sampleRatio],
  ['tracing.export_timeout_ms', (c) => c.tracing.exportTimeoutMs],
  ['pid_file', (c) => c.pidFile],
  ['limits.header_timeout_ms', (c) => c.limits.headerTimeoutMs],
  ['limits.request_timeout_ms', (c) => c.limits.requestTimeoutMs],
  // The engine client is built once with it.
  ['limits.max_response_bytes', (c) => c.limits.maxResponseBytes],
  ['limits.max_session_timeout_s', (c) => c.limits.maxSessionTimeoutS],
  ['limits.max_sessions', (c) => c.limits.maxSessions],
  ['models', (c) => c.models.map((m) => m.name)],
];

/** A model's fields read only when its router is built. */
const MODEL_RESTART_FIELDS: readonly [string, (m: ModelConfig) => unknown][] = [
  ['served_model_name', (m) => m.servedModelName],
  // Copied into each worker by the discovery sources at start: a reload would re-add only the static ones.
  ['lora_adapters', (m) => m.loraAdapters],
  ['router_mode', (m) => m.routerMode],
  ['block_size', (m) => m.blockSize],
  ['tokenizer', (m) => m.tokenizer],
  ['verify_tokenizer', (m) => m.verifyTokenizer],
  ['enforce_disagg', (m) => m.enforceDisagg],
  ['disagg_policy', (m) => m.disaggPolicy],
  ['eagle', (m) => m.eagle],
  ['anthropic_inline_system', (m) => m.anthropicInlineSystem],
  ['session_priority', (m) => m.sessionPriority ?? 'off'],
  ['session_affinity', (m) => m.sessionAffinity],
  ['client_pins', (m) => m.clientPins],
  ['engine_timeouts', (m) => m.engineTimeouts],
  ['engine', (m) => m.engine],
  ['workers_file', (m) => m.workersFile],
  ['etcd', (m) => m.etcd],
  ['kubernetes', (m) => m.kubernetes],
  ['inference_pool', (m) => m.inferencePool],
  ['migration_limit', (m) => m.migration.limit],
  ['migration_max_seq_len', (m) => m.migration.maxSeqLen],
  ['panic_threshold_percent', (m) => m.panicThresholdPercent],
  ...STRUCTURAL_ROUTER_KNOBS.map((k): [string, (m: ModelConfig) => unknown] => [
    `router.${KV_ROUTER_CONFIG_FIELDS[k].dynamo}`,
    (m) => m.router[k],
  ]),
];

/**
 * The changes from `prev` to `next` that a running gateway cannot take (empty: the reload may be applied).
 * `source` is the file the problems are reported against.
 */
export function reloadProblems(prev: GatewayConfig, next: GatewayConfig): ConfigProblem[] {
  const source = next.file ?? 'flags';
  const out: ConfigProblem[] = [];
  const refuse = (path: string, before: unknown, after: unknown): void => {
    // NATS and OTLP URLs may carry credentials: compared whole, shown without them.
    const from = shownWithoutCredentials(before);
    const to = shownWithoutCredentials(after);
    out.push({
      source,
      path,
      reason:
        `changed from ${JSON.stringify(from)} to ${JSON.stringify(to)}, which takes effect only when kvgate restarts; ` +
        `a reload cannot apply it`,
    });
  };
  for (const [path, get] of RESTART_FIELDS) if (!same(get(prev), get(next))) refuse(path, get(prev), get(next));
  if (out.some((p) => p.path === 'models')) return out;
  next.models.forEach((m, i) => {
    const before = prev.models[i]!;
    for (const [field, get] of MODEL_RESTART_FIELDS)
      if (!same(get(before), get(m))) refuse(`models[${i}].${field}`, get(before), get(m));
  });
  return out;
}

/** A field's value as a problem shows it: each URL-like string without its credentials. */
function shownWithoutCredentials(v: unknown): unknown {
  if (typeof v === 'string') return v.includes('@') ? withoutCredentials(v) : v;
  return Array.isArray(v) ? v.map(shownWithoutCredentials) : v;
}

/** One applied change, for the reload's log line. */
export interface ConfigChange {
  readonly path: string;
  readonly from?: unknown;
  readonly to?: unknown;
}

const LIMIT_FIELDS: readonly [string, keyof LimitsConfig][] = [
  ['max_body_bytes', 'maxBodyBytes'],
  ['max_prompt_tokens', 'maxPromptTokens'],
  ['max_messages', 'maxMessages'],
  ['max_concurrent_requests', 'maxConcurrentRequests'],
  ['max_concurrent_requests_per_client', 'maxConcurrentRequestsPerClient'],
  ['body_timeout_ms', 'bodyTimeoutMs'],
  ['body_deadline_ms', 'bodyDeadlineMs'],
  ['client_stall_timeout_ms', 'clientStallTimeoutMs'],
  ['max_pending_connections_per_client', 'maxPendingConnectionsPerClient'],
  ['max_connections_per_client', 'maxConnectionsPerClient'],
  ['max_connections', 'maxConnections'],
  ['client_address', 'clientAddress'],
  ['trusted_proxies', 'trustedProxies'],
  ['retry_after_seconds', 'retryAfterSeconds'],
];

const workerLine = (w: WorkerConfig): string => `${w.id} ${w.role} ${w.url}`;

/** What a (valid, reloadable) `next` changes from `prev`: every field, API keys counted, never shown. */
export function configChanges(prev: GatewayConfig, next: GatewayConfig): ConfigChange[] {
  const out: ConfigChange[] = [];
  const note = (path: string, from: unknown, to: unknown): void => {
    if (!same(from, to)) out.push({ path, from, to });
  };
  const keys = keysChange('auth.api_keys', prev.apiKeys, next.apiKeys);
  if (keys !== undefined) out.push(keys);
  for (const [name, key] of LIMIT_FIELDS) note(`limits.${name}`, prev.limits[key], next.limits[key]);
  out.push(...tenantChanges(prev.tenants, next.tenants));
  note('shutdown.drain_timeout_ms', prev.drainTimeoutMs, next.drainTimeoutMs);
  next.models.forEach((m, i) => {
    const before = prev.models[i]!;
    note(`models[${i}].max_prompt_tokens`, before.maxPromptTokens, m.maxPromptTokens);
    note(`models[${i}].router.router_preset`, before.routerPreset, m.routerPreset);
    for (const k of Object.keys(m.router) as (keyof KvRouterConfig)[]) {
      note(`models[${i}].router.${KV_ROUTER_CONFIG_FIELDS[k].dynamo}`, before.router[k], m.router[k]);
    }
    const { removed, added } = workerDiff(before.workers, m.workers);
    if (removed.length > 0) out.push({ path: `models[${i}].workers`, from: removed.map(workerLine) });
    if (added.length > 0) out.push({ path: `models[${i}].workers`, to: added.map(workerLine) });
  });
  return out;
}

/**
 * Workers that leave and join between two lists, by id: a worker whose id stays but whose settings
 * changed (URL, role, endpoints) leaves and joins again.
 */
export function workerDiff(
  prev: readonly WorkerConfig[],
  next: readonly WorkerConfig[],
): { removed: WorkerConfig[]; added: WorkerConfig[] } {
  const before = new Map(prev.map((w) => [w.id, w]));
  const after = new Map(next.map((w) => [w.id, w]));
  const removed = prev.filter((w) => !same(w, after.get(w.id)));
  const added = next.filter((w) => !same(w, before.get(w.id)));
  return { removed, added };
}

/** A field whose value in the file changed while a command-line flag sets it: the flag's value stays in force. */
export interface HiddenByFlag {
  readonly path: string;
  readonly flag: string;
}

/**
 * The fields the flags set (`next`, at this read of the file) whose value in the file changed since `prev` (the
 * previous read): edits a reload cannot apply, since the flags are applied on top of the file at every read.
 */
export function hiddenByFlags(prev: readonly FlaggedField[], next: readonly FlaggedField[]): HiddenByFlag[] {
  const before = new Map(prev.map((f) => [f.path, f.fileValue]));
  return next.filter((f) => !same(before.get(f.path), f.fileValue)).map(({ path, flag }) => ({ path, flag }));
}
