import { describe, expect, it } from 'vitest';
import { resolveMockerOptions } from '../../src/mocker/index.js';
import {
  buildWorkload,
  hitRateBound,
  loadTrace,
  parsePolicies,
  replayEngineOptions,
  runOffline,
  summarizePolicy,
  type PolicyRun,
  type PolicySpec,
  type Topology,
  type Workload,
} from '../../src/replay/index.js';

const SMALL = new URL('../fixtures/traces/small.jsonl', import.meta.url).pathname;
const workload: Workload = buildWorkload(loadTrace(SMALL), { speedup: 4 });
const bound = hitRateBound(workload.requests, 512, 16).tokens;

function spec(name: string): PolicySpec {
  return parsePolicies([name])[0]!;
}

function run(
  policy: PolicySpec,
  seed: number,
  topology: Topology = { kind: 'aggregated', workers: 4 },
  engine = {},
): Promise<PolicyRun> {
  return runOffline({
    workload,
    policy,
    topology,
    engine: resolveMockerOptions(replayEngineOptions(engine, seed)),
    seed,
  });
}

/** Everything measured, without the wall-clock time. */
function numbers(r: PolicyRun): unknown {
  const { wallMs: _wall, ...rest } = r;
  const s = summarizePolicy(r, bound);
  const { wall_s: _w, ...summary } = s;
  return { rest, summary };
}

describe('offline replay', () => {
  it('is deterministic: the same seed gives the same numbers, another seed other numbers', async () => {
    for (const name of ['kv', 'random']) {
      const a = await run(spec(name), 1);
      const b = await run(spec(name), 1);
      expect(numbers(a)).toEqual(numbers(b));
      const c = await run(spec(name), 2);
      expect(numbers(c)).not.toEqual(numbers(a));
    }
  });

  it('serves every request and measures TTFT, ITL, throughput, hit rate and load for each policy', async () => {
    for (const name of ['kv', 'round-robin', 'random', 'power-of-two', 'least-loaded']) {
      const r = await run(spec(name), 3);
      const s = summarizePolicy(r, bound);
      expect(s.requests).toEqual({ total: 80, completed: 80, failed: 0 });
      for (const o of r.outcomes) {
        expect(o.firstTokenMs!).toBeGreaterThan(o.arrivalMs);
        expect(o.finishMs!).toBeGreaterThanOrEqual(o.firstTokenMs!);
        expect(o.outputTokens).toBe(o.expectedOutputTokens);
        expect(o.cachedTokens! % 16).toBe(0);
      }
      expect(s.ttft_ms.p50!).toBeLessThanOrEqual(s.ttft_ms.p99!);
      expect(s.itl_ms.mean!).toBeGreaterThan(0);
      expect(s.throughput_tok_s).toBeGreaterThan(0);
      expect(s.hit_rate).toBeLessThanOrEqual(s.hit_rate_bound);
      expect(s.load_imbalance).toBeGreaterThanOrEqual(1);
      expect(Object.keys(s.engine_mean_load)).toEqual(['0', '1', '2', '3']);
      expect(s.prediction_error === null).toBe(name !== 'kv');
    }
  });

  it("kv routing finds the shared prefixes that round-robin scatters, and predicts the engines' hits", async () => {
    const kv = summarizePolicy(await run(spec('kv'), 5), bound);
    const rr = summarizePolicy(await run(spec('round-robin'), 5), bound);
    expect(kv.hit_rate).toBeGreaterThan(rr.hit_rate * 1.5);
    expect(kv.hit_rate).toBeGreaterThan(0.7 * bound);
    // The router's overlap comes from the engines' own KV events, so it matches what they report.
    expect(kv.prediction_error!.exact_fraction).toBeGreaterThan(0.95);
  });

  it('counts requests that cannot fit as failed and keeps going', async () => {
    const r = await run(spec('round-robin'), 1, { kind: 'aggregated', workers: 2 }, { maxModelLen: 4096 });
    const s = summarizePolicy(r, bound);
    const tooLong = workload.requests.filter((q) => q.inputLength + q.outputLength > 4096).length;
    expect(tooLong).toBeGreaterThan(0);
    expect(s.requests).toEqual({ total: 80, completed: 80 - tooLong, failed: tooLong });
    expect(s.errors![0]).toMatch(/exceeds max_model_len 4096/);
  });

  for (const protocol of ['bootstrap', 'kv_transfer_params'] as const) {
    it(`runs a disaggregated topology (2 prefill + 4 decode, ${protocol}) with per-leg figures`, async () => {
      for (const name of ['kv', 'round-robin']) {
        const r = await run(spec(name), 7, { kind: 'disaggregated', prefillWorkers: 2, decodeWorkers: 4, protocol });
        expect(r.name).toBe(`${name}@${protocol}`);
        const s = summarizePolicy(r, bound);
        expect(s.requests.completed).toBe(80);
        const legs = s.legs!;
        expect(legs.prefill_ms.mean!).toBeGreaterThan(0);
        expect(legs.kv_transfer_estimated_ms.mean!).toBeGreaterThan(0);
        // Transfer time is (uncached tokens on the decode engine) x 131072 B / 64 GB/s.
        for (const o of r.outcomes) {
          expect(o.prefillWorkerId!).toBeLessThan(2);
          expect(o.workerId!).toBeGreaterThanOrEqual(2);
          expect(o.transferEstimateMs!).toBeLessThanOrEqual(((o.promptTokens * 131072) / 64e9) * 1000 + 1e-9);
          expect(o.firstTokenMs!).toBeGreaterThan(o.prefillDoneMs!);
          expect(o.decodeStartMs).toBe(o.prefillDoneMs);
        }
        expect(legs.prefill_done_to_first_token_ms.mean!).toBeGreaterThanOrEqual(legs.kv_transfer_estimated_ms.mean!);
        expect(legs.kv_lease_expired).toBe(0);
        // No two of the table's timing columns are one figure twice (the decode leg starts when its prefill is done).
        const timings = Object.entries(legs).filter(([, v]) => typeof v === 'object');
        for (const [i, [k, v]] of timings.entries())
          for (const [k2, v2] of timings.slice(i + 1)) expect(v, `${k} and ${k2}`).not.toEqual(v2);
        expect(Object.keys(s.engine_mean_load)).toEqual(['0', '1', '2', '3', '4', '5']);
      }
    });
  }

  it("the P/D protocols differ only in Dynamo's order: the gateway's books every decode worker at arrival", async () => {
    const topo = (protocol: 'bootstrap' | 'kv_transfer_params'): Topology => ({
      kind: 'disaggregated',
      prefillWorkers: 2,
      decodeWorkers: 4,
      protocol,
    });
    // Round-robin assigns decode workers in arrival order when they are booked at arrival, else in prefill-completion order.
    const order = (r: PolicyRun): number[] => r.outcomes.map((o) => o.workerId!);
    const arrivalOrder = workload.requests.map((_, i) => 2 + (i % 4));
    const boot = await run(spec('round-robin'), 9, topo('bootstrap'));
    const vllm = await run(spec('round-robin'), 9, topo('kv_transfer_params'));
    expect(order(boot)).toEqual(arrivalOrder);
    expect(order(vllm)).toEqual(arrivalOrder);
    // The decode engine reserves the KV when the prefill completes under both (offline-disagg.ts): the same run.
    expect(vllm.outcomes).toEqual(boot.outcomes);
    // Dynamo routes an SGLang decode right after its prefill, a vLLM one after the prefill's response.
    const dynBoot = await run(spec('round-robin+dynamo-order'), 9, topo('bootstrap'));
    const dynVllm = await run(spec('round-robin+dynamo-order'), 9, topo('kv_transfer_params'));
    expect(dynBoot.name).toBe('round-robin+dynamo-order@bootstrap');
    expect(order(dynBoot)).toEqual(arrivalOrder);
    expect(order(dynVllm)).not.toEqual(arrivalOrder);
  });
});
