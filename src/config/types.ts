/**
 * The resolved gateway configuration: one typed, deep-frozen object produced
 * by `loadGatewayConfig` (file + flags, validated once). Code downstream never
 * re-validates it. The file format (snake_case) is documented in the README
 * section "Configuration"; this is its camelCase, defaults-applied form.
 */
import type {
  EngineDialect,
  InlineSystemOption,
  RouterMode,
  SessionAffinity,
  SessionPriorityOrder,
} from '../common/index.js';
import type { DisaggPolicy, KvRouterConfig, RouterPreset } from '../core/index.js';
import type { WorkerInfo } from '../discovery/index.js';
import type { TokenizerFiles } from '../tokenizer/index.js';
import type { LimitsConfig } from './types-limits.js';

export type { AddressBlock, ClientAddressSource, LimitsConfig } from './types-limits.js';

/**
 * Where a model's tokenizer comes from:
 * - `files`: a Hugging Face tokenizer.json (+ tokenizer_config.json with the chat template);
 * - `demo`: the bundled Qwen3 tokenizer (the embedded demo model);
 * - `none`: no tokenizer. Then `onMissingTokenizer` decides: `approximate` routes on
 *   the documented byte-packing fallback tokenizer (prefix hashes of the text, not of
 *   the engine's tokens), `reject` refuses text prompts (token-id prompts still work).
 */
export type TokenizerSource =
  | { readonly kind: 'files'; readonly files: Readonly<TokenizerFiles> }
  | { readonly kind: 'demo' }
  | { readonly kind: 'none'; readonly onMissing: 'approximate' | 'reject' };

/** A worker as configured; the same shape the discovery registry takes. */
export type WorkerConfig = WorkerInfo;

export interface ModelConfig {
  /** The `model` clients send and /v1/models lists. */
  readonly name: string;
  /**
   * The name the engines serve the model as: sent to them as `model`, and checked against each
   * engine's /v1/models when its worker joins (a worker whose engine does not list it is not routed to).
   */
  readonly servedModelName: string;
  /**
   * LoRA adapters every worker of the model serves by configuration (more are learned from each
   * engine's /v1/models). Clients ask for one as `model` or `nvext.lora_name`.
   */
  readonly loraAdapters: readonly string[];
  readonly routerMode: RouterMode;
  /** KV cache block size of the engines (tokens per block); must equal the engines' setting. */
  readonly blockSize: number;
  readonly tokenizer: TokenizerSource;
  /**
   * When a worker with KV events joins, send its engine one canary chat and compare the token ids of the
   * blocks it stores with kvgate's tokenization; a disagreement marks the worker mismatched.
   */
  readonly verifyTokenizer: boolean;
  /** Fail requests instead of falling back to aggregated serving when no prefill worker can take them. */
  readonly enforceDisagg: boolean;
  /** Per request, whether a disaggregated model runs the prefill on its prefill pool or serves aggregated. */
  readonly disaggPolicy: DisaggPolicy;
  /**
   * Eagle (speculative decoding) block hashing, Dynamo's `is_eagle`: each block is hashed over its tokens plus the
   * next one, as an Eagle engine's KV cache keys it, so routing hashes match that engine's KV events.
   */
  readonly eagle: boolean;
  /**
   * `anthropic_inline_system`: how a Messages request's system messages inside `messages` are placed (kept as
   * system turns, or folded into user messages), as the model's engines place them. `auto` (the default, as
   * vLLM's own `anthropic_inline_system`) settles it at start by probing the model's chat template as vLLM does
   * (common's inline-system-probe.ts).
   */
  readonly anthropicInlineSystem: InlineSystemOption;
  /**
   * `session_priority`: chat, completion and Responses requests carry their root session's start as the engine
   * `priority`, for engines in priority scheduling that serve this end first (vLLM `lower_first`, SGLang
   * `higher_first`); undefined: off.
   */
  readonly sessionPriority: SessionPriorityOrder | undefined;
  /** `session_affinity`: whether a session's binding pins its requests (default: `cost` in KV mode, else `pin`). */
  readonly sessionAffinity: SessionAffinity;
  /**
   * `client_pins`: whether a client may name its workers (`nvext` pins and `allowed_worker_ids`, the worker-id
   * headers), which skip the router queue and, pinned, the overload thresholds. `deny`: such a request is a 400
   * (direct mode needs `allow`, the default).
   */
  readonly clientPins: 'allow' | 'deny';
  /** Prompt token limit for this model (the global limit unless overridden). */
  readonly maxPromptTokens: number;
  /**
   * The preset the router knobs were laid over (`router.router_preset`: the model's, else the global
   * section's, else `kv`); knobs set explicitly in either section win over the preset's.
   */
  readonly routerPreset: RouterPreset;
  /** The router knobs for this model (the preset's, under the global `router` section merged with the model's own). */
  readonly router: KvRouterConfig;
  /** In file order; `role` says which are prefill, decode or aggregated. */
  readonly workers: readonly WorkerConfig[];
  /** Per engine leg (the global `engine_timeouts` merged with the model's own); 0 turns one off. */
  readonly engineTimeouts: EngineTimeouts;
  /** The model's engine dialect: the default of its workers (static and discovered). */
  readonly engine: EngineDialect;
  /** A file (absolute path) listing more `workers` of this model, re-read whenever it changes. */
  readonly workersFile: string | undefined;
  /** etcd discovery: workers registered under `<prefix>/<model>/<id>` on these endpoints. */
  readonly etcd: EtcdDiscovery | undefined;
  /** Kubernetes discovery: the ready endpoints of a Service's EndpointSlices. */
  readonly kubernetes: KubernetesDiscovery | undefined;
  /** The InferencePool whose pods `kvgate picker` chooses from (`inference_pool`); `kvgate serve` refuses it. */
  readonly inferencePool: InferencePoolDiscovery | undefined;
  /** Request migration: streams resumed on another worker after a migratable failure. */
  readonly migration: MigrationConfig;
  /**
   * Envoy's load-balancer panic threshold, per pool of the model (its workers of one role): while fewer than this
   * percent of a pool's workers are healthy (not ejected on probes or errors), the pool routes to all of them.
   * 0 turns panic off.
   */
  readonly panicThresholdPercent: number;
}

/** A model's `etcd` section: the cluster's client endpoints and the key prefix workers register under (no trailing slash). */
export interface EtcdDiscovery {
  readonly endpoints: readonly string[];
  readonly prefix: string;
}

/**
 * A model's `kubernetes` section: the API server, the namespace and Service whose EndpointSlices list the
 * engines, the slice port that is their HTTP port (the first when unset), the bearer token and CA files
 * (read at each request: tokens rotate), and the lowest worker id endpoints are given.
 */
export interface KubernetesDiscovery {
  readonly apiServer: string;
  readonly namespace: string;
  readonly service: string;
  readonly portName: string | undefined;
  readonly tokenFile: string;
  readonly caFile: string;
  readonly idBase: number;
}

/**
 * A model's `inference_pool` section: the Gateway API Inference Extension `InferencePool`
 * (inference.networking.k8s.io/v1) whose selector's pods `kvgate picker` chooses from.
 */
export interface InferencePoolDiscovery {
  readonly apiServer: string;
  readonly namespace: string;
  readonly name: string;
  readonly tokenFile: string;
  readonly caFile: string;
  /** Endpoints in each answer: the pick, then the next best for the data plane's retries. */
  readonly fallbacks: number;
  /**
   * Whether the GIE conformance suite's hooks are honoured: a request's `test-epp-endpoint-selection` header
   * restricts the choice, and the served endpoint is echoed in `x-conformance-test-served-endpoint`. Off by
   * default: with them on, any client could send the header and choose its own pod, past the KV and load scoring.
   */
  readonly conformanceHooks: boolean;
}

/** `migration_limit` (migrations per request, 0: off) and `migration_max_seq_len` (no migration past it; undefined: no bound). */
export interface MigrationConfig {
  readonly limit: number;
  readonly maxSeqLen: number | undefined;
}

/**
 * Progress deadlines of one engine leg (Envoy's per-try and stream-idle timeouts): from dispatch to
 * the first output, and between two SSE events. Their expiry fails the leg as a migratable failure.
 */
export interface EngineTimeouts {
  readonly firstByteMs: number;
  readonly streamIdleMs: number;
}

export interface ListenAddress {
  readonly host: string;
  /** 0 = an OS-chosen port (tests). */
  readonly port: number;
}

export interface HealthConfig {
  readonly intervalMs: number;
  /** Probe timeout, counted in event-loop time that was free to run (a stalled gateway does not blame its engines). */
  readonly timeoutMs: number;
  /** Consecutive failed probes before a worker is ejected. */
  readonly unhealthyAfter: number;
  /**
   * Most of a model's workers ejected at once (at least one), on failed probes and on dispatch errors alike;
   * beyond it failing workers stay routable.
   */
  readonly maxEjectedPercent: number;
  /** Ejection on dispatch errors (Envoy's consecutive-5xx outlier detection). */
  readonly outlierDetection: OutlierDetectionConfig;
}

interface OutlierDetectionConfig {
  /** Consecutive 5xx answers, connection failures or malformed answers on dispatch that eject a worker; 0 = off. */
  readonly consecutiveErrors: number;
  /** First ejection's length; the n-th of a worker lasts n times this. */
  readonly baseEjectionMs: number;
  /** Longest ejection. */
  readonly maxEjectionMs: number;
}

/** Bounds of KV-event ingestion, per (worker, dp rank) stream unless said otherwise. */
export interface KvEventsConfig {
  /** Live batches received and not yet applied; beyond it new ones are dropped and replayed later. */
  readonly maxQueuedBatches: number;
  /** Live batches parked behind a gap while its replay is in flight; beyond it dropped, recovered by the next replay. */
  readonly maxPendingBatches: number;
  /** Events applied per event-loop turn at most (per model pool). */
  readonly maxEventsPerTurn: number;
  /** Time spent applying events per event-loop turn at most, ms. */
  readonly maxTurnMs: number;
  /** How far out of order batches may arrive and still be put back in order (sequence numbers). */
  readonly reorderWindow: number;
  /** A sequence number further ahead than this is garbage, not a gap. */
  readonly maxSeqJump: number;
  /** Restart-like batches needed to declare a publisher restart (seq 0 again is enough alone). */
  readonly restartConfirmations: number;
  /** A stream inconsistent this long is reset from the engine's replay buffer (or scored approximately), ms. */
  readonly inconsistentAfterMs: number;
  /** Silence while serving after which a worker's events count as stale, ms. */
  readonly staleAfterMs: number;
  /** Per replay reply message, ms: past it the replay fails (the slot is cleared and follows live batches). */
  readonly replayTimeoutMs: number;
  /** Messages a SUB socket holds unread (ZMQ's receive high-water mark); beyond it ZMQ drops, seen as a gap. */
  readonly receiveHighWaterMark: number;
  /** The largest KV-event message taken, bytes; a larger one is dropped unread with its connection (then replayed). */
  readonly maxMessageBytes: number;
  /** Payload bytes of one replay answer at most (held whole before it is applied); past it the replay fails. */
  readonly maxReplyBytes: number;
  /** Msgpack elements (hashes, tokens) one batch may hold; a larger one is refused unread (`too_large`). */
  readonly maxBatchElements: number;
  /** KV-cache groups of one model at most, its primary included; a group past them gets no index (refused). */
  readonly maxKvGroups: number;
}

/** Replica sync's NATS connection: the names are the transport's options (src/replicas), which take it as is. */
export interface NatsConnectionConfig {
  /** Wait between the client's reconnect attempts to one server, ms. */
  readonly reconnectTimeWaitMs: number;
  /** Reconnect attempts per server before the client gives up (kvgate then opens a new connection); -1: forever. */
  readonly maxReconnectAttempts: number;
  /** Client pings, this many ms apart: how a server that stops answering (without closing) is noticed. */
  readonly pingIntervalMs: number;
  /** Pings unanswered after which the connection is taken as lost and reconnected. */
  readonly maxPingsOut: number;
  /** How long a connection attempt waits for the server's handshake, ms. */
  readonly connectTimeoutMs: number;
}

/** Active-active router replicas sharing their in-flight bookings and sticky sessions. */
export interface ReplicasConfig {
  /** NATS servers replica sync connects to; empty = sync off (a lone router). */
  readonly natsServers: readonly string[];
  /** How the NATS connection notices a lost server and reconnects (`replicas.nats`). */
  readonly natsConnection: NatsConnectionConfig;
  /** This replica's id among its peers (default: random at each start). */
  readonly routerId: string | undefined;
  /** NATS subject prefix; replicas of one deployment share it, another deployment on the same NATS uses its own. */
  readonly subjectPrefix: string;
  readonly heartbeatMs: number;
  /** A peer not heard from for this long has its bookings dropped. */
  readonly peerTimeoutMs: number;
  /** Outbound sync ops held at most before new ones are dropped (and counted). */
  readonly maxQueuedOps: number;
  /** Start from a live peer's bookings and prefix index (default: on when NATS is configured). */
  readonly warmStart: boolean;
  /** A warm start's bound in all (connecting, asking, every chunk); then the replica starts cold. */
  readonly warmStartTimeoutMs: number;
  /** Largest message of a chunked snapshot transfer (below NATS's max_payload). */
  readonly snapshotChunkBytes: number;
  /** Largest snapshot served or fetched (a larger one fails, counted). */
  readonly maxSnapshotBytes: number;
}

/** OpenTelemetry tracing: off while `otlpEndpoint` is undefined (the standard OTEL_* variables can also turn it on). */
export interface TracingConfig {
  /** Base URL of an OTLP/HTTP collector (spans go to `<url>/v1/traces`), or the full traces URL. */
  readonly otlpEndpoint: string | undefined;
  /** Fraction of new traces sampled, in [0, 1]; a client's sampled `traceparent` is always followed. */
  readonly sampleRatio: number;
  /** Most one export waits for the collector, retries included; bounds the last flush at shutdown too. */
  readonly exportTimeoutMs: number;
}

/** One tenant class: its place in the router queue and the rate limits each of its tenants gets. */
export interface TenantClassConfig {
  readonly name: string;
  /** Strict tier in the router queue: a class of higher priority is always admitted first (default 0). */
  readonly priority: number;
  /** Deficit-round-robin weight among the classes of one priority: requests admitted per round (default 1). */
  readonly weight: number;
  /** Requests per second each tenant of the class may send (token bucket); undefined = unlimited. */
  readonly requestRate: number | undefined;
  /** The request bucket's size: how many requests a tenant may send at once after a quiet spell. */
  readonly requestBurst: number;
  /** Prompt tokens per second each tenant of the class may send (token bucket); undefined = unlimited. */
  readonly tokenRate: number | undefined;
  /** The token bucket's size in prompt tokens (a larger prompt is refused whatever the rate). */
  readonly tokenBurst: number;
  /**
   * `engine_priority`: the range a client's own top-level `priority` (the engines' priority scheduling) is clamped
   * into before an engine sees it; undefined (the default): a client's `priority` is not forwarded at all.
   */
  readonly enginePriority: EnginePriorityRange | undefined;
  /** `max_priority_jump`: the most seconds of router queue a client's `nvext.agent_hints.priority` may jump (10). */
  readonly maxPriorityJump: number;
}

/** A tenant class's `engine_priority`: the engine `priority` values its clients may send, both bounds included. */
export interface EnginePriorityRange {
  readonly min: number;
  readonly max: number;
}

/** A declared tenant: its own metric label, its own rate buckets, its class. */
export interface TenantConfig {
  readonly name: string;
  readonly class: string;
  /** API keys (each also one of `apiKeys`) that identify this tenant. Never logged. */
  readonly apiKeys: readonly string[];
}

/** `tenants`: who a request belongs to, and what its tenant class may use. */
export interface TenantsConfig {
  /** A header naming the tenant of a request whose API key names none (lowercase); undefined = keys only. */
  readonly header: string | undefined;
  /** The class of requests whose tenant is not declared (they all share the tenant `other`). */
  readonly defaultClass: string;
  /** Router queue capacity in requests per worker; over it a request is shed with 529. undefined = unbounded. */
  readonly queueLimitPerWorker: number | undefined;
  readonly classes: readonly TenantClassConfig[];
  readonly members: readonly TenantConfig[];
}

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace' | 'silent';
export const LOG_LEVELS: readonly LogLevel[] = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

export interface GatewayConfig {
  /** The config file this came from (absolute), or undefined when built from flags alone. */
  readonly file: string | undefined;
  readonly listen: ListenAddress;
  /** `listen.backlog`: the kernel's queue of connections not yet accepted by the listeners (listen(2)'s backlog). */
  readonly listenBacklog: number;
  /** Admin endpoints (`/admin/*`), off unless `enabled`: only on `listen` when set, else on the public listener behind API keys. */
  readonly admin: { readonly enabled: boolean; readonly listen: ListenAddress | undefined };
  /** Accepted `Authorization: Bearer` keys; empty = no authentication. Never logged. */
  readonly apiKeys: readonly string[];
  readonly limits: LimitsConfig;
  /** Tenants and tenant classes: rate limits and the router queue's shares. */
  readonly tenants: TenantsConfig;
  /** Active health probing of every worker (GET /health). */
  readonly health: HealthConfig;
  /** `engine_connections.max_per_worker`: connections to one worker's engine at most (a request each); more wait for one. */
  readonly engineConnections: { readonly maxPerWorker: number };
  readonly tracing: TracingConfig;
  /** SIGTERM: stop accepting, let in-flight requests finish up to this long, then cut them. */
  readonly drainTimeoutMs: number;
  readonly preprocess: {
    /** Worker threads for chat templates, tokenization and hashing; 0 = on the main thread. */
    readonly threads: number;
    /** Token ids kept by each thread's segment cache (0 disables it). */
    readonly segmentCacheTokens: number;
    /** Bytes each thread's segment cache may retain (keys, id arrays, overhead); 0 disables it. */
    readonly segmentCacheBytes: number;
    /** Bytes each thread's conversation cache may retain per model (prompts, ids, hashes); 0 disables it. */
    readonly conversationCacheBytes: number;
    /** How long a task may run on a preprocessing thread before the thread is replaced (`preprocess.task_timeout_ms`). */
    readonly taskTimeoutMs: number;
  };
  readonly logLevel: LogLevel;
  /**
   * Gateway processes on the one listen port (`kvgate serve --processes N`, node:cluster); they share
   * bookings and sessions through replica sync (NATS when configured, else the cluster's IPC channel).
   */
  readonly processes: number;
  /**
   * Where `kvgate serve` writes its process id at start (the cluster primary's with several processes) and removes
   * it on exit: what `kill -HUP "$(cat FILE)"` reloads. Undefined: no file.
   */
  readonly pidFile: string | undefined;
  /** KV-event ingestion bounds (every model). */
  readonly kvEvents: KvEventsConfig;
  /** `kv_events.ingest_threads`: threads that receive, decode and hash KV events (every model's); 0 = the main thread. */
  readonly kvIngestThreads: number;
  readonly replicas: ReplicasConfig;
  /** Empty = the embedded demo (in-process simulated engines). */
  readonly models: readonly ModelConfig[];
  /** Things that are allowed but probably not what the operator wants; logged at startup. */
  readonly warnings: readonly string[];
}
