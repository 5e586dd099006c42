/**
 * The worker cost ("logit"; lower is better), as Dynamo v1.5 computes it.
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
 *   cost   = prefill_load_scale × (max(0, raw_prefill_blocks − credit) + kv_pressure_weight × evicted_blocks
 *                                   + kv_overflow_weight × (credit + overflow_blocks) when overflow_blocks > 0)
 *          (overflow_blocks beyond the least of any candidate's: the KV-overflow paragraph below)
 *          + potential_decode_blocks + decode_active_request_weight × active_requests
 *   cost  *= Π preferred-taint factors the worker carries    (routing constraints; applied by the scheduler)
 *
 * Decode exception (conditional disaggregation): a decode router that does not
 * track prefill and gives credit scores `max(0, potential_decode_blocks − credit)
 * + decode_active_request_weight × active_requests`.
 *
 * With Dynamo's default knobs (credit 1, no decay, scale 1, no request weight,
 * no tier hits; kvgate's `dynamo` preset) this equals the [v1.1] formula
 * `weight × potential_prefill_tokens / block_size + potential_decode_blocks`
 * (pinned by test/core/cost.test.ts).
 *
 * Tiered overlaps are counted beyond what a faster tier already holds: a block
 * both on device and in host cache earns only the device credit [inferred].
 *
 * Cache pressure (kvgate's own term; `kv_pressure_weight` 0 gives Dynamo's
 * cost): `evicted_blocks = max(0, held + request_blocks − device_overlap −
 * capacity)` are the cached blocks of other contexts a worker whose KV cache
 * is full must drop to take this prompt (held: the blocks the router's index
 * holds for it; capacity: its advertised KV blocks). Agent sessions come back
 * for their context, so a dropped block is prefill work moved to a later
 * request: it is charged like one, at the prefill scale. A paused session's
 * blocks are held, not active: they cost nothing as load, and only what a
 * newcomer would evict of them is charged. Without a full cache (or a known
 * capacity) the term is 0.
 *
 * KV overflow (kvgate's own term; `kv_overflow_weight` 0 gives Dynamo's cost): `overflow_blocks =
 * potential_decode_blocks − capacity`, the blocks of the requests running on a worker plus the prompt's
 * blocks not active there, beyond its advertised KV capacity. An engine admits a prompt only when its KV
 * fits, so there the prompt waits until running requests finish and free the overflow: seconds to
 * minutes for agent requests that decode thousands of tokens, against a few seconds to prefill even a
 * 150k-token prompt cold on another engine. So where it overflows, the prompt's cached blocks earn
 * nothing (at weight 1 the credit is void: the worker is charged the whole prompt's prefill) and the
 * overflow is charged as prefill on top (kvgate's default weight, 2, charges the credit twice). Without
 * an overflow (or a known capacity) the term is 0. On the agentic workload's heavy regime (BENCHMARKS.md,
 * "Routing agents") it is what brings kvgate's p99 TTFT under the peers'. The scheduler passes each
 * candidate's overflow beyond the least of any candidate's (block counting only): where every candidate
 * overflows, the prompt waits for KV wherever it goes, so voiding every credit at once would throw its
 * cached context away for nothing; counted relative to the least, the candidates' caches weigh against
 * each other again (on an overcommitted fleet, 12 engines, mean TTFT 0.87x, hit rate 87 % to 90 % of the
 * pooled LRU's; nothing changes while some candidate fits).
 *
 * kvgate's default prefill scale is 4, not Dynamo's 1 (as Dynamo's own `--agentic` preset sets it): a
 * block of a running request is charged like a block of prefill, and on measured GPUs it costs a new
 * prompt far less, so at 1 a session's cached engine loses its turns to any engine with fewer requests
 * running (BENCHMARKS.md, "Routing agents").
 */
import type { KvRouterConfig } from './config.js';

/** The scalar knobs of the cost model (as in KvRouterConfig) after any per-request override. */
export type CostKnobs = Pick<
  KvRouterConfig,
  | 'overlapScoreCredit'
  | 'overlapScoreCreditDecay'
  | 'prefillLoadScale'
  | 'decodeActiveRequestWeight'
  | 'hostCacheHitWeight'
  | 'diskCacheHitWeight'
  | 'sharedCacheMultiplier'
> & {
  /** Weight of evicted blocks (`routerKvPressureWeight`); absent = 0, Dynamo's cost. */
  readonly kvPressureWeight?: number;
  /** Weight of a worker's KV overflow (`routerKvOverflowWeight`); absent = 0, Dynamo's cost. */
  readonly kvOverflowWeight?: number;
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
  /** Cached blocks of other contexts the worker would evict to take the prompt (0 below a full cache). */
  readonly evictedBlocks?: number;
  /** Running requests' blocks plus the prompt's new ones beyond the advertised capacity (0 below it). */
  readonly overflowBlocks?: number;
}

/** The request-wide inputs of the cost model. */
export interface CostRequest {
  readonly isl: number;
  readonly blockSize: number;
  /** Minimum active prefill tokens over the eligible candidates (for credit decay). */
  readonly minActivePrefillTokens: number;
}

/**
 * One candidate's inputs to the cost model, named. The scheduler creates one
 * per decision (`newCostInput`) and overwrites it for every candidate, so
 * scoring allocates nothing per candidate.
 */
export interface CostInput {
  /** Prompt length in tokens. */
  isl: number;
  blockSize: number;
  /** `ceil(isl / blockSize)`. */
  requestBlocks: number;
  /** Minimum active prefill tokens over the eligible candidates (for credit decay). */
  minActivePrefill: number;
  activePrefill: number;
  /** Active blocks plus the request's blocks not already active there. */
  potentialDecodeBlocks: number;
  activeRequests: number;
  /** Effective device overlap in blocks. */
  deviceOverlap: number;
  /** Blocks found only in host cache, beyond the device overlap. */
  hostOverlap: number;
  /** Blocks found only on disk, beyond the faster tiers. */
  diskOverlap: number;
  /** Shared-cache blocks beyond the device overlap. */
  sharedBeyond: number;
  /** Cached blocks the worker would evict to take the prompt (see the cache-pressure term). */
  evicted: number;
  /** Active blocks plus the prompt's new blocks beyond the advertised capacity (see the KV-overflow term). */
  overflow: number;
}

/** A zeroed `CostInput` (every field present, so the object keeps one shape as it is refilled). */
export function newCostInput(): CostInput {
  return {
    isl: 0,
    blockSize: 1,
    requestBlocks: 0,
    minActivePrefill: 0,
    activePrefill: 0,
    potentialDecodeBlocks: 0,
    activeRequests: 0,
    deviceOverlap: 0,
    hostOverlap: 0,
    diskOverlap: 0,
    sharedBeyond: 0,
    evicted: 0,
    overflow: 0,
  };
}

/**
 * The credit's decay for a candidate queued beyond the least queued one: `1 / (1 + credit_decay × excess)`,
 * 1 unless tracking prefill with a positive decay.
 */
export function creditDecay(
  k: CostKnobs,
  activePrefill: number,
  minActivePrefill: number,
  blockSize: number,
  requestBlocks: number,
): number {
  if (!k.trackPrefillTokens || !(k.overlapScoreCreditDecay > 0)) return 1;
  const excess = (activePrefill - minActivePrefill) / blockSize / (requestBlocks > 1 ? requestBlocks : 1);
  return 1 / (1 + k.overlapScoreCreditDecay * excess);
}

/** The credit in blocks: the device overlap at its (decayed) credit and the tier hits, each at its weight. */
export function creditOf(
  k: CostKnobs,
  decay: number,
  deviceOverlap: number,
  hostOverlap: number,
  diskOverlap: number,
  sharedBeyond: number,
): number {
  return (
    k.overlapScoreCredit * decay * deviceOverlap +
    k.hostCacheHitWeight * hostOverlap +
    k.diskCacheHitWeight * diskOverlap +
    k.sharedCacheMultiplier * sharedBeyond
  );
}

/**
 * The [v1.5] cost of one candidate from its credit in blocks. Scalars, so the scheduler's scoring loop
 * (which inlines it) keeps every input in registers; `costOf` is the same formula over a `CostInput`.
 */
export function costFromCredit(
  k: CostKnobs,
  creditBlocks: number,
  isl: number,
  blockSize: number,
  activePrefill: number,
  potentialDecodeBlocks: number,
  activeRequests: number,
  evicted: number,
  overflow: number,
): number {
  const requestTerm = k.decodeActiveRequestWeight * activeRequests;
  if (k.decodeException) {
    const d = potentialDecodeBlocks - creditBlocks;
    return (d > 0 ? d : 0) + requestTerm;
  }
  const raw = k.trackPrefillTokens ? (activePrefill + isl) / blockSize : 0;
  const p = raw - creditBlocks;
  const pressure = evicted > 0 ? (k.kvPressureWeight ?? 0) * evicted : 0;
  const waiting = overflow > 0 ? (k.kvOverflowWeight ?? 0) * (creditBlocks + overflow) : 0;
  return k.prefillLoadScale * ((p > 0 ? p : 0) + pressure + waiting) + potentialDecodeBlocks + requestTerm;
}

/**
 * The credit in blocks: the device overlap (decayed for a candidate queued beyond the least queued
 * one) and the tier hits, each at its weight.
 */
export function creditBlocks(k: CostKnobs, x: Readonly<CostInput>): number {
  const decay = creditDecay(k, x.activePrefill, x.minActivePrefill, x.blockSize, x.requestBlocks);
  return creditOf(k, decay, x.deviceOverlap, x.hostOverlap, x.diskOverlap, x.sharedBeyond);
}

/** The [v1.5] cost of one candidate. */
function costOf(k: CostKnobs, x: Readonly<CostInput>): number {
  return costFromCredit(
    k,
    creditBlocks(k, x),
    x.isl,
    x.blockSize,
    x.activePrefill,
    x.potentialDecodeBlocks,
    x.activeRequests,
    x.evicted,
    x.overflow,
  );
}

/** The [v1.5] cost of one candidate from request-wide and per-candidate records (off the hot path: tests, explanations). */
export function candidateCost(knobs: CostKnobs, req: CostRequest, c: CandidateLoad): number {
  return costOf(knobs, {
    isl: req.isl,
    blockSize: req.blockSize,
    requestBlocks: Math.ceil(req.isl / req.blockSize),
    minActivePrefill: req.minActivePrefillTokens,
    activePrefill: c.activePrefillTokens,
    potentialDecodeBlocks: c.potentialDecodeBlocks,
    activeRequests: c.activeRequests,
    deviceOverlap: c.deviceOverlapBlocks,
    hostOverlap: c.hostOverlapBlocks ?? 0,
    diskOverlap: c.diskOverlapBlocks ?? 0,
    sharedBeyond: c.sharedBeyondDeviceBlocks ?? 0,
    evicted: c.evictedBlocks ?? 0,
    overflow: c.overflowBlocks ?? 0,
  });
}

/**
 * The [v1.1] cost: `overlap_score_weight × potential_prefill_tokens / block_size + potential_decode_blocks`,
 * with `potential_prefill_tokens = active + max(0, isl − overlap × block_size)` when tracking prefill, else active.
 */
export function costV11(
  overlapScoreWeight: number,
  isl: number,
  blockSize: number,
  trackPrefillTokens: boolean,
  activePrefillTokens: number,
  overlapBlocks: number,
  potentialDecodeBlocks: number,
): number {
  const uncached = Math.max(0, isl - overlapBlocks * blockSize);
  const potentialPrefill = trackPrefillTokens ? activePrefillTokens + uncached : activePrefillTokens;
  return (overlapScoreWeight * potentialPrefill) / blockSize + potentialDecodeBlocks;
}
