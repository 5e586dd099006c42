/**
 * Conditional disaggregation in the offline replay: each request of the mixed workload is decided by the policy
 * (core's `decideDisagg`, the gateway's rule) and runs disaggregated or whole on a decode engine accordingly; the
 * prefill pool's load estimate (queued prefill tokens per prefill worker) is booked at routing and released when the
 * prefill completes.
 */
import { describe, expect, it } from 'vitest';
import { MOCKER_DEFAULTS } from '../../src/mocker/index.js';
import { PrefillLoadRouter } from '../../src/replay/conditional-disagg.js';
import { disaggPolicies, mixedWorkload, runDisaggScenario } from '../../src/replay/disagg-policies.js';
import type { ReplayRouter } from '../../src/replay/policy.js';
import { replayEngineOptions } from '../../src/replay/index.js';

const BOUND = 1024;

describe('conditional-disaggregation replay', () => {
  it('the decision shares follow each policy: input_length disaggregates every prompt at the bound and above, none below', async () => {
    const workload = mixedWorkload({ seed: 7, requests: 60, ratePerS: 16, docShare: 0.3, blockTokens: 64 });
    const longs = workload.requests.filter((r) => r.inputLength >= BOUND).length;
    expect(longs).toBeGreaterThan(5);
    expect(longs).toBeLessThan(60);
    const rows = await runDisaggScenario({
      workload,
      policies: disaggPolicies(BOUND, 1 << 30),
      prefillWorkers: 2,
      decodeWorkers: 2,
      protocol: 'kv_transfer_params',
      engine: replayEngineOptions({ numGpuBlocks: MOCKER_DEFAULTS.numGpuBlocks }, 7),
      seed: 7,
    });
    const by = new Map(rows.map((r) => [r.policy.split(' ')[0]!, r]));
    for (const r of rows) expect([r.policy, r.completed, r.failed]).toEqual([r.policy, 60, 0]);
    expect(by.get('always')!.disaggregatedShare).toBe(1);
    expect(by.get('never')!.disaggregatedShare).toBe(0);
    // A bound no queue reaches: prefill_load disaggregates everything.
    expect(by.get('prefill_load')!.disaggregatedShare).toBe(1);
    for (const name of ['input_length', 'either']) {
      const row = by.get(name)!;
      for (const o of row.run.outcomes) {
        expect(o.prefillWorkerId !== null, `${name}: request ${o.index} of ${o.promptTokens} tokens`).toBe(
          o.promptTokens >= BOUND,
        );
        // Served whole on a decode engine (ids after the prefill pool's), or its decode leg there.
        expect(o.workerId).toBeGreaterThanOrEqual(2);
      }
      expect(row.disaggregatedShare).toBe(longs / 60);
    }
  }, 120_000);

  it('prefill_load: with a bound of 0, a request arriving while every prefill worker has queued tokens is served whole', async () => {
    const workload = mixedWorkload({ seed: 3, requests: 40, ratePerS: 200, docShare: 0.5, blockTokens: 64 });
    const [row] = await runDisaggScenario({
      workload,
      policies: [
        { name: 'prefill_load', policy: { mode: 'prefill_load', minInputTokens: 0, maxPrefillLoadTokens: 0 } },
      ],
      prefillWorkers: 1,
      decodeWorkers: 2,
      protocol: 'kv_transfer_params',
      engine: replayEngineOptions({}, 3),
      seed: 3,
    });
    expect(row!.failed).toBe(0);
    expect(row!.disaggregatedShare).toBeGreaterThan(0);
    expect(row!.disaggregatedShare).toBeLessThan(1);
  }, 120_000);

  it('the load estimate books a prefill leg where it was routed and releases it once, at its first token or its end', () => {
    const inner: ReplayRouter = {
      policy: 'fixed',
      route: (req) => ({ workerId: req.key === 'a' ? 0 : 1, predictedCachedTokens: req.key === 'b' ? 100 : null }),
      prefillCompleted: () => undefined,
      outputTokens: () => undefined,
      finished: () => undefined,
      applyKvEvents: () => undefined,
      tick: () => undefined,
    };
    const load = new PrefillLoadRouter(inner);
    const tokens = (n: number): number[] => Array.from({ length: n }, (_, i) => i);
    load.route({ key: 'a', tokens: tokens(500), expectedOutputTokens: 1 }, [0, 1]);
    expect(load.leastLoaded([0, 1])).toBe(0);
    load.route({ key: 'b', tokens: tokens(300), expectedOutputTokens: 1 }, [0, 1]);
    expect(load.leastLoaded([0, 1])).toBe(200);
    load.prefillCompleted('a');
    load.finished('a');
    expect(load.leastLoaded([0])).toBe(0);
    load.finished('b');
    expect(load.leastLoaded([0, 1])).toBe(0);
  });
});
