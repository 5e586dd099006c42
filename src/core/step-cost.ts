/**
 * The worker cost in the engine's own time units: milliseconds predicted from
 * its measured step profile (kvgate's, used instead of the block-counting
 * [v1.5] cost of `cost.ts` when the router knows the engines' step profile).
 *
 * Why: the block-counting cost charges every KV block a running request holds
 * like a block of prefill, so one 60k-token request decoding on an engine
 * outweighs a whole cached context there. On measured GPUs a running request
 * costs a new prompt far less (H100, Llama-3.1-8B shape: one decode step of
 * 8 x 60k tokens is 37 ms against 29 ms for one; a prefill block about
 * 0.5 ms), until the engine's KV cache is full: then the prompt waits for
 * running requests to finish, for seconds. Predicting the time to first token
 * from the profile weighs each of these by what it costs.
 *
 * Per candidate, with `T = queued prefill tokens + the prompt's uncached
 * tokens` (uncached: after the overlap credits of the [v1.5] cost) and
 * `steps = ceil(T / max_num_batched_tokens)`:
 *
 *   prefill_ms   = prefill(queued tokens over the running requests' mean context)
 *                  + prefill(uncached tokens over the cached context)
 *                  (chunked by max_num_batched_tokens, each chunk over the context before it)
 *   interfere_ms = steps × (decode_ms(b, L) − decode_ms(1, 0)): the running requests' decode
 *                  (b requests, L mean context) carried by every prefill step
 *   evict_ms     = kv_pressure_weight × prefill(evicted blocks): the cached contexts a full worker
 *                  drops to take the prompt, prefilled again when their sessions come back
 *   wait_ms      = when active blocks + the prompt's new blocks exceed the capacity (`overflow`, as the
 *                  KV-overflow term of cost.ts counts it): the time until enough running requests
 *                  finish to free the overflow, k of b, each leaving at the
 *                  rate of the measured mean service time S (memoryless: S × Σ_{i<k} 1/(b − i));
 *                  before any request has finished, the overflow's prefill time
 *   cost_ms      = prefill_load_scale × (prefill_ms + evict_ms) + interfere_ms + wait_ms
 *                  + decode_active_request_weight × b × (one block's prefill ms)
 *
 * With no step profile the router keeps the [v1.5] cost exactly.
 */
import { creditBlocks, type CostInput, type CostKnobs } from './cost.js';

/** An engine's measured step times (the mocker's perf profiles: `profiles/*.json`). */
export interface StepCostModel {
  /** GPU ms of one step prefilling `newTokens` over `cachedTokens` of context. */
  prefillMs(cachedTokens: number, newTokens: number): number;
  /** GPU ms of one decode step of `batch` sequences of `context` tokens each. */
  decodeMs(batch: number, context: number): number;
}

/** What the time-unit cost needs beyond the [v1.5] input, per candidate. */
export interface StepCostLoad {
  /** KV blocks held by the worker's running requests. */
  activeBlocks: number;
  /** The worker's max_num_batched_tokens (chunk size of a prefill). */
  maxBatched: number;
  /** Mean ms a request stays in flight, measured by the router (0 = none finished yet). */
  meanServiceMs: number;
}

/** A fresh `StepCostLoad` (one per decision, refilled per candidate). */
export function newStepCostLoad(): StepCostLoad {
  return { activeBlocks: 0, maxBatched: 1, meanServiceMs: 0 };
}

/** Prefill ms of `tokens` new tokens over `cached` of context, in chunks of `chunk`. */
export function chunkedPrefillMs(m: StepCostModel, cached: number, tokens: number, chunk: number): number {
  let ms = 0;
  let done = 0;
  while (done < tokens) {
    const n = Math.min(chunk, tokens - done);
    ms += m.prefillMs(cached + done, n);
    done += n;
  }
  return ms;
}

/** The predicted wait (ms) for running requests to free the `x.overflow` blocks (see the header). */
function kvWaitMs(m: StepCostModel, x: Readonly<CostInput>, l: Readonly<StepCostLoad>): number {
  const overflow = x.overflow;
  const b = x.activeRequests;
  if (l.meanServiceMs <= 0 || b <= 0 || l.activeBlocks <= 0)
    return chunkedPrefillMs(m, 0, overflow * x.blockSize, l.maxBatched);
  const perRequest = l.activeBlocks / b;
  const k = Math.min(b, Math.ceil(overflow / perRequest));
  let sum = 0;
  for (let i = 0; i < k; i++) sum += 1 / (b - i);
  return l.meanServiceMs * sum;
}

/** The time-unit cost (ms) of one candidate; `k.decodeException` is not handled here (the caller keeps [v1.5]). */
export function stepCostOf(k: CostKnobs, m: StepCostModel, x: Readonly<CostInput>, l: Readonly<StepCostLoad>): number {
  const bs = x.blockSize;
  const cached = Math.min(x.isl, Math.max(0, creditBlocks(k, x) * bs));
  const uncached = k.trackPrefillTokens ? x.isl - cached : 0;
  const chunk = l.maxBatched;
  const b = x.activeRequests;
  // The queued tokens belong to requests in flight there: computed over their mean context.
  const queuedContext = b > 0 ? Math.max(0, (l.activeBlocks * bs - x.activePrefill) / b) : 0;
  const prefill =
    chunkedPrefillMs(m, queuedContext, x.activePrefill, chunk) + chunkedPrefillMs(m, cached, uncached, chunk);
  const steps = Math.ceil((x.activePrefill + uncached) / chunk);
  const interfere =
    b > 0 && steps > 0 ? steps * Math.max(0, m.decodeMs(b, (l.activeBlocks * bs) / b) - m.decodeMs(1, 0)) : 0;
  const evict = x.evicted > 0 ? (k.kvPressureWeight ?? 0) * chunkedPrefillMs(m, 0, x.evicted * bs, chunk) : 0;
  const wait = x.overflow > 0 ? kvWaitMs(m, x, l) : 0;
  const perRequest = k.decodeActiveRequestWeight > 0 ? k.decodeActiveRequestWeight * b * m.prefillMs(0, bs) : 0;
  return k.prefillLoadScale * (prefill + evict) + interfere + wait + perRequest;
}
