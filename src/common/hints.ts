/**
 * What a client may ask of routing, validated at the edge (the frontend, or a
 * library caller through KvRouter) and carried unchanged to the scheduler.
 */
import type { RouterMode } from './vocabulary.js';

/** Per-request scoring overrides (Dynamo's `RouterConfigOverride`), already validated: see core's `parseRouterConfigOverride`. */
export interface RouterConfigOverride {
  readonly overlapScoreCredit?: number;
  readonly prefillLoadScale?: number;
  readonly routerTemperature?: number;
  readonly assumeKvReuse?: boolean;
  readonly trackPrefillTokens?: boolean;
  readonly sharedCacheMultiplier?: number;
}

/** Taint filter and bias: workers advertise taints; a request may require some and prefer others. */
export interface RoutingConstraints {
  readonly requiredTaints?: readonly string[] | undefined;
  /** Taint -> cost factor (> 0); a candidate's cost is multiplied by the factors of the taints it carries (< 1 draws). */
  readonly preferredTaints?: Readonly<Record<string, number>> | undefined;
}

/** A sticky session: `x-session-id` or `nvext.session_control`. */
export interface SessionHint {
  readonly id: string;
  /**
   * Session lineage: the session that spawned this one (a subagent's parent), by `x-parent-session-id`
   * or `nvext.session_control.parent_session_id`. While this session is unbound it goes where the parent is bound.
   */
  readonly parentId?: string | undefined;
  readonly action?: 'open' | 'close' | undefined;
  /** Seconds of inactivity before the binding lapses (default 300). */
  readonly timeoutSecs?: number | undefined;
}

/**
 * Which end of the engine's `priority` it serves first (`session_priority`): vLLM's priority scheduling the lower
 * values, SGLang's the higher (unless `--schedule-low-priority-values-first`).
 */
export type SessionPriorityOrder = 'lower_first' | 'higher_first';

/**
 * What a session's binding does (`session_affinity`): `pin` sends its requests (and an unbound subagent's) to its
 * worker whatever the load (Dynamo's `session_control`); `cost` leaves them to the KV cost model, which finds the
 * session's cached context in the prefix index and moves it only when load outweighs it (KV mode only).
 */
export type SessionAffinity = 'pin' | 'cost';

/** A model's `session_affinity` unless it names one: KV mode's cost model places sessions; the other modes can only pin. */
export function defaultSessionAffinity(mode: RouterMode): SessionAffinity {
  return mode === 'kv' ? 'cost' : 'pin';
}

/**
 * The request's tenant as the router queue sees it (set by the gateway from its `tenants` config, never by the
 * client): the queue shares admission among tenant classes by deficit round robin and sheds by class share.
 */
export interface TenantHint {
  /** A declared tenant's name, or `other`: a bounded set (the metrics' label). */
  readonly tenant: string;
  readonly class: string;
  /** Strict tier: a class of higher priority always leaves the queue first. */
  readonly priority: number;
  /** Requests admitted per deficit-round-robin round, among the classes of one priority (>= 1). */
  readonly weight: number;
  /** Queue capacity in requests per worker (a full queue sheds the class most over its share); undefined = none. */
  readonly queueLimitPerWorker: number | undefined;
}

/** Dynamo's routing hints, camelCased: pins, restrictions, queue priority, session. All optional. */
export interface RoutingHints {
  /**
   * Generic pin (aggregated; also the decode pin when `decodeWorkerId` is absent):
   * `nvext.backend_instance_id` or `x-worker-instance-id`.
   */
  readonly backendInstanceId?: number | undefined;
  /** Pin for the prefill phase: `nvext.prefill_worker_id` or `x-prefill-instance-id`. */
  readonly prefillWorkerId?: number | undefined;
  /** Pin for the decode phase: `nvext.decode_worker_id`. */
  readonly decodeWorkerId?: number | undefined;
  /** Decode (or aggregated) dp rank of the pin: `nvext.dp_rank`. */
  readonly dpRank?: number | undefined;
  /** Prefill dp rank of the pin (falls back to `dpRank` in the prefill phase): `nvext.prefill_dp_rank`. */
  readonly prefillDpRank?: number | undefined;
  /** Restricts candidates (an endpoint picker's list): `nvext.allowed_worker_ids`. */
  readonly allowedWorkerIds?: ReadonlySet<number> | readonly number[] | undefined;
  /**
   * Set by kvgate, never the client: narrows a candidate worker to some of its dp ranks (worker id -> the ranks
   * allowed; a worker not in it keeps all its ranks). `kvgate picker`'s, for a data plane's endpoint subset that
   * names some of a data-parallel pod's endpoints, one per rank.
   */
  readonly allowedDpRanks?: ReadonlyMap<number, ReadonlySet<number>> | undefined;
  /**
   * Set by kvgate, never the client: `allowedWorkerIds` is only the workers serving the request's LoRA adapter, a
   * restriction of kvgate's own and not a picker's decision, so the request waits in the router queue like any
   * other (a client's or picker's list skips it).
   */
  readonly adapterRestricted?: boolean | undefined;
  /**
   * Seconds of queue priority: `max(0, nvext.agent_hints.priority)` (fallback: `latency_sensitivity`), at most the
   * tenant class's `max_priority_jump` (the gateway clamps it: frontend's client-priority.ts). The router's queue
   * clamps it again to its own `maxPriorityJump` (default 10 s; the gateway's routers 3600), the bound of a library
   * caller's.
   */
  readonly priorityJump?: number | undefined;
  /** Absolute queue tier; higher always first. */
  readonly strictPriority?: number | undefined;
  /** Expected output tokens: `nvext.agent_hints.osl` (drives output-block decay). */
  readonly expectedOutputTokens?: number | undefined;
  /** LoRA adapter: `nvext.lora_name`, mixed into the block hashes' seed. */
  readonly loraName?: string | undefined;
  /** Per-request scoring overrides: `nvext.router_config_override`, validated at the edge. */
  readonly routerConfigOverride?: RouterConfigOverride | undefined;
  /** Taint filter and bias. */
  readonly routingConstraints?: RoutingConstraints | undefined;
  /** Sticky session. */
  readonly session?: SessionHint | undefined;
  /** All `nvext.annotations`, as sent. */
  readonly annotations?: readonly string[] | undefined;
  /** The tenant and its class (the gateway's tenants config); absent: one shared class. */
  readonly tenant?: TenantHint | undefined;
}
