/**
 * The router knobs' command-line spellings: Dynamo's flag (and environment
 * variable) for each field of `KvRouterConfig`, and the parser that turns flag
 * values into `KvRouterOptions`. Core keeps the fields' Dynamo names and kinds
 * (what validation needs); this table adds only what a CLI needs, and is
 * joined with core's table in `ROUTER_FLAG_FIELDS`.
 *
 * This file is mostly a table (one row per knob).
 */
import {
  KV_ROUTER_CONFIG_FIELDS,
  type ConfigFieldKind,
  type ConfigFieldSpec,
  type KvRouterKnob,
  type KvRouterOptions,
} from '../core/index.js';
import { KvgateError } from '../errors/index.js';

/** How one knob is spelled on Dynamo's command line. */
interface RouterFlagSpec {
  /** Dynamo's CLI flag, or null when Dynamo only has an environment variable. */
  readonly flag: string | null;
  /** For booleans with a separate negative flag (`--no-router-kv-events`). */
  readonly negativeFlag?: string;
  /** Dynamo's environment variable, where it has one. */
  readonly env?: string;
  /** One line for `kvgate serve --help`: what the knob does (the default is appended from core's defaults). */
  readonly help: string;
}

/** A knob as the CLI sees it: its Dynamo name and kind (core's table) and its flags. */
export interface RouterFlagField extends ConfigFieldSpec, RouterFlagSpec {}

const FLAGS: Readonly<Record<KvRouterKnob, RouterFlagSpec>> = {
  overlapScoreCredit: {
    flag: '--router-kv-overlap-score-credit',
    help: 'credit per cached device block against the prefill cost',
  },
  overlapScoreCreditDecay: {
    flag: '--router-kv-overlap-score-credit-decay',
    help: 'shrink that credit on workers with more queued prefill',
  },
  prefillLoadScale: { flag: '--router-prefill-load-scale', help: 'weight of the prefill (uncached tokens) cost' },
  decodeActiveRequestWeight: {
    flag: '--router-decode-active-request-weight',
    help: 'cost per request already active on a worker',
  },
  routerKvPressureWeight: {
    flag: '--router-kv-pressure-weight',
    help: "weight of the cached blocks a request would evict from a worker's full KV cache (kvgate's own)",
  },
  routerKvOverflowWeight: {
    flag: '--router-kv-overflow-weight',
    help: "where running requests' KV and the prompt's exceed a worker's capacity: its credit void, the overflow charged (kvgate's own)",
  },
  routerPrefixScorerWeight: {
    flag: '--router-prefix-scorer-weight',
    help: 'weighted scorer (llm-d style; any weight > 0 replaces the cost): weight of the cached share of the prompt',
  },
  routerQueueScorerWeight: {
    flag: '--router-queue-scorer-weight',
    help: "weighted scorer: weight of the worker's free prefill queue, min-max normalised over the candidates",
  },
  routerKvUtilizationScorerWeight: {
    flag: '--router-kv-utilization-scorer-weight',
    help: "weighted scorer: weight of the worker's free KV share (1 - active blocks / capacity)",
  },
  routerLmetric: {
    flag: '--router-lmetric',
    negativeFlag: '--no-router-lmetric',
    help: "LMetric's rule instead of the cost: prefill tokens if routed there x (active requests + 1)",
  },
  hostCacheHitWeight: {
    flag: '--router-host-cache-hit-weight',
    help: 'credit per block found only in host (CPU) cache',
  },
  diskCacheHitWeight: { flag: '--router-disk-cache-hit-weight', help: 'credit per block found only on disk' },
  sharedCacheMultiplier: {
    flag: '--shared-cache-multiplier',
    help: 'credit per block held by a shared external cache',
  },
  routerTemperature: { flag: '--router-temperature', help: 'softmax temperature over costs; 0 = always the cheapest' },
  useKvEvents: {
    flag: '--router-kv-events',
    negativeFlag: '--no-router-kv-events',
    env: 'DYN_ROUTER_USE_KV_EVENTS',
    help: "read the engines' KV events; off = approximate mode",
  },
  routerTrackActiveBlocks: {
    flag: '--router-track-active-blocks',
    negativeFlag: '--no-router-track-active-blocks',
    help: 'count the active prompt blocks of each worker as load',
  },
  routerTrackOutputBlocks: {
    flag: '--router-track-output-blocks',
    negativeFlag: '--no-router-track-output-blocks',
    help: 'also count generated output blocks as load',
  },
  routerAssumeKvReuse: {
    flag: '--router-assume-kv-reuse',
    negativeFlag: '--no-router-assume-kv-reuse',
    help: 'concurrent prompts on a worker share their prefix blocks',
  },
  routerTrackPrefillTokens: {
    flag: '--router-track-prefill-tokens',
    negativeFlag: '--no-router-track-prefill-tokens',
    help: 'count uncached prompt tokens as load until the 1st token',
  },
  routerPrefillLoadModel: {
    flag: '--router-prefill-load-model',
    help: "a worker's prefill load: none (booked tokens until the 1st token) | decay (shrinking as it is computed; aic = decay)",
  },
  routerTtlSecs: { flag: '--router-ttl-secs', help: 'approximate mode: a cached-prefix entry lives this long' },
  routerPredictedTtlSecs: {
    flag: '--router-predicted-ttl-secs',
    help: 'predict blocks on routing, kept this long (none = off)',
  },
  routerQueueThreshold: {
    flag: '--router-queue-threshold',
    help: 'queue while every worker has more prefill than this x its step budget (none = off)',
  },
  routerQueuePolicy: { flag: '--router-queue-policy', help: 'queue order: fcfs | wspt | lcfs' },
  routerQueueByIncomingMissingIsl: {
    flag: '--router-queue-by-incoming-missing-isl',
    help: 'queue-depth tiers, JSON [[floor, cap], ...] (none = unbounded)',
  },
  activeDecodeBlocksThreshold: {
    flag: '--active-decode-blocks-threshold',
    help: 'a worker is busy above this x its KV blocks in active decode (none = off)',
  },
  activePrefillTokensThreshold: {
    flag: '--active-prefill-tokens-threshold',
    help: 'a worker is busy above this many active prefill tokens (none = off)',
  },
  activePrefillTokensThresholdFrac: {
    flag: '--active-prefill-tokens-threshold-frac',
    help: 'a worker is busy above this x its step budget in active prefill (none = off)',
  },
  activeRequestExpirySecs: {
    flag: null,
    env: 'DYN_ROUTER_ACTIVE_REQUEST_EXPIRY_SECS',
    help: 'force-free requests never finished after this long',
  },
  routerIndexMemoryBudgetMib: {
    flag: '--router-index-memory-budget-mib',
    help: 'MiB the prefix index may hold; past it the least recently matched blocks go (none = unbounded)',
  },
  overlapScoreWeight: {
    flag: '--router-kv-overlap-score-weight',
    env: 'DYN_ROUTER_KV_OVERLAP_SCORE_WEIGHT',
    help: 'deprecated: sets the prefill weight (0 = load only)',
  },
};

/** Field name -> Dynamo name, value kind, CLI flags. The single table the CLI reads router flags from. */
export const ROUTER_FLAG_FIELDS: Readonly<Record<KvRouterKnob, RouterFlagField>> = Object.freeze(
  Object.fromEntries(
    (Object.keys(FLAGS) as KvRouterKnob[]).map((k) => [
      k,
      Object.freeze({ ...KV_ROUTER_CONFIG_FIELDS[k], ...FLAGS[k] }),
    ]),
  ) as Record<KvRouterKnob, RouterFlagField>,
);

/**
 * Builds `KvRouterOptions` from parsed CLI flags keyed by Dynamo's flag names
 * (`{'--router-temperature': '0.5', '--no-router-kv-events': true}`). String
 * values are parsed by the field's kind; `none`/`null` disables nullable knobs;
 * tiers are JSON (`[[0, 8192], [4096, 2048]]`). Validate the result with
 * `resolveKvRouterConfig`.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG for unknown flags and unparsable values (naming the flag).
 */
export function kvRouterOptionsFromFlags(flags: Readonly<Record<string, string | boolean>>): KvRouterOptions {
  const byFlag = new Map<string, [string, RouterFlagField, boolean]>();
  for (const [field, spec] of Object.entries(ROUTER_FLAG_FIELDS)) {
    if (spec.flag !== null) byFlag.set(spec.flag, [field, spec, true]);
    if (spec.negativeFlag !== undefined) byFlag.set(spec.negativeFlag, [field, spec, false]);
  }
  const out: Record<string, unknown> = {};
  for (const [flag, raw] of Object.entries(flags)) {
    const hit = byFlag.get(flag);
    if (hit === undefined) throw flagValueError(flag, raw, 'unknown router flag');
    const [field, spec, positive] = hit;
    out[field] = parseFlagValue(flag, spec.kind, raw, positive);
  }
  return out as KvRouterOptions;
}

function parseFlagValue(flag: string, kind: ConfigFieldKind, raw: string | boolean, positive: boolean): unknown {
  if (kind === 'boolean') {
    if (typeof raw === 'boolean') return positive ? raw : !raw;
    if (raw === 'true' || raw === '1') return positive;
    if (raw === 'false' || raw === '0') return !positive;
    throw flagValueError(flag, raw, 'expects true or false');
  }
  if (typeof raw === 'boolean') throw flagValueError(flag, raw, 'expects a value');
  if (kind === 'queuePolicy' || kind === 'prefillLoadModel') return raw;
  if ((kind === 'positiveOrNull' || kind === 'tiers') && (raw === 'none' || raw === 'null')) return null;
  if (kind === 'tiers') {
    try {
      return JSON.parse(raw) as unknown;
    } catch {
      throw flagValueError(flag, raw, 'expects JSON such as [[0, 8192], [4096, 2048]]');
    }
  }
  const n = Number(raw);
  if (raw.trim() === '' || Number.isNaN(n)) throw flagValueError(flag, raw, 'expects a number');
  return n;
}

/** The same error shape as core's config validation (`field`, `value`, `reason`), naming the flag. */
function flagValueError(flag: string, raw: string | boolean, reason: string): KvgateError {
  const shown = typeof raw === 'string' ? JSON.stringify(raw) : String(raw);
  return new KvgateError('KVG_ERR_INVALID_CONFIG', `router config: ${flag} = ${shown}: ${reason}`, {
    field: flag,
    value: shown,
    reason,
  });
}
