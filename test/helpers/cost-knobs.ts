import type { CostKnobs } from '../../src/core/cost.js';

/**
 * The pure cost functions' knobs at Dynamo v1.5's defaults (credit 1, no decay, prefill scale 1, no
 * per-request weight, no tier credits, prefill tracked, no decode exception, neither of kvgate's own
 * terms), with `overrides` laid over them.
 */
export function dynamoCostKnobs(overrides: Partial<CostKnobs> = {}): CostKnobs {
  return {
    overlapScoreCredit: 1,
    overlapScoreCreditDecay: 0,
    prefillLoadScale: 1,
    decodeActiveRequestWeight: 0,
    hostCacheHitWeight: 0,
    diskCacheHitWeight: 0,
    sharedCacheMultiplier: 0,
    trackPrefillTokens: true,
    decodeException: false,
    ...overrides,
  };
}
