/**
 * Offline replay speed and results over 8 simulated engines: kv, round-robin
 * and random compared in one run, as `kvgate replay --trace
 * data/traces/mooncake-synthetic-last1000.jsonl --compare kv,round-robin,random`
 * does (runs in parallel worker threads, one per CPU).
 *
 * The trace: the one bundled in data/traces/ (the last 1,000 requests of the
 * Mooncake FAST'25 synthetic trace), or the file $KVGATE_TRACE names (the
 * whole upstream trace, 3,993 requests, is what BENCHMARKS.md reports).
 *
 * Rows: one per policy; "median" and "p99" are that run's wall time (a single
 * run each), ops/s the simulated requests per wall second. Target:
 * the whole comparison in under a minute on this machine.
 * Run: npm run bench -- replay/offline
 */
import { cpus, loadavg } from 'node:os';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parsePolicies, runReplay } from '../../src/replay/index.js';
import type { BenchRow, BenchSection } from '../util.js';

export const title = 'Offline replay: 8 engines, kv vs round-robin vs random (bundled trace, or $KVGATE_TRACE)';

/** The repository root (this file runs from dist/bench/replay/). */
const ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** The replay benches' trace: $KVGATE_TRACE, else the trace bundled in data/traces/. */
export function benchTrace(): { path: string; shown: string } {
  const fromEnv = process.env.KVGATE_TRACE;
  const path =
    fromEnv !== undefined && fromEnv !== '' ? fromEnv : `${ROOT}data/traces/mooncake-synthetic-last1000.jsonl`;
  // As a command line would name it: relative to the repository when inside it.
  const rel = relative(ROOT, path);
  return { path, shown: rel.startsWith('..') ? path : rel };
}

export async function run(): Promise<BenchSection> {
  const trace = benchTrace();
  const load = loadavg()[0]!;
  const start = performance.now();
  const cpuStart = process.cpuUsage();
  const { report, runs } = await runReplay(
    {
      trace: trace.path,
      traceBlockSize: 512,
      strict: false,
      workload: { speedup: 1 },
      mode: 'offline',
      policies: parsePolicies(['kv', 'round-robin', 'random']),
      topology: { kind: 'aggregated', workers: 8 },
      engine: {},
      seed: 0,
      jobs: cpus().length,
    },
    { command: `kvgate replay --trace ${trace.shown} --compare kv,round-robin,random` },
  );
  const wallS = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpuStart);
  const rows: BenchRow[] = runs.map((r) => {
    const s = report.policies[r.name]!;
    return {
      name: `${r.name}: whole run`,
      p50Us: r.wallMs * 1000,
      p99Us: r.wallMs * 1000,
      opsPerSec: r.outcomes.length / (r.wallMs / 1000),
      note: `TTFT mean ${s.ttft_ms.mean} ms, hit rate ${(s.hit_rate * 100).toFixed(1)} % (bound ${(s.hit_rate_bound * 100).toFixed(1)} %), load max/mean ${s.load_imbalance}`,
    };
  });
  return {
    title,
    rows,
    notes: [
      `Trace: ${trace.shown} (${report.workload.requests} requests over ${report.workload.span_s} s).`,
      `Whole comparison (3 runs, ${Math.min(3, cpus().length)} at once in worker threads): ${wallS.toFixed(1)} s wall; target "under a minute": ${wallS < 60 ? 'met' : 'missed'}.`,
      `This process's CPU time: ${((cpu.user + cpu.system) / 1e6).toFixed(1)} s (the worker threads' time is included); 1-minute load average at the start: ${load.toFixed(2)} on ${cpus().length} CPUs.`,
      'Where the time goes: mostly the simulated engines (KV block pool bookkeeping per 16-token block), then hashing and the KV-event applier.',
    ],
  };
}
