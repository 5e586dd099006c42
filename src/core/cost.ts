/**
 * Dynamo's worker cost ("logit"; lower is better), spec section 4.2.
 *
 * [v1.5], per candidate (worker, dp_rank):
 *
 *   raw_prefill_blocks = (active_prefill_tokens + isl) / block_size        (0 when not tracking prefill)
 *   decay  = 1 / (1 + credit_decay × excess)                              (tracking prefill and credit_decay > 0, else 1)
 *   excess = ((active_prefill_tokens − min over eligible) / block_size) / max(1, ceil(isl / block_size))
 *   credit = overlap_score_credit × decay × device_overlap_blocks
 *          + host_cache_hit_weight × host_overlap_blocks
 *          + disk_cache_hit_weight × disk_overlap_blocks
 *          + shared_cache_multiplier × shared_hits_beyond_device
 *   cost   = prefill_load_scale × max(0, raw_prefill_blocks − credit)
 *          + potential_decode_blocks + decode_active_request_weight × active_requests
 *   cost  *= Π preferred-taint factors the worker carries    (routing constraints; applied by the scheduler)
 *
 * Decode exception (conditional disaggregation): a decode router that does not
 * track prefill and gives credit scores `max(0, potential_decode_blocks − credit)
 * + decode_active_request_weight × active_requests`.
 *
 * With default knobs (credit 1, no decay, scale 1, no request weight, no tier
 * hits) this equals the [v1.1] formula `weight × potential_prefill_tokens /
 * block_size + potential_decode_blocks` (pinned by test/core/cost.test.ts).
 *
 * Tiered overlaps are counted beyond what a faster tier already holds: a block
 * both on device and in host cache earns only the device credit [inferred].
 */
import type { KvRouterConfig } from './config.js';

/** The scalar knobs of the cost model (as in KvRouterConfig) after any per-request override. */
export type CostKnobs = Pick<KvRouterConfig,
  'overlapScoreCredit' | 'overlapScoreCreditDecay' | 'prefillLoadScale' | 'decodeActiveRequestWeight'
  | 'hostCacheHitWeight' | 'diskCacheHitWeight' | 'sharedCacheMultiplier'> & {
  readonly trackPrefillTokens: boolean;
  /** Apply the decode exception (decode router, no prefill tracking, credit > 0). */
  readonly decodeException: boolean;
};

/** What the cost model needs to know about one candidate. */
export interface CandidateLoad {
  readonly activePrefillTokens: number;
  /** Active blocks plus the request's blocks not already active there. */
  readonly potentialDecodeBlocks: number;
  readonly activeRequests: number;
  /** Effective device overlap (max of the event index and the predict-on-route index). */
  readonly deviceOverlapBlocks: number;
  readonly hostOverlapBlocks?: number;
  readonly diskOverlapBlocks?: number;
  readonly sharedBeyondDeviceBlocks?: number;
}

/** The request-wide inputs of the cost model. */
export interface CostRequest {
  readonly isl: number;
  readonly blockSize: number;
  /** Minimum active prefill tokens over the eligible candidates (for credit decay). */
  readonly minActivePrefillTokens: number;
}

/**
 * The [v1.5] cost of one candidate, in scalars so the scheduler's loop inlines it.
 * `requestBlocks` is `ceil(isl / blockSize)`.
 */
export function costOf(
  k: CostKnobs, isl: number, blockSize: number, requestBlocks: number, minActivePrefill: number,
  activePrefill: number, potentialDecodeBlocks: number, activeRequests: number,
  deviceOverlap: number, hostOverlap: number, diskOverlap: number, sharedBeyond: number,
): number {
  let decay = 1;
  if (k.trackPrefillTokens && k.overlapScoreCreditDecay > 0) {
    const excess = (activePrefill - minActivePrefill) / blockSize / (requestBlocks > 1 ? requestBlocks : 1);
    decay = 1 / (1 + k.overlapScoreCreditDecay * excess);
  }
  const credit = k.overlapScoreCredit * decay * deviceOverlap + k.hostCacheHitWeight * hostOverlap
    + k.diskCacheHitWeight * diskOverlap + k.sharedCacheMultiplier * sharedBeyond;
  const requestTerm = k.decodeActiveRequestWeight * activeRequests;
  if (k.decodeException) {
    const d = potentialDecodeBlocks - credit;
    return (d > 0 ? d : 0) + requestTerm;
  }
  const raw = k.trackPrefillTokens ? (activePrefill + isl) / blockSize : 0;
  const p = raw - credit;
  return k.prefillLoadScale * (p > 0 ? p : 0) + potentialDecodeBlocks + requestTerm;
}

/** The [v1.5] cost of one candidate (object form of `costOf`, for callers off the hot path). */
export function candidateCost(knobs: CostKnobs, req: CostRequest, c: CandidateLoad): number {
  return costOf(knobs, req.isl, req.blockSize, Math.ceil(req.isl / req.blockSize), req.minActivePrefillTokens,
    c.activePrefillTokens, c.potentialDecodeBlocks, c.activeRequests, c.deviceOverlapBlocks,
    c.hostOverlapBlocks ?? 0, c.diskOverlapBlocks ?? 0, c.sharedBeyondDeviceBlocks ?? 0);
}

/**
 * The [v1.1] cost: `overlap_score_weight × potential_prefill_tokens / block_size + potential_decode_blocks`,
 * with `potential_prefill_tokens = active + max(0, isl − overlap × block_size)` when tracking prefill, else active.
 */
export function costV11(overlapScoreWeight: number, isl: number, blockSize: number, trackPrefillTokens: boolean,
  activePrefillTokens: number, overlapBlocks: number, potentialDecodeBlocks: number): number {
  const uncached = Math.max(0, isl - overlapBlocks * blockSize);
  const potentialPrefill = trackPrefillTokens ? activePrefillTokens + uncached : activePrefillTokens;
  return overlapScoreWeight * potentialPrefill / blockSize + potentialDecodeBlocks;
}
