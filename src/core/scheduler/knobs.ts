/**
 * The effective knobs of one request: the router config with the request's
 * `RouterConfigOverride` applied, resolved once per decision and used by both
 * scoring and booking, so the two cannot disagree about what was overridden.
 */
import type { RouterConfigOverride, WorkerRole } from '../../common/index.js';
import type { KvRouterConfig } from '../config.js';
import type { CostKnobs } from '../cost.js';

export interface EffectiveKnobs extends CostKnobs {
  /** Softmax temperature; 0 = argmin. */
  readonly temperature: number;
  /** Prompt blocks of concurrent requests share KV. */
  readonly assumeKvReuse: boolean;
  /** Track each slot's active prompt blocks (router config only; not overridable). */
  readonly trackActiveBlocks: boolean;
  /** Book the prompt's blocks as shared with other requests: tracking active blocks, assuming reuse, and the prompt has hashes. */
  readonly shareable: boolean;
  /** The weighted scorer's weights (prefix, queue, KV utilisation); all 0 = score with the cost model. */
  readonly scorer: WeightedScorer | null;
  /** Score with LMetric's product instead of the cost. */
  readonly lmetric: boolean;
}

/** An llm-d-style weighted scorer's weights. */
export interface WeightedScorer {
  readonly prefix: number;
  readonly queue: number;
  readonly kvUtilization: number;
}

/**
 * Resolves the knobs for one request. `tiered` (tier indexes matched) turns
 * on the host, disk and shared-cache credits; without it they are 0.
 */
export function effectiveKnobs(
  c: KvRouterConfig,
  role: WorkerRole,
  o: RouterConfigOverride | undefined,
  hasHashes: boolean,
  tiered: boolean,
): EffectiveKnobs {
  const trackPrefillTokens = o?.trackPrefillTokens ?? c.routerTrackPrefillTokens;
  const assumeKvReuse = o?.assumeKvReuse ?? c.routerAssumeKvReuse;
  const overlapScoreCredit = o?.overlapScoreCredit ?? c.overlapScoreCredit;
  return {
    overlapScoreCredit,
    overlapScoreCreditDecay: c.overlapScoreCreditDecay,
    prefillLoadScale: o?.prefillLoadScale ?? c.prefillLoadScale,
    decodeActiveRequestWeight: c.decodeActiveRequestWeight,
    kvPressureWeight: c.routerKvPressureWeight,
    kvOverflowWeight: c.routerKvOverflowWeight,
    hostCacheHitWeight: tiered ? c.hostCacheHitWeight : 0,
    diskCacheHitWeight: tiered ? c.diskCacheHitWeight : 0,
    sharedCacheMultiplier: tiered ? (o?.sharedCacheMultiplier ?? c.sharedCacheMultiplier) : 0,
    trackPrefillTokens,
    // Conditional disaggregation: a decode router that does not track prefill scores decode blocks against the credit.
    decodeException: role === 'decode' && !trackPrefillTokens && overlapScoreCredit > 0,
    temperature: o?.routerTemperature ?? c.routerTemperature,
    assumeKvReuse,
    trackActiveBlocks: c.routerTrackActiveBlocks,
    shareable: c.routerTrackActiveBlocks && assumeKvReuse && hasHashes,
    scorer:
      c.routerPrefixScorerWeight + c.routerQueueScorerWeight + c.routerKvUtilizationScorerWeight > 0
        ? {
            prefix: c.routerPrefixScorerWeight,
            queue: c.routerQueueScorerWeight,
            kvUtilization: c.routerKvUtilizationScorerWeight,
          }
        : null,
    lmetric: c.routerLmetric,
  };
}

/**
 * The cost model's share of `k`, as a fresh object. The scoring loop takes its
 * own copy because a local object that never escapes is kept in registers by
 * the optimiser, while the shared value (booking reads it too) would be
 * re-read for every candidate.
 */
export function costKnobsOf(k: EffectiveKnobs): CostKnobs {
  return {
    overlapScoreCredit: k.overlapScoreCredit,
    overlapScoreCreditDecay: k.overlapScoreCreditDecay,
    prefillLoadScale: k.prefillLoadScale,
    decodeActiveRequestWeight: k.decodeActiveRequestWeight,
    kvPressureWeight: k.kvPressureWeight ?? 0,
    kvOverflowWeight: k.kvOverflowWeight ?? 0,
    hostCacheHitWeight: k.hostCacheHitWeight,
    diskCacheHitWeight: k.diskCacheHitWeight,
    sharedCacheMultiplier: k.sharedCacheMultiplier,
    trackPrefillTokens: k.trackPrefillTokens,
    decodeException: k.decodeException,
  };
}
