/** Conditional disaggregation's rule (issue 30): each mode's decision and reason at and around its bounds. */
import { describe, expect, it } from 'vitest';
import { ALWAYS_DISAGGREGATE, decideDisagg, type DisaggPolicy } from '../../../src/core/index.js';

const policy = (mode: DisaggPolicy['mode']): DisaggPolicy => ({
  mode,
  minInputTokens: 512,
  maxPrefillLoadTokens: 4096,
});

describe('decideDisagg', () => {
  it('always and never ignore the request and never read the load', () => {
    const load = (): number => {
      throw new Error('load read');
    };
    expect(decideDisagg(ALWAYS_DISAGGREGATE, 1, load)).toEqual({ disaggregate: true, reason: 'always' });
    expect(decideDisagg(policy('never'), 100_000, load)).toEqual({ disaggregate: false, reason: 'never' });
    expect(decideDisagg(policy('input_length'), 100, load)).toEqual({ disaggregate: false, reason: 'short_input' });
    expect(decideDisagg(policy('input_length'), 512, load)).toEqual({ disaggregate: true, reason: 'long_input' });
  });

  it('prefill_load: disaggregated while the least-loaded prefill worker holds at most the bound', () => {
    expect(decideDisagg(policy('prefill_load'), 10, () => 4096)).toEqual({
      disaggregate: true,
      reason: 'prefill_idle',
    });
    expect(decideDisagg(policy('prefill_load'), 10, () => 4097)).toEqual({
      disaggregate: false,
      reason: 'prefill_loaded',
    });
  });

  it('either: aggregated when the prompt is short or the prefill pool loaded', () => {
    expect(decideDisagg(policy('either'), 511, () => 0)).toEqual({ disaggregate: false, reason: 'short_input' });
    expect(decideDisagg(policy('either'), 512, () => 5000)).toEqual({ disaggregate: false, reason: 'prefill_loaded' });
    expect(decideDisagg(policy('either'), 512, () => 0)).toEqual({ disaggregate: true, reason: 'long_input' });
  });
});
