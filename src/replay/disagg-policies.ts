/**
 * The conditional-disaggregation scenario (`kvgate replay --scenario conditional-disagg`): one seeded mixed workload
 * (short chats behind a shared system prompt, long documents asked about again and again) replayed offline on one
 * P/D fleet under each `disagg_policy`, with the KV policy on both pools; one table row per policy (TTFT, ITL,
 * throughput, the share of requests disaggregated).
 */
import { seededRng } from '../common/index.js';
import type { DisaggPolicy } from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import { resolveMockerOptions, type MockerInput } from '../mocker/index.js';
import { runOffline } from './offline.js';
import type { DisaggProtocol } from './offline-disagg.js';
import { parsePolicies } from './policy.js';
import { summarizePolicy, type PolicyRun } from './results.js';
import type { ReplayRequest, Workload } from './workload.js';

export interface MixedWorkloadOptions {
  readonly seed: number;
  readonly requests: number;
  /** Mean arrivals per second (Poisson). */
  readonly ratePerS: number;
  /** Fraction of requests that ask about a long document. */
  readonly docShare: number;
  /** Tokens per trace block (each block is one synthesised chunk). */
  readonly blockTokens: number;
}

export const MIXED_DEFAULTS: MixedWorkloadOptions = {
  seed: 42,
  requests: 400,
  ratePerS: 16,
  docShare: 0.2,
  blockTokens: 64,
};

/** Documents the long requests are about; each is asked about several times, so its prefix can be reused. */
const DOCUMENTS = 16;
/** Shared system-prompt blocks every chat starts with. */
const SYSTEM_BLOCKS = 2;

/**
 * The mixed workload: chats of 2 shared + 1..6 own blocks (64..256 output tokens) and document questions of one of
 * 16 documents (48..128 blocks each) + 1 own block (64..192 output tokens). Deterministic in the seed.
 */
export function mixedWorkload(o: MixedWorkloadOptions = MIXED_DEFAULTS): Workload {
  if (!Number.isSafeInteger(o.requests) || o.requests < 1 || !(o.ratePerS > 0) || !(o.docShare >= 0 && o.docShare <= 1))
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      'the mixed workload needs requests >= 1, a rate > 0, a share in [0, 1]',
    );
  const rng = seededRng(o.seed);
  const between = (lo: number, hi: number): number => lo + Math.floor(rng() * (hi - lo + 1));
  const docBlocks = Array.from({ length: DOCUMENTS }, () => between(48, 128));
  const docStart = (d: number): number => 1000 + d * 1000;
  let own = 1_000_000;
  let t = 0;
  const requests: ReplayRequest[] = [];
  for (let index = 0; index < o.requests; index++) {
    t += (-Math.log(1 - rng()) / o.ratePerS) * 1000;
    let hashIds: number[];
    let outputLength: number;
    if (rng() < o.docShare) {
      const d = between(0, DOCUMENTS - 1);
      hashIds = [...Array.from({ length: docBlocks[d]! }, (_, i) => docStart(d) + i), own++];
      outputLength = between(64, 192);
    } else {
      hashIds = [
        ...Array.from({ length: SYSTEM_BLOCKS }, (_, i) => i),
        ...Array.from({ length: between(1, 6) }, () => own++),
      ];
      outputLength = between(64, 256);
    }
    const arrivalMs = Math.round(t);
    requests.push({
      index,
      line: index + 1,
      arrivalMs,
      inputLength: hashIds.length * o.blockTokens,
      outputLength,
      hashIds,
    });
  }
  return {
    requests,
    traceBlockSize: o.blockTokens,
    arrival: 'as-recorded',
    speedup: 1,
    spanMs: requests[requests.length - 1]!.arrivalMs,
    droppedByMaxRequests: 0,
    capping: { maxIsl: null, requestsCapped: 0, tokensRemoved: 0 },
  };
}

/** A named policy of the comparison. */
export interface NamedDisaggPolicy {
  readonly name: string;
  readonly policy: DisaggPolicy;
}

/** always, never, and each conditional mode with the given bounds. */
export function disaggPolicies(minInputTokens: number, maxPrefillLoadTokens: number): NamedDisaggPolicy[] {
  const p = (mode: DisaggPolicy['mode']): DisaggPolicy => ({ mode, minInputTokens, maxPrefillLoadTokens });
  return [
    { name: 'always', policy: p('always') },
    { name: 'never', policy: p('never') },
    { name: `input_length >= ${minInputTokens}`, policy: p('input_length') },
    { name: `prefill_load <= ${maxPrefillLoadTokens}`, policy: p('prefill_load') },
    { name: 'either', policy: p('either') },
  ];
}

export interface DisaggScenarioOptions {
  readonly workload: Workload;
  readonly policies: readonly NamedDisaggPolicy[];
  readonly prefillWorkers: number;
  readonly decodeWorkers: number;
  readonly protocol: DisaggProtocol;
  /** Engine model; the same for every engine of both pools. */
  readonly engine: MockerInput;
  readonly seed: number;
  readonly onProgress?: (policy: string, done: number, total: number) => void;
}

export interface DisaggScenarioRow {
  readonly policy: string;
  readonly run: PolicyRun;
  readonly completed: number;
  readonly failed: number;
  readonly ttftMeanMs: number | null;
  readonly ttftP99Ms: number | null;
  readonly itlMeanMs: number | null;
  readonly itlP99Ms: number | null;
  readonly throughputTokS: number;
  /** Completed requests that ran disaggregated (a prefill leg on the prefill pool), over completed requests. */
  readonly disaggregatedShare: number;
}

/** Runs every policy on the same workload and fleet, one after the other, in virtual time. */
export async function runDisaggScenario(o: DisaggScenarioOptions): Promise<DisaggScenarioRow[]> {
  const kv = parsePolicies(['kv'])[0]!;
  const engine = resolveMockerOptions(o.engine);
  const rows: DisaggScenarioRow[] = [];
  for (const { name, policy } of o.policies) {
    const run = await runOffline({
      workload: o.workload,
      policy: kv,
      topology: {
        kind: 'disaggregated',
        prefillWorkers: o.prefillWorkers,
        decodeWorkers: o.decodeWorkers,
        protocol: o.protocol,
        disaggPolicy: policy,
      },
      engine,
      seed: o.seed,
      ...(o.onProgress !== undefined ? { onProgress: (d: number, t: number) => o.onProgress!(name, d, t) } : {}),
    });
    const s = summarizePolicy(run, 0);
    const done = run.outcomes.filter((x) => x.finishMs !== null && x.error === null);
    rows.push({
      policy: name,
      run,
      completed: s.requests.completed,
      failed: s.requests.failed,
      ttftMeanMs: s.ttft_ms.mean,
      ttftP99Ms: s.ttft_ms.p99,
      itlMeanMs: s.itl_ms.mean,
      itlP99Ms: s.itl_ms.p99,
      throughputTokS: s.throughput_tok_s,
      disaggregatedShare: done.length === 0 ? 0 : done.filter((x) => x.prefillWorkerId !== null).length / done.length,
    });
  }
  return rows;
}

const ms = (v: number | null): string => (v === null ? '-' : v.toFixed(1));

/** The Markdown table of a scenario's rows. */
export function renderDisaggTable(rows: readonly DisaggScenarioRow[]): string {
  const lines = [
    '| disagg_policy | TTFT mean ms | TTFT p99 ms | ITL mean ms | ITL p99 ms | throughput tok/s | disaggregated | failed |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows) {
    const share = `${(100 * r.disaggregatedShare).toFixed(1)} %`;
    const cells = [ms(r.ttftMeanMs), ms(r.ttftP99Ms), ms(r.itlMeanMs), ms(r.itlP99Ms), r.throughputTokS.toFixed(0)];
    lines.push(`| ${r.policy} | ${cells.join(' | ')} | ${share} | ${r.failed} |`);
  }
  return `${lines.join('\n')}\n`;
}
