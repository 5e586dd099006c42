/**
 * Event-loop lag and HTTP latency while one worker floods KV events: 400,000
 * events (50,000 batches of 8, vLLM framing) sent as fast as ZMQ takes them
 * from a publisher in a worker thread into a real KvEventManager, while an
 * HTTP prober in another thread GETs a node:http server in the same process
 * every 5 ms (the server answers with a read of the ingestion state).
 *
 * With KVGATE_BENCH_BEFORE_DIST=<dist of another build> (e.g. the commit
 * before bounded ingestion, built in a second worktree) the same scenario
 * runs against that build too, in the same bench run, for a before/after.
 * Each build runs in a child process (flood-scenario.ts).
 * Run: KVGATE_BENCH_BEFORE_DIST=/path/to/before/dist npm run bench -- flood
 */
import { execFile } from 'node:child_process';
import { copyFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchRow, BenchSection } from '../util.js';
import type { FloodOutcome } from './flood-scenario.js';

export const title = 'KV-event flood: event-loop lag and HTTP latency while one worker sends 400k events';

const HERE = dirname(fileURLToPath(import.meta.url));
/** The scenario and its worker threads, as compiled here. */
const SCENARIO_FILES = ['flood-scenario.js', 'firehose-worker.js', 'http-prober.js', 'workload.js'];

/**
 * Runs the scenario in a child process against the build at `distRoot`. For
 * another build, the scenario files are first copied into its dist, so the
 * process loads every native module (zeromq) from that build's node_modules:
 * two copies of zeromq in one process crash it.
 */
function runScenario(distRoot: string): Promise<FloodOutcome> {
  const target = join(resolve(distRoot), 'bench', 'events');
  if (target !== HERE) for (const f of SCENARIO_FILES) copyFileSync(join(HERE, f), join(target, f));
  return new Promise((done, reject) => {
    execFile(
      process.execPath,
      [join(target, 'flood-scenario.js'), resolve(distRoot)],
      { timeout: 300_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        if (err !== null) reject(new Error(`flood scenario on ${distRoot} failed: ${err.message}\n${stderr}`));
        else done(JSON.parse(stdout.trim().split('\n').at(-1)!) as FloodOutcome);
      },
    );
  });
}

function rows(label: string, o: FloodOutcome): BenchRow[] {
  return [
    {
      name: `${label}: event-loop lag during the flood`,
      p50Us: 0,
      p99Us: o.lagP99Ms * 1000,
      opsPerSec: 0,
      note: `p99 ${o.lagP99Ms.toFixed(1)} ms, max ${o.lagMaxMs.toFixed(1)} ms`,
    },
    {
      name: `${label}: HTTP GET in the same process`,
      p50Us: o.http.p50 * 1000,
      p99Us: o.http.p99 * 1000,
      opsPerSec: 0,
      note: `max ${o.http.max.toFixed(1)} ms over ${o.http.n} requests; ${o.notes}`,
    },
  ];
}

export async function run(): Promise<BenchSection> {
  const out: BenchRow[] = [];
  const notes: string[] = [
    'One worker, 782 batches x 512 events (400,384 events), all queued in the SUB socket before ingestion starts (the publisher thread sends while the main thread is held); an HTTP prober thread GETs /health every 5 ms on a new connection. Lag: perf_hooks.monitorEventLoopDelay (1 ms resolution) from the start of ingestion until the last batch is applied. Each build runs in its own child process.',
  ];
  const beforeDist = process.env.KVGATE_BENCH_BEFORE_DIST;
  if (beforeDist !== undefined && beforeDist !== '') out.push(...rows('before', await runScenario(beforeDist)));
  else notes.push('No KVGATE_BENCH_BEFORE_DIST given: only this build is measured.');
  out.push(...rows('after', await runScenario(join(HERE, '..', '..'))));
  return { title, rows: out, notes };
}
