/**
 * Routing agents: the generated agentic workload (`kvgate replay --workload
 * agentic`), offline, H100 step profile (`--perf-profile h100`), at 12 and 16
 * engines over 3 seeds, comparing kvgate's default (`kv`) with the peers'
 * presets (`dynamo`, `dynamo-agentic`, `llm-d`, `lmetric`) and the load-only policies.
 *
 * Rows: per engine count and policy, the means over seeds of TTFT p50 and p99
 * (the table's columns) and, in the note, mean TTFT, the hit rate as a share
 * of one pooled LRU cache of all engines' capacity and of the infinite-cache
 * bound. One seed's mean TTFT swings with queueing spikes, so only the means
 * over seeds are compared.
 *
 * Sizes (environment): KVGATE_AGENTIC_SEEDS (1,2,3), KVGATE_AGENTIC_ENGINES
 * (12,16), KVGATE_AGENTIC_SESSIONS (96), KVGATE_AGENTIC_TURNS (median turns,
 * 12), KVGATE_AGENTIC_RATE (session starts per s, 2), KVGATE_AGENTIC_POLICIES
 * (kv,kv-step,dynamo,dynamo-agentic,llm-d,lmetric,least-loaded,round-robin).
 * Run: node --expose-gc dist/bench/run.js replay/agentic
 * The heavy regime (long contexts fill the engines' KV caches; BENCHMARKS.md, "Routing agents"):
 * KVGATE_AGENTIC_SESSIONS=24 KVGATE_AGENTIC_TURNS=43 KVGATE_AGENTIC_RATE=0.5 node --expose-gc dist/bench/run.js replay/agentic
 * Goal (12 engines): kv's mean and p99 TTFT at most half of the better of
 * dynamo and dynamo-agentic, hit rate at least 95 % of the pooled LRU's.
 */
import { cpus } from 'node:os';
import { parsePolicies, runReplay, type ReplayConfig } from '../../src/replay/index.js';
import type { BenchRow, BenchSection } from '../util.js';

export const title =
  'Routing agents: generated agentic sessions, H100 profile, kv vs the peers presets (means over seeds)';

function list(name: string, fallback: string): string[] {
  return (process.env[name] ?? fallback)
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

function num(name: string, fallback: number): number {
  const v = process.env[name];
  const n = v === undefined ? fallback : Number(v);
  if (!(n > 0)) throw new Error(`${name} must be a positive number, got ${v}`);
  return n;
}

interface Acc {
  mean: number;
  p50: number;
  p99: number;
  vsPooled: number;
  vsBound: number;
  n: number;
}

const mean = (a: Acc, k: keyof Omit<Acc, 'n'>): number => a[k] / a.n;

export async function run(): Promise<BenchSection> {
  const seeds = list('KVGATE_AGENTIC_SEEDS', '1,2,3').map(Number);
  const engines = list('KVGATE_AGENTIC_ENGINES', '12,16').map(Number);
  const policies = list(
    'KVGATE_AGENTIC_POLICIES',
    'kv,kv-step,dynamo,dynamo-agentic,llm-d,lmetric,least-loaded,round-robin',
  );
  const sessions = num('KVGATE_AGENTIC_SESSIONS', 96);
  const turns = num('KVGATE_AGENTIC_TURNS', 12);
  const rate = num('KVGATE_AGENTIC_RATE', 2);
  const rows: BenchRow[] = [];
  const notes: string[] = [
    `Workload: --workload agentic --sessions ${sessions} --median-turns ${turns} --session-rate ${rate}; ` +
      `seeds ${seeds.join(', ')}; --perf-profile h100; policies ${policies.join(', ')}.`,
  ];
  for (const workers of engines) {
    const acc = new Map<string, Acc>();
    let requests = 0;
    for (const seed of seeds) {
      const cfg: ReplayConfig = {
        trace: 'agentic',
        agentic: { seed, sessions, sessionRatePerS: rate, apps: 4, contextLimit: 160_000, medianTurns: turns },
        traceBlockSize: 512,
        strict: false,
        workload: {},
        mode: 'offline',
        policies: parsePolicies(policies),
        topology: { kind: 'aggregated', workers },
        engine: { perfProfile: 'h100' },
        seed,
        jobs: Math.max(1, Math.min(policies.length, cpus().length)),
      };
      const { report } = await runReplay(cfg, { command: 'bench replay/agentic' });
      requests = report.workload.requests;
      const pooled = report.workload.pooled_lru_hit_rate;
      for (const [name, s] of Object.entries(report.policies)) {
        const a = acc.get(name) ?? { mean: 0, p50: 0, p99: 0, vsPooled: 0, vsBound: 0, n: 0 };
        a.mean += s.ttft_ms.mean ?? Number.NaN;
        a.p50 += s.ttft_ms.p50 ?? Number.NaN;
        a.p99 += s.ttft_ms.p99 ?? Number.NaN;
        a.vsPooled += pooled > 0 ? s.hit_rate / pooled : 0;
        a.vsBound += s.hit_rate_vs_bound;
        a.n++;
        acc.set(name, a);
      }
      (globalThis as { gc?: () => void }).gc?.();
    }
    for (const [name, a] of acc) {
      rows.push({
        name: `${workers} engines: ${name}`,
        p50Us: mean(a, 'p50') * 1000,
        p99Us: mean(a, 'p99') * 1000,
        opsPerSec: Number.NaN,
        note:
          `TTFT mean ${(mean(a, 'mean') / 1000).toFixed(2)} s, p99 ${(mean(a, 'p99') / 1000).toFixed(2)} s; ` +
          `hit ${(mean(a, 'vsPooled') * 100).toFixed(0)} % of pooled LRU, ${(mean(a, 'vsBound') * 100).toFixed(0)} % of the infinite-cache bound`,
      });
    }
    notes.push(`${workers} engines: ${requests} requests per seed (last seed).`);
    const kv = acc.get('kv');
    const peers = ['dynamo', 'dynamo-agentic'].map((p) => acc.get(p)).filter((a): a is Acc => a !== undefined);
    if (kv !== undefined && peers.length > 0) {
      const bestMean = Math.min(...peers.map((p) => mean(p, 'mean')));
      const bestP99 = Math.min(...peers.map((p) => mean(p, 'p99')));
      notes.push(
        `${workers} engines: kv / better peer: mean TTFT ${(mean(kv, 'mean') / bestMean).toFixed(2)}, ` +
          `p99 ${(mean(kv, 'p99') / bestP99).toFixed(2)} (goal <= 0.5); kv hit ${(mean(kv, 'vsPooled') * 100).toFixed(0)} % of pooled LRU (goal >= 95 %).`,
      );
    }
  }
  return { title, rows, notes };
}
