/**
 * The gateway's defaults, in one place (the README's configuration reference
 * quotes them).
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { EngineDialect, RouterMode } from '../common/index.js';
import type { LogLevel } from './types.js';

export const GATEWAY_DEFAULTS = Object.freeze({
  host: '127.0.0.1',
  port: 8080,
  adminHost: '127.0.0.1',
  maxBodyBytes: 4 * 1024 * 1024,
  /** The engine client's own default (`DEFAULT_MAX_RESPONSE_BYTES`; a test holds them equal). */
  maxResponseBytes: 64 * 1024 * 1024,
  maxPromptTokens: 131_072,
  /** OpenAI's own bound on a chat's messages. */
  maxMessages: 2048,
  maxConcurrentRequests: 1024,
  /** Off: with `client_address: socket` every client behind a proxy or NAT is one client, which a bound would throttle. */
  maxConcurrentRequestsPerClient: 0,
  requestTimeoutMs: 600_000,
  engineFirstByteTimeoutMs: 60_000,
  engineStreamIdleTimeoutMs: 30_000,
  /** `engine_connections.max_per_worker` (undici's per-origin pool size). */
  engineMaxConnectionsPerWorker: 256,
  headerTimeoutMs: 30_000,
  bodyTimeoutMs: 30_000,
  bodyDeadlineMs: 60_000,
  clientStallTimeoutMs: 60_000,
  maxPendingConnectionsPerClient: 256,
  maxConnectionsPerClient: 2048,
  /** `limits.max_connections` by default: room for this many clients at their own bound (`max_connections_per_client`). */
  clientsAtConnectionBound: 4,
  retryAfterSeconds: 1,
  maxSessionTimeoutS: 3600,
  maxSessions: 100_000,
  drainTimeoutMs: 30_000,
  healthIntervalMs: 2000,
  healthTimeoutMs: 1000,
  healthUnhealthyAfter: 2,
  healthMaxEjectedPercent: 50,
  // Envoy's default healthy panic threshold: a pool with fewer healthy workers routes to all of them.
  panicThresholdPercent: 50,
  outlierConsecutiveErrors: 5,
  outlierBaseEjectionMs: 30_000,
  outlierMaxEjectionMs: 300_000,
  tracingSampleRatio: 1,
  // Not OTLP's 10 s: the last export at shutdown waits this long for a collector that does not answer.
  tracingExportTimeoutMs: 2000,
  segmentCacheTokens: 2_000_000,
  segmentCacheBytes: 32 * 1024 * 1024,
  conversationCacheBytes: 128 * 1024 * 1024,
  preprocessTaskTimeoutMs: 30_000,
  logLevel: 'info' as LogLevel,
  routerMode: 'kv' as RouterMode,
  blockSize: 16,
  engine: 'vllm' as EngineDialect,
  /** Where workers register in etcd (`<prefix>/<model>/<id>`). */
  etcdPrefix: '/kvgate/workers',
  /** Kubernetes discovery: the in-cluster API server, the pod's service-account token and CA, and the first worker id endpoints get. */
  kubernetesApiServer: 'https://kubernetes.default.svc',
  kubernetesTokenFile: '/var/run/secrets/kubernetes.io/serviceaccount/token',
  kubernetesCaFile: '/var/run/secrets/kubernetes.io/serviceaccount/ca.crt',
  kubernetesIdBase: 100_000,
  /** `inference_pool.fallbacks`: the pick and two more endpoints for the data plane's retries. */
  pickerFallbacks: 3,
  sglangBootstrapPort: 8998,
  // Migrations per request (Dynamo's default is 0: off; kvgate resumes broken streams by default).
  migrationLimit: 3,
  /** KV-event ingestion bounds (the `kv_events` section); src/events uses the same values by default. */
  kvEvents: Object.freeze({
    maxQueuedBatches: 10_000,
    maxPendingBatches: 100_000,
    maxEventsPerTurn: 2000,
    maxTurnMs: 4,
    reorderWindow: 64,
    maxSeqJump: 1_000_000,
    restartConfirmations: 2,
    inconsistentAfterMs: 5000,
    staleAfterMs: 30_000,
    replayTimeoutMs: 2000,
    receiveHighWaterMark: 100_000,
    maxMessageBytes: 64 * 2 ** 20,
    maxReplyBytes: 512 * 2 ** 20,
    maxBatchElements: 2 ** 20,
    maxKvGroups: 16,
  }),
  replicaSubjectPrefix: 'kvgate.replicas',
  /**
   * The NATS client's defaults, but the reconnect wait (its 2 s) and the ping interval (its 2 min: a server that
   * stops answering without closing the connection would go unnoticed that long).
   */
  replicaNats: Object.freeze({
    reconnectTimeWaitMs: 250,
    maxReconnectAttempts: -1,
    pingIntervalMs: 5000,
    maxPingsOut: 2,
    connectTimeoutMs: 20_000,
  }),
  replicaHeartbeatMs: 1000,
  replicaPeerTimeoutMs: 5000,
  replicaMaxQueuedOps: 65_536,
  replicaWarmStartTimeoutMs: 5000,
  /** A quarter of NATS's default max_payload (1 MiB): room for the chunk's envelope, and other traffic between chunks. */
  replicaSnapshotChunkBytes: 262_144,
  replicaMaxSnapshotBytes: 268_435_456,
});

/**
 * Preprocessing threads of one process by default: the spare cores (all but one) shared by the
 * `processes` gateway processes, at most 4 each, so N processes never run more preprocessing threads
 * than cores - 1 in total. A lone process keeps at least 1; with more processes than spare cores
 * each preprocesses on its own main thread (0).
 */
export function defaultPreprocessThreads(processes = 1): number {
  const share = Math.min(4, Math.floor((availableParallelism() - 1) / processes));
  return processes === 1 ? Math.max(1, share) : Math.max(0, share);
}

/**
 * KV-event ingestion threads by default (`kv_events.ingest_threads`): none, ingestion on the main thread. Threads pay
 * under load (16 cores, events/e2e at 1.2M events/s offered in batches of 8: 6 threads applied 1.17M/s without drops
 * and a lag p99 of 4 ms, the main thread alone 174k/s with drops), but a thread connects its sockets only after the
 * gateway reports started, so an engine's first batches before that are lost unless it has a replay endpoint.
 * Opt-in until startup waits for the subscriptions.
 */
export const DEFAULT_INGEST_THREADS = 0;

/** Node's own listen backlog, and what kvgate uses where the kernel's limit cannot be read. */
const NODE_BACKLOG = 511;

/** The kernel's cap on a listen backlog (Linux's net.core.somaxconn), or undefined where it cannot be read. */
export function kernelBacklogCap(): number | undefined {
  try {
    const n = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8').trim());
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The public listener's backlog by default: as long as the kernel allows (Envoy's and Go's choice), so a burst of
 * connections waits in the kernel's queue instead of overflowing it. An overflowing queue answers with SYN
 * cookies that can fail, and clients of those see their connection reset.
 */
export function defaultListenBacklog(): number {
  return Math.min(65_535, kernelBacklogCap() ?? NODE_BACKLOG);
}
