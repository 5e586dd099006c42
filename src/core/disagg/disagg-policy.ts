/**
 * Conditional disaggregation: per request, whether a disaggregated model runs the prefill on its prefill pool or
 * serves the request aggregated on a decode-pool worker that can serve alone. Dynamo's rule (an input-length bound,
 * the prefill pool's load, or both) and llm-d's P/D decider: short prompts gain nothing from a KV handoff, and a
 * prefill pool with a deep queue makes the handoff slower than computing the prompt where it will decode.
 *
 * Modes:
 * - `always`: every request is disaggregated (kvgate's behaviour before the policy; the default);
 * - `never`: every request is served aggregated;
 * - `input_length`: disaggregated when the prompt's uncached tokens reach `minInputTokens`;
 * - `prefill_load`: disaggregated while the least-loaded prefill worker's queued prefill tokens stay under
 *   `maxPrefillLoadTokens`;
 * - `either`: served aggregated when either bound says so (a short prompt, or a loaded prefill pool): Dynamo's
 *   combined rule.
 */
export const DISAGG_POLICY_MODES = ['always', 'never', 'input_length', 'prefill_load', 'either'] as const;
export type DisaggPolicyMode = (typeof DISAGG_POLICY_MODES)[number];

export interface DisaggPolicy {
  readonly mode: DisaggPolicyMode;
  /** `input_length` and `either`: the fewest uncached prompt tokens worth a prefill handoff. */
  readonly minInputTokens: number;
  /** `prefill_load` and `either`: the queued prefill tokens of the least-loaded prefill worker above which the
   * request is served aggregated. */
  readonly maxPrefillLoadTokens: number;
}

/** Why a request ran as it did: the `x-kvgate-disagg` header, the decision metric's label and the span attribute. */
export type DisaggReason = 'always' | 'never' | 'long_input' | 'short_input' | 'prefill_idle' | 'prefill_loaded';

export interface DisaggDecision {
  readonly disaggregate: boolean;
  readonly reason: DisaggReason;
}

export const ALWAYS_DISAGGREGATE: DisaggPolicy = Object.freeze({
  mode: 'always',
  minInputTokens: 0,
  maxPrefillLoadTokens: 0,
});

/**
 * The decision for one request. `uncachedTokens`: its prompt tokens not already cached (the whole prompt when
 * unknown); `prefillLoad()`: the least-loaded prefill worker's queued prefill tokens, read only when the mode needs it.
 */
export function decideDisagg(policy: DisaggPolicy, uncachedTokens: number, prefillLoad: () => number): DisaggDecision {
  const { mode } = policy;
  if (mode === 'always') return { disaggregate: true, reason: 'always' };
  if (mode === 'never') return { disaggregate: false, reason: 'never' };
  if (mode !== 'prefill_load' && uncachedTokens < policy.minInputTokens)
    return { disaggregate: false, reason: 'short_input' };
  if (mode === 'input_length') return { disaggregate: true, reason: 'long_input' };
  if (prefillLoad() > policy.maxPrefillLoadTokens) return { disaggregate: false, reason: 'prefill_loaded' };
  return { disaggregate: true, reason: mode === 'either' ? 'long_input' : 'prefill_idle' };
}
