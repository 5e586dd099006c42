/**
 * Offline replay speed and results on the shared synthetic trace (Mooncake
 * FAST'25, 3,993 requests) over 8 simulated engines: kv, round-robin and
 * random compared in one run, as `kvgate replay --trace
 * ../shared/traces/synthetic_trace.jsonl --compare kv,round-robin,random`
 * does (runs in parallel worker threads, one per CPU).
 *
 * Rows: one per policy; "median" and "p99" are that run's wall time (a single
 * run each), ops/s the simulated requests per wall second. Target:
 * the whole comparison in under a minute on this machine.
 * The trace is looked up beside the repository (`../shared/traces/`) or at
 * $KVGATE_TRACE; without it the bench reports itself skipped.
 * Run: npm run bench -- replay/offline
 */
import { existsSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { parsePolicies, runReplay } from '../../src/replay/index.js';
import type { BenchRow, BenchSection } from '../util.js';

export const title = 'Offline replay: synthetic trace (3,993 requests), 8 engines, kv vs round-robin vs random';

/** The shared trace: $KVGATE_TRACE, else ../shared/traces/synthetic_trace.jsonl beside the repository. */
export function sharedTrace(): string | undefined {
  const fromEnv = process.env.KVGATE_TRACE;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  // dist/bench/replay/ -> repository root -> its parent.
  const p = fileURLToPath(new URL('../../../../shared/traces/synthetic_trace.jsonl', import.meta.url));
  return existsSync(p) ? p : undefined;
}

export async function run(): Promise<BenchSection> {
  const trace = sharedTrace();
  if (trace === undefined) return { title, rows: [], notes: ['skipped: ../shared/traces/synthetic_trace.jsonl not found (set KVGATE_TRACE)'] };
  const load = loadavg()[0]!;
  const start = performance.now();
  const cpuStart = process.cpuUsage();
  const { report, runs } = await runReplay({
    trace, traceBlockSize: 512, strict: false, workload: { speedup: 1 }, mode: 'offline',
    policies: parsePolicies(['kv', 'round-robin', 'random']), topology: { kind: 'aggregated', workers: 8 },
    engine: {}, seed: 0, jobs: cpus().length,
  }, { command: 'kvgate replay --trace ../shared/traces/synthetic_trace.jsonl --compare kv,round-robin,random' });
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
      `Whole comparison (3 runs, ${Math.min(3, cpus().length)} at once in worker threads): ${wallS.toFixed(1)} s wall; target "under a minute": ${wallS < 60 ? 'met' : 'missed'}.`,
      `This process's CPU time: ${((cpu.user + cpu.system) / 1e6).toFixed(1)} s (the worker threads' time is included); 1-minute load average at the start: ${load.toFixed(2)} on ${cpus().length} CPUs.`,
      'Where the time goes: mostly the simulated engines (KV block pool bookkeeping per 16-token block, ~3.8 M prompt blocks per policy), then hashing and the KV-event applier.',
    ],
  };
}
