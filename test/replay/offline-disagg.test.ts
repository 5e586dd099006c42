/**
 * The P/D path's order: by default the replay books a request's decode slot before its prefill, as the gateway does
 * (src/routing/disagg/decode-slot.ts), so a burst wider than the decode side is refused before any
 * prefill work is spent; `<policy>+dynamo-order` keeps Dynamo's order (decode routed once the prefill is on its way).
 */
import { describe, expect, it } from 'vitest';
import { resolveMockerOptions } from '../../src/mocker/index.js';
import {
  buildWorkload,
  loadTrace,
  parsePolicies,
  parseTrace,
  replayEngineOptions,
  runOffline,
  runReplay,
  type DisaggProtocol,
  type PolicyRun,
  type PolicySpec,
  type Workload,
} from '../../src/replay/index.js';

const SMALL = new URL('../fixtures/traces/small.jsonl', import.meta.url).pathname;

/** `n` requests at the same instant, 4,096-token prompts sharing nothing, 400 output tokens each. */
function burst(n: number): Workload {
  const lines = Array.from({ length: n }, (_, i) =>
    JSON.stringify({
      timestamp: 0,
      input_length: 4096,
      output_length: 400,
      hash_ids: Array.from({ length: 8 }, (_, j) => i * 8 + j),
    }),
  );
  return buildWorkload(parseTrace(lines.join('\n'), { traceBlockSize: 512, strict: true }));
}

/** 1,024 blocks of 16 tokens per engine: one request's prompt is 256 blocks, a quarter of a decode engine. */
const ENGINE = { numGpuBlocks: 1024, blockSize: 16 };

/**
 * The kv policy whose decode workers are overloaded past 45 % of their KV in booked blocks (a request books its
 * prompt's 256 blocks: two fit, a third is refused), then its Dynamo-order twin.
 */
function policies(): PolicySpec[] {
  const [spec] = parsePolicies([], [JSON.stringify({ active_decode_blocks_threshold: 0.45 })]);
  return [spec!, { ...spec!, name: `${spec!.name}+dynamo-order`, disaggOrder: 'dynamo' }];
}

function run(workload: Workload, policy: PolicySpec, protocol: DisaggProtocol, prefillWorkers = 2): Promise<PolicyRun> {
  return runOffline({
    workload,
    policy,
    topology: { kind: 'disaggregated', prefillWorkers, decodeWorkers: 2, protocol },
    engine: resolveMockerOptions(replayEngineOptions(ENGINE, 1)),
    seed: 1,
  });
}

describe('offline replay: the P/D order', () => {
  it('names the Dynamo order as a suffix of any policy, and only for P/D runs offline', async () => {
    const [kv, dyn, rr] = parsePolicies(['kv', 'dynamo+dynamo-order', 'round-robin+dynamo-order']);
    expect(kv!.disaggOrder).toBeUndefined();
    expect(dyn).toMatchObject({ kind: 'kv', name: 'dynamo+dynamo-order', disaggOrder: 'dynamo' });
    expect(rr).toMatchObject({ kind: 'simple', name: 'round-robin+dynamo-order', mode: 'round-robin' });
    expect(() => parsePolicies(['kv+dynamo-orders'])).toThrow(/unknown policy 'kv\+dynamo-orders'/);
    await expect(
      runOffline({
        workload: burst(2),
        policy: dyn!,
        topology: { kind: 'aggregated', workers: 2 },
        engine: resolveMockerOptions(replayEngineOptions(ENGINE, 1)),
        seed: 1,
      }),
    ).rejects.toThrow(/dynamo\+dynamo-order: a P\/D order needs a disaggregated topology/);
    // Online, the gateway itself routes: it books the decode slot first.
    const topology = { kind: 'disaggregated', prefillWorkers: 1, decodeWorkers: 1, protocols: ['bootstrap'] } as const;
    await expect(
      runReplay(
        {
          ...{ trace: SMALL, traceBlockSize: 512, strict: true, workload: {}, engine: {}, seed: 1, jobs: 1 },
          ...{ mode: 'online', policies: [dyn!], topology },
        },
        { command: 'test', runOnline: () => Promise.reject(new Error('not reached')) },
      ),
    ).rejects.toThrow(/Dynamo's P\/D order is modelled offline only/);
  });

  it('the order is all the suffix changes: an SGLang decode routed at the same instant routes alike', async () => {
    // Bootstrap in Dynamo's order routes the decode right after the prefill, at arrival; without a queue nothing
    // happens in between, so the run is the gateway order's (the suffix does not reseed the routers).
    const workload = buildWorkload(loadTrace(SMALL), { speedup: 4 });
    const [kv, kvDynamo] = parsePolicies(['kv', 'kv+dynamo-order']);
    const topology = { kind: 'disaggregated', prefillWorkers: 2, decodeWorkers: 4, protocol: 'bootstrap' } as const;
    const engine = resolveMockerOptions(replayEngineOptions({}, 3));
    const a = await runOffline({ workload, policy: kv!, topology, engine, seed: 3 });
    const b = await runOffline({ workload, policy: kvDynamo!, topology, engine, seed: 3 });
    expect(b.outcomes).toEqual(a.outcomes);
  });

  for (const protocol of ['kv_transfer_params', 'bootstrap'] as const) {
    it(`a burst wider than the decode pool is refused before any prefill runs (${protocol})`, async () => {
      const workload = burst(10);
      const [gateway, dynamo] = policies();
      const r = await run(workload, gateway!, protocol);
      const failed = r.outcomes.filter((o) => o.error !== null);
      // Two decode engines take two requests each; the other six are refused at arrival.
      expect(failed).toHaveLength(6);
      for (const o of failed) {
        expect(o.error).toMatch(/eligible worker ranks are overloaded/);
        expect(o.prefillWorkerId).toBeNull();
        expect(o.admittedMs).toBeNull();
        expect(o.prefillDoneMs).toBeNull();
      }
      for (const o of r.outcomes.filter((x) => x.error === null)) expect(o.outputTokens).toBe(400);

      // Dynamo's order spends a prefill (vLLM: run to its end; SGLang: routed, booked and its KV held) on each.
      const d = await run(workload, dynamo!, protocol);
      const refused = d.outcomes.filter((o) => o.error !== null);
      expect(refused.length).toBeGreaterThan(0);
      for (const o of refused) {
        expect(o.prefillWorkerId).not.toBeNull();
        if (protocol === 'kv_transfer_params') expect(o.prefillDoneMs).not.toBeNull();
      }
    });
  }
});
