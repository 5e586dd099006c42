/**
 * Routing quality over 8 simulated engines (mocker defaults: polynomial
 * timing, 16,384 KV blocks of 16 tokens), offline, at three load levels set
 * by `--speedup` (arrival times divided by it). The levels were chosen on the
 * whole Mooncake FAST'25 synthetic trace (3,993 requests; 3.9 req/s, 582
 * output tok/s offered as recorded):
 *
 * - light (1x, the trace as recorded);
 * - near saturation (4x: 2,330 output tok/s offered, about 90 % of the most
 *   these engines served in any overloaded run, ~2,550 tok/s);
 * - overloaded (6x: ~135 % of that capacity); queues grow for the whole run.
 * How the levels were picked: a sweep over 1x-12x comparing the offered
 * output tokens/s (582 x speedup) with each policy's served throughput and
 * TTFT. Round-robin stops keeping up between 3x and 4x (its served
 * throughput falls below the offered load and its TTFT tail explodes); kv
 * keeps up to about 4.3x.
 *
 * The trace: the bundled slice (data/traces/), or $KVGATE_TRACE. Each level
 * compares kv, round-robin and random and writes its report (results.md,
 * results.json, TTFT CDF, hit rate and load over time) to
 * docs/replay/<level>/ when the trace is the whole upstream file (what those
 * documents describe), else to results/replay-quality/<level>/.
 * Rows: "median" and "p99" are TTFT p50 and p99, ops/s the requests served
 * per second of simulated time.
 * Goal at near saturation: kv's mean TTFT <= 1/3 of round-robin's,
 * hit rate >= 85 % of the infinite-cache bound, no engine above 1.25x the
 * mean load.
 * Run: npm run bench -- replay/quality   (about 3 minutes on 2 CPUs on the whole trace)
 */
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parsePolicies, runReplay, writeReport } from '../../src/replay/index.js';
import type { BenchRow, BenchSection } from '../util.js';
import { benchTrace } from './offline.bench.js';

export const title =
  'Routing quality: kv vs round-robin vs random, 8 engines, three load levels (bundled trace, or $KVGATE_TRACE)';

/** SHA-256 of the whole upstream synthetic trace, the one docs/replay/ describes. */
const UPSTREAM_TRACE_SHA256 = 'bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131';

export const LEVELS = [
  { name: 'light', speedup: 1 },
  { name: 'near-saturation', speedup: 4 },
  { name: 'overloaded', speedup: 6 },
] as const;

export async function run(): Promise<BenchSection> {
  const trace = benchTrace();
  const rows: BenchRow[] = [];
  const notes: string[] = [];
  for (const level of LEVELS) {
    const command = `kvgate replay --trace ${trace.shown} --compare kv,round-robin,random --speedup ${level.speedup}`;
    const { report, runs } = await runReplay(
      {
        trace: trace.path,
        traceBlockSize: 512,
        strict: false,
        workload: { speedup: level.speedup },
        mode: 'offline',
        policies: parsePolicies(['kv', 'round-robin', 'random']),
        topology: { kind: 'aggregated', workers: 8 },
        engine: {},
        seed: 0,
        jobs: cpus().length,
      },
      { command },
    );
    const out = `${report.workload.trace_sha256 === UPSTREAM_TRACE_SHA256 ? 'docs/replay' : 'results/replay-quality'}/${level.name}`;
    writeReport(fileURLToPath(new URL(`../../../${out}/`, import.meta.url)), report, runs);
    if (level === LEVELS[0])
      notes.push(
        `Trace: ${trace.shown} (${report.workload.requests} requests); reports written to ${out.replace(level.name, '<level>')}/.`,
      );
    for (const [name, s] of Object.entries(report.policies)) {
      rows.push({
        name: `${level.name} (${level.speedup}x): ${name}`,
        p50Us: (s.ttft_ms.p50 ?? Number.NaN) * 1000,
        p99Us: (s.ttft_ms.p99 ?? Number.NaN) * 1000,
        opsPerSec: s.requests_per_s,
        note:
          `TTFT mean ${s.ttft_ms.mean} ms; hit ${(s.hit_rate * 100).toFixed(1)} % = ${(s.hit_rate_vs_bound * 100).toFixed(0)} % of bound; ` +
          `load max/mean ${s.load_imbalance}; ${s.throughput_tok_s} out tok/s; engines busy ${((s.engine_busy_fraction ?? 0) * 100).toFixed(0)} %`,
      });
    }
    const kv = report.policies.kv!;
    const rr = report.policies['round-robin']!;
    const w = report.workload;
    notes.push(
      `${level.name} (${level.speedup}x, offered ${w.request_rate_per_s} req/s): kv/round-robin mean TTFT = ${(kv.ttft_ms.mean! / rr.ttft_ms.mean!).toFixed(2)}; ` +
        `kv hit rate ${(kv.hit_rate * 100).toFixed(1)} % vs infinite-cache bound ${(w.hit_rate_bound * 100).toFixed(1)} % (${(kv.hit_rate_vs_bound * 100).toFixed(0)} %) ` +
        `and vs one pooled LRU cache of all 8 engines' capacity ${(w.pooled_lru_hit_rate * 100).toFixed(1)} %; kv load max/mean ${kv.load_imbalance}.`,
    );
    if (level.name === 'near-saturation') {
      const ratio = kv.ttft_ms.mean! / rr.ttft_ms.mean!;
      notes.push(
        `Goal at near saturation: TTFT <= 1/3 of round-robin's: ${ratio <= 1 / 3 ? 'met' : 'missed'} (${ratio.toFixed(2)}); ` +
          `hit rate >= 85 % of the bound: ${kv.hit_rate_vs_bound >= 0.85 ? 'met' : 'missed'} (${(kv.hit_rate_vs_bound * 100).toFixed(0)} %); ` +
          `no engine above 1.25x mean load: ${kv.load_imbalance <= 1.25 ? 'met' : 'missed'} (${kv.load_imbalance}).`,
      );
    }
  }
  return { title, rows, notes };
}
