/**
 * KvRouterConfig: every knob of the KV router's scheduler as one typed object.
 *
 * - `KvRouterOptions` is user input: every field optional, camelCase.
 * - `KV_ROUTER_DEFAULTS` is the one place defaults live ([v1.5] values).
 * - `resolveKvRouterConfig` validates once (field, value, reason in every
 *   error), applies the deprecated `overlapScoreWeight` mapping, checks
 *   Dynamo's cross-field rules last, and returns a deep-frozen
 *   `KvRouterConfig`. Code downstream never re-validates.
 * - `KV_ROUTER_CONFIG_FIELDS` maps each field to Dynamo's snake_case name and
 *   the kind of value it takes, so a config file loader can accept Dynamo's
 *   spellings (the CLI flags live with the CLI, in src/config).
 * - `parseRouterConfigOverride` validates the smaller per-request override
 *   (its type, `RouterConfigOverride`, is shared vocabulary in src/common).
 *
 * Queue-depth backpressure tiers are pairs `[missingCacheTokensFloor,
 * maxQueuedIslTokensPerWorker]` (Dynamo's `router_queue_by_incoming_missing_isl`).
 */
import type { RouterConfigOverride } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

/** Queue ordering: FCFS (`priority_jump - arrival offset`), WSPT (`(1 + jump) / uncached tokens`), LCFS (experiments). */
export type QueuePolicy = 'fcfs' | 'wspt' | 'lcfs';

/** A slot's prefill load: the booked tokens until the first token, or decaying as it is computed (prefill-decay.ts). */
export type PrefillLoadModel = 'none' | 'decay';

/** A backpressure tier: requests missing at least `floor` cache tokens may queue up to `cap × workers` ISL tokens. */
export type QueueDepthTier = readonly [missingCacheTokensFloor: number, maxQueuedIslTokensPerWorker: number];

/** Resolved, validated, deep-frozen router configuration. */
export interface KvRouterConfig {
  /** Credit per cached device block against the prefill term (`overlap_score_credit`, >= 0). */
  readonly overlapScoreCredit: number;
  /** Shrinks the overlap credit on workers with more queued prefill than the least loaded (`overlap_score_credit_decay`, >= 0). */
  readonly overlapScoreCreditDecay: number;
  /** Weight of the prefill term (`prefill_load_scale`, >= 0). */
  readonly prefillLoadScale: number;
  /** Cost per active request on a worker (`decode_active_request_weight`, >= 0). */
  readonly decodeActiveRequestWeight: number;
  /**
   * Weight of the cached blocks a request would evict from a worker whose KV cache is full, as prefill
   * blocks (kvgate's own knob, `router_kv_pressure_weight`, >= 0; 0 = Dynamo's cost). Needs the
   * worker's advertised KV capacity.
   */
  readonly routerKvPressureWeight: number;
  /**
   * Weight of a worker's KV overflow (kvgate's own knob, `router_kv_overflow_weight`, >= 0; 0 = Dynamo's
   * cost): where the blocks of the requests running on a worker plus the prompt's new blocks exceed its
   * advertised KV capacity, the prompt waits there until running requests finish, so the cache credit it
   * would earn there is void and the overflow blocks are charged as prefill. Needs the advertised capacity.
   */
  readonly routerKvOverflowWeight: number;
  /**
   * Weights of an llm-d-style weighted scorer (kvgate's own knobs, each >= 0; all 0 = the cost model):
   * when any is above 0 a candidate's score is `prefix × cached share of the prompt + queue ×
   * min-max-normalised free prefill queue + kv × (1 − active KV blocks / capacity)`, highest wins
   * (`router_prefix_scorer_weight`, `router_queue_scorer_weight`, `router_kv_utilization_scorer_weight`).
   */
  readonly routerPrefixScorerWeight: number;
  readonly routerQueueScorerWeight: number;
  readonly routerKvUtilizationScorerWeight: number;
  /**
   * LMetric's rule (Zhang et al., OSDI'26) instead of the cost: a candidate scores its prefill tokens
   * if routed there (queued plus the prompt's uncached tokens) times its batch with the request
   * (active requests + 1); the lowest wins (kvgate's own knob, `router_lmetric`).
   */
  readonly routerLmetric: boolean;
  /** Credit per block found only in host (pinned CPU) cache (`host_cache_hit_weight`, >= 0). */
  readonly hostCacheHitWeight: number;
  /** Credit per block found only on disk (`disk_cache_hit_weight`, >= 0). */
  readonly diskCacheHitWeight: number;
  /** Credit per block held by an external shared cache beyond the device overlap (`shared_cache_multiplier`, >= 0). */
  readonly sharedCacheMultiplier: number;
  /** Softmax temperature over range-normalised costs; 0 = argmin (`router_temperature`, >= 0). */
  readonly routerTemperature: number;
  /** Engines publish KV events; false = approximate mode, the router records its own decisions (`use_kv_events`). */
  readonly useKvEvents: boolean;
  /** Track each worker's active prompt blocks (`router_track_active_blocks`). */
  readonly routerTrackActiveBlocks: boolean;
  /** Track generated output blocks; needs `routerTrackActiveBlocks` (`router_track_output_blocks`). */
  readonly routerTrackOutputBlocks: boolean;
  /** Prompt blocks of concurrent requests share KV; false = count every prompt block as new (`router_assume_kv_reuse`). */
  readonly routerAssumeKvReuse: boolean;
  /** Count uncached prompt tokens as prefill load until the first token (`router_track_prefill_tokens`). */
  readonly routerTrackPrefillTokens: boolean;
  /**
   * `decay`: the oldest pending prefill of a slot counts less as the slot computes it, at the slot's measured rate
   * (`router_prefill_load_model`; Dynamo's `aic` is taken as `decay`). Scoring only; the busy thresholds read the booked tokens.
   */
  readonly routerPrefillLoadModel: PrefillLoadModel;
  /** Lifetime of an approximate-mode entry after its last use, seconds (`router_ttl_secs`, > 0). */
  readonly routerTtlSecs: number;
  /** Predict-on-route side index TTL in seconds, or null = off; needs KV events (`router_predicted_ttl_secs`). */
  readonly routerPredictedTtlSecs: number | null;
  /**
   * Park requests while every eligible rank has more than this × max_num_batched_tokens of active prefill;
   * null = no queue (`router_queue_threshold`).
   */
  readonly routerQueueThreshold: number | null;
  /** Queue ordering (`router_queue_policy`). */
  readonly routerQueuePolicy: QueuePolicy;
  /** Queue-depth backpressure tiers, floors ascending from 0; null = unbounded queue (`router_queue_by_incoming_missing_isl`). */
  readonly routerQueueByIncomingMissingIsl: readonly QueueDepthTier[] | null;
  /** A rank is overloaded above this × total_kv_blocks active decode blocks; null = off (`active_decode_blocks_threshold`). */
  readonly activeDecodeBlocksThreshold: number | null;
  /** A rank is overloaded above this many active prefill tokens; null = off (`active_prefill_tokens_threshold`). */
  readonly activePrefillTokensThreshold: number | null;
  /**
   * A rank is overloaded above this × max_num_batched_tokens active prefill tokens; null = off
   * (`active_prefill_tokens_threshold_frac`).
   */
  readonly activePrefillTokensThresholdFrac: number | null;
  /** Requests never freed are force-freed after this many seconds (DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS, > 0). */
  readonly activeRequestExpirySecs: number;
  /**
   * MiB the prefix index of each of the model's pools may hold; past it the least recently matched blocks are
   * evicted. null = unbounded (`router_index_memory_budget_mib`, kvgate's own).
   */
  readonly routerIndexMemoryBudgetMib: number | null;
}

/** User input for the router configuration: any subset of `KvRouterConfig`, plus the deprecated weight. */
export type KvRouterOptions = {
  -readonly [K in keyof KvRouterConfig]?: KvRouterConfig[K];
} & {
  /**
   * Deprecated (`overlap_score_weight`, Dynamo v1.1): maps to `prefillLoadScale`; a weight of 0 also
   * sets `overlapScoreCredit` to 0 (pure load balancing, no index).
   */
  overlapScoreWeight?: number;
};

/**
 * Dynamo v1.5's defaults but for the prefill scale (4, as Dynamo's `--agentic` preset; see `cost.ts`), and
 * kvgate's own knobs (`routerKvPressureWeight` 1, `routerKvOverflowWeight` 2). The `dynamo` router preset
 * gives Dynamo's defaults exactly.
 */
export const KV_ROUTER_DEFAULTS: KvRouterConfig = deepFreeze({
  overlapScoreCredit: 1.0,
  overlapScoreCreditDecay: 0,
  prefillLoadScale: 4.0,
  decodeActiveRequestWeight: 0,
  routerKvPressureWeight: 1,
  routerKvOverflowWeight: 2,
  routerPrefixScorerWeight: 0,
  routerQueueScorerWeight: 0,
  routerKvUtilizationScorerWeight: 0,
  routerLmetric: false,
  hostCacheHitWeight: 0.75,
  diskCacheHitWeight: 0.25,
  sharedCacheMultiplier: 0,
  routerTemperature: 0,
  useKvEvents: true,
  routerTrackActiveBlocks: true,
  routerTrackOutputBlocks: false,
  routerAssumeKvReuse: true,
  routerTrackPrefillTokens: true,
  routerPrefillLoadModel: 'none',
  routerTtlSecs: 120,
  routerPredictedTtlSecs: null,
  routerQueueThreshold: null,
  routerQueuePolicy: 'fcfs',
  routerQueueByIncomingMissingIsl: null,
  activeDecodeBlocksThreshold: null,
  activePrefillTokensThreshold: null,
  activePrefillTokensThresholdFrac: null,
  activeRequestExpirySecs: 300,
  routerIndexMemoryBudgetMib: null,
});

/** The values a field accepts; `resolveKvRouterConfig` checks them, a flag parser reads strings by them. */
export type ConfigFieldKind = 'nonNegative' | 'positive' | 'positiveOrNull' | 'boolean' | 'tiers' | EnumKind;
type EnumKind = 'queuePolicy' | 'prefillLoadModel';

/** A router knob's name: every config field, plus the deprecated weight. */
export type KvRouterKnob = keyof KvRouterConfig | 'overlapScoreWeight';

/** How one config field is spelled in Dynamo, and what it accepts. */
export interface ConfigFieldSpec {
  /**
   * Dynamo's snake_case field name (config files, `--router-config` JSON); for knobs Dynamo sets only
   * through an environment variable, kvgate's snake_case spelling of the field.
   */
  readonly dynamo: string;
  readonly kind: ConfigFieldKind;
}

/** Field name -> Dynamo name and value kind. The single table validation and file loaders use. */
export const KV_ROUTER_CONFIG_FIELDS: Readonly<Record<KvRouterKnob, ConfigFieldSpec>> = deepFreeze({
  overlapScoreCredit: { dynamo: 'overlap_score_credit', kind: 'nonNegative' },
  overlapScoreCreditDecay: { dynamo: 'overlap_score_credit_decay', kind: 'nonNegative' },
  prefillLoadScale: { dynamo: 'prefill_load_scale', kind: 'nonNegative' },
  decodeActiveRequestWeight: { dynamo: 'decode_active_request_weight', kind: 'nonNegative' },
  routerKvPressureWeight: { dynamo: 'router_kv_pressure_weight', kind: 'nonNegative' },
  routerKvOverflowWeight: { dynamo: 'router_kv_overflow_weight', kind: 'nonNegative' },
  routerPrefixScorerWeight: { dynamo: 'router_prefix_scorer_weight', kind: 'nonNegative' },
  routerQueueScorerWeight: { dynamo: 'router_queue_scorer_weight', kind: 'nonNegative' },
  routerKvUtilizationScorerWeight: { dynamo: 'router_kv_utilization_scorer_weight', kind: 'nonNegative' },
  routerLmetric: { dynamo: 'router_lmetric', kind: 'boolean' },
  hostCacheHitWeight: { dynamo: 'host_cache_hit_weight', kind: 'nonNegative' },
  diskCacheHitWeight: { dynamo: 'disk_cache_hit_weight', kind: 'nonNegative' },
  sharedCacheMultiplier: { dynamo: 'shared_cache_multiplier', kind: 'nonNegative' },
  routerTemperature: { dynamo: 'router_temperature', kind: 'nonNegative' },
  useKvEvents: { dynamo: 'use_kv_events', kind: 'boolean' },
  routerTrackActiveBlocks: { dynamo: 'router_track_active_blocks', kind: 'boolean' },
  routerTrackOutputBlocks: { dynamo: 'router_track_output_blocks', kind: 'boolean' },
  routerAssumeKvReuse: { dynamo: 'router_assume_kv_reuse', kind: 'boolean' },
  routerTrackPrefillTokens: { dynamo: 'router_track_prefill_tokens', kind: 'boolean' },
  routerPrefillLoadModel: { dynamo: 'router_prefill_load_model', kind: 'prefillLoadModel' },
  routerTtlSecs: { dynamo: 'router_ttl_secs', kind: 'positive' },
  routerPredictedTtlSecs: { dynamo: 'router_predicted_ttl_secs', kind: 'positiveOrNull' },
  routerQueueThreshold: { dynamo: 'router_queue_threshold', kind: 'positiveOrNull' },
  routerQueuePolicy: { dynamo: 'router_queue_policy', kind: 'queuePolicy' },
  routerQueueByIncomingMissingIsl: { dynamo: 'router_queue_by_incoming_missing_isl', kind: 'tiers' },
  activeDecodeBlocksThreshold: { dynamo: 'active_decode_blocks_threshold', kind: 'positiveOrNull' },
  activePrefillTokensThreshold: { dynamo: 'active_prefill_tokens_threshold', kind: 'positiveOrNull' },
  activePrefillTokensThresholdFrac: { dynamo: 'active_prefill_tokens_threshold_frac', kind: 'positiveOrNull' },
  activeRequestExpirySecs: { dynamo: 'active_request_expiry_secs', kind: 'positive' },
  routerIndexMemoryBudgetMib: { dynamo: 'router_index_memory_budget_mib', kind: 'positiveOrNull' },
  overlapScoreWeight: { dynamo: 'overlap_score_weight', kind: 'nonNegative' },
});

const QUEUE_POLICIES: readonly QueuePolicy[] = ['fcfs', 'wspt', 'lcfs'];

function configError(field: string, value: unknown, reason: string): KvgateError {
  const shown = typeof value === 'string' ? JSON.stringify(value) : safeJson(value);
  return new KvgateError('KVG_ERR_INVALID_CONFIG', `router config: ${field} = ${shown}: ${reason}`, {
    field,
    value: shown,
    reason,
  });
}

function safeJson(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'number' || typeof value === 'bigint') return String(value);
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

function checkValue(field: string, kind: ConfigFieldKind, value: unknown): unknown {
  switch (kind) {
    case 'nonNegative':
    case 'positive':
    case 'positiveOrNull': {
      if (value === null && kind === 'positiveOrNull') return null;
      if (typeof value !== 'number' || !Number.isFinite(value))
        throw configError(field, value, 'must be a finite number');
      if (kind === 'nonNegative' && value < 0) throw configError(field, value, 'must be >= 0');
      if (kind !== 'nonNegative' && value <= 0)
        throw configError(field, value, kind === 'positiveOrNull' ? 'must be > 0 (or null to disable)' : 'must be > 0');
      return value;
    }
    case 'boolean':
      if (typeof value !== 'boolean') throw configError(field, value, 'must be a boolean');
      return value;
    case 'queuePolicy':
      if (!QUEUE_POLICIES.includes(value as QueuePolicy))
        throw configError(field, value, `must be one of ${QUEUE_POLICIES.join(', ')}`);
      return value;
    case 'prefillLoadModel':
      // Dynamo's `aic` predicts the prefill's time with its perf model; kvgate measures it: the same decay.
      if (value === 'aic') return 'decay';
      if (value !== 'none' && value !== 'decay') throw configError(field, value, 'must be one of none, decay (or aic)');
      return value;
    case 'tiers':
      return checkTiers(field, value);
  }
}

function checkTiers(field: string, value: unknown): readonly QueueDepthTier[] | null {
  if (value === null) return null;
  if (!Array.isArray(value) || value.length === 0)
    throw configError(
      field,
      value,
      'must be a non-empty array of [missingCacheTokensFloor, maxQueuedIslTokensPerWorker] pairs, or null',
    );
  const tiers: QueueDepthTier[] = [];
  for (let i = 0; i < value.length; i++) {
    const t: unknown = value[i];
    if (!Array.isArray(t) || t.length !== 2 || !t.every((x) => typeof x === 'number' && Number.isFinite(x))) {
      throw configError(`${field}[${i}]`, t, 'must be a pair of finite numbers [floor, cap]');
    }
    const [floor, cap] = t as [number, number];
    if (i === 0 && floor !== 0) throw configError(`${field}[0]`, t, 'the first floor must be 0');
    if (i > 0 && floor <= tiers[i - 1]![0]) throw configError(`${field}[${i}]`, t, 'floors must be strictly ascending');
    if (!(cap > 0)) throw configError(`${field}[${i}]`, t, 'the cap must be > 0');
    tiers.push([floor, cap]);
  }
  return tiers;
}

/**
 * Validates user options against the defaults and returns the frozen config.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG naming the field, the value and the reason:
 *   unknown keys, wrong types, negative weights, bad tiers, and the cross-field rules
 *   (output-block tracking needs active-block tracking; predict-on-route needs KV events;
 *   backpressure tiers need the queue; the deprecated weight must agree with prefillLoadScale).
 */
export function resolveKvRouterConfig(options: KvRouterOptions = {}): KvRouterConfig {
  if (typeof options !== 'object' || options === null || Array.isArray(options))
    throw configError('(root)', options, 'must be an object');
  const out: Record<string, unknown> = { ...KV_ROUTER_DEFAULTS };
  const given = options as Record<string, unknown>;
  for (const key of Object.keys(given)) {
    // Own properties only: `constructor` or `toString` is an unknown field, not a table entry.
    const spec = Object.hasOwn(KV_ROUTER_CONFIG_FIELDS, key) ? KV_ROUTER_CONFIG_FIELDS[key as KvRouterKnob] : undefined;
    if (spec === undefined) throw configError(key, given[key], 'unknown field');
    if (given[key] === undefined) continue;
    out[key] = checkValue(key, spec.kind, given[key]);
  }
  // Deprecated weight (Dynamo v1.3+): weight x == prefill_load_scale x, and 0 also zeroes the credit.
  const weight = out.overlapScoreWeight as number | undefined;
  delete out.overlapScoreWeight;
  if (weight !== undefined) {
    if (given.prefillLoadScale !== undefined && given.prefillLoadScale !== weight) {
      throw configError(
        'overlapScoreWeight',
        weight,
        `deprecated alias of prefillLoadScale, which is set to ${String(given.prefillLoadScale)}; set only one`,
      );
    }
    out.prefillLoadScale = weight;
    if (weight === 0) {
      if (given.overlapScoreCredit !== undefined && given.overlapScoreCredit !== 0) {
        throw configError(
          'overlapScoreWeight',
          weight,
          'a weight of 0 disables overlap credit, but overlapScoreCredit is set',
        );
      }
      out.overlapScoreCredit = 0;
    }
  }
  const c = out as unknown as KvRouterConfig;
  // Cross-field rules last (Dynamo's, plus kvgate's own where a knob would be silently inert).
  if (c.routerTrackOutputBlocks && !c.routerTrackActiveBlocks) {
    throw configError('routerTrackOutputBlocks', true, 'requires routerTrackActiveBlocks = true');
  }
  if (c.routerPredictedTtlSecs !== null && !c.useKvEvents) {
    throw configError(
      'routerPredictedTtlSecs',
      c.routerPredictedTtlSecs,
      'predict-on-route requires useKvEvents = true (approximate mode already predicts)',
    );
  }
  if (c.routerQueueByIncomingMissingIsl !== null && c.routerQueueThreshold === null) {
    throw configError(
      'routerQueueByIncomingMissingIsl',
      c.routerQueueByIncomingMissingIsl,
      'backpressure tiers require routerQueueThreshold (the queue) to be set',
    );
  }
  return deepFreeze(out) as unknown as KvRouterConfig;
}

/** True when the router should consume engine KV events (Dynamo: `use_kv_events && overlap > 0`). */
export function kvEventsEnabled(config: KvRouterConfig): boolean {
  return config.useKvEvents && config.overlapScoreCredit > 0;
}

/**
 * Builds `KvRouterOptions` from Dynamo's snake_case field names (a `--router-config`
 * JSON or YAML file written for Dynamo).
 * @throws KvgateError KVG_ERR_INVALID_CONFIG for unknown names.
 */
export function kvRouterOptionsFromDynamo(record: Readonly<Record<string, unknown>>): KvRouterOptions {
  const byName = new Map<string, string>();
  for (const [field, spec] of Object.entries(KV_ROUTER_CONFIG_FIELDS)) byName.set(spec.dynamo, field);
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(record)) {
    const field = byName.get(name);
    if (field === undefined) throw configError(name, value, 'unknown Dynamo router field');
    out[field] = value;
  }
  return out as KvRouterOptions;
}

const OVERRIDE_FIELDS: Readonly<
  Record<keyof RouterConfigOverride, { dynamo: string; kind: 'nonNegative' | 'boolean' }>
> = {
  overlapScoreCredit: { dynamo: 'overlap_score_credit', kind: 'nonNegative' },
  prefillLoadScale: { dynamo: 'prefill_load_scale', kind: 'nonNegative' },
  routerTemperature: { dynamo: 'router_temperature', kind: 'nonNegative' },
  assumeKvReuse: { dynamo: 'assume_kv_reuse', kind: 'boolean' },
  trackPrefillTokens: { dynamo: 'track_prefill_tokens', kind: 'boolean' },
  sharedCacheMultiplier: { dynamo: 'shared_cache_multiplier', kind: 'nonNegative' },
};

function overrideError(field: string, value: unknown, reason: string): KvgateError {
  const shown = safeJson(value);
  return new KvgateError('KVG_ERR_INVALID_ARGUMENT', `router_config_override.${field} = ${shown}: ${reason}`, {
    field,
    value: shown,
    reason,
  });
}

/**
 * Validates a per-request override given in camelCase or in Dynamo's snake_case
 * wire names (`router_temperature`), and returns a frozen `RouterConfigOverride`.
 * The deprecated v1.1 `overlap_score_weight` maps to `prefillLoadScale` (0 also zeroes the credit).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT (a client error) naming the field.
 */
export function parseRouterConfigOverride(input: unknown): RouterConfigOverride {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    throw overrideError('(root)', input, 'must be an object');
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(input as Record<string, unknown>)) {
    if (value === undefined || value === null) continue;
    if (key === 'overlapScoreWeight' || key === 'overlap_score_weight') {
      if (typeof value !== 'number' || !Number.isFinite(value) || value < 0)
        throw overrideError(key, value, 'must be a finite number >= 0');
      out.prefillLoadScale = value;
      if (value === 0) out.overlapScoreCredit = 0;
      continue;
    }
    // Own properties only: a key such as `constructor` must not find a prototype member.
    let field = Object.hasOwn(OVERRIDE_FIELDS, key) ? (key as keyof RouterConfigOverride) : undefined;
    if (field === undefined) {
      for (const [f, spec] of Object.entries(OVERRIDE_FIELDS))
        if (spec.dynamo === key) field = f as keyof RouterConfigOverride;
    }
    if (field === undefined) throw overrideError(key, value, 'unknown field');
    const kind = OVERRIDE_FIELDS[field].kind;
    if (kind === 'boolean' && typeof value !== 'boolean') throw overrideError(key, value, 'must be a boolean');
    if (kind === 'nonNegative' && (typeof value !== 'number' || !Number.isFinite(value) || value < 0)) {
      throw overrideError(key, value, 'must be a finite number >= 0');
    }
    out[field] = value;
  }
  return Object.freeze(out) as RouterConfigOverride;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}
