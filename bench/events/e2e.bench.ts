/**
 * KV events end to end from ZMQ: engines simulated by publisher threads send the seeded workload at a
 * target rate to a real gateway-side ingestion (`KvEventManager` feeding a `KvRouter`'s prefix index),
 * which meanwhile makes a routing decision every millisecond. Per mode: events applied per second, the
 * event-loop lag (p50 / p99 / max, `monitorEventLoopDelay`) and the decision's p50 / p99. The modes are
 * ingestion thread counts, 0 being today's single-thread path (the sockets and the decoding on the main
 * thread), each run in a process of its own (e2e-scenario.ts), so before and after come from one run.
 *
 * Sizes (environment): KVGATE_BENCH_E2E_THREADS (modes, default "0,2"), KVGATE_BENCH_E2E_ENGINES (8),
 * KVGATE_BENCH_E2E_PUBLISHERS (publisher threads, 2), KVGATE_BENCH_E2E_RATE (offered events/s over all
 * engines, 200,000), KVGATE_BENCH_E2E_SECONDS (5), KVGATE_BENCH_E2E_EVENTS_PER_BATCH (8), and the gateway's
 * per-turn bounds KVGATE_BENCH_E2E_EVENTS_PER_TURN / KVGATE_BENCH_E2E_TURN_MS (kv_events.events_per_turn,
 * turn_budget_ms; their defaults, 2,000 and 4 ms, unless set), and KVGATE_BENCH_E2E_WARM=1 for a third decision
 * row: the whole decision right after another (its code and data in the CPU's caches). The gateway's KV-event
 * metrics are kept, as in `kvgate serve`; KVGATE_BENCH_E2E_METRICS=0 leaves them out (the harness before the
 * twelfth round).
 * Run: node --expose-gc dist/bench/run.js events/e2e
 */
import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BenchRow, BenchSection } from '../util.js';
import type { E2eOutcome } from './e2e-scenario.js';

export const title = 'KV events end to end from ZMQ: events/s applied, event-loop lag and routing decision meanwhile';

const HERE = dirname(fileURLToPath(import.meta.url));

function runMode(threads: number): Promise<E2eOutcome> {
  return new Promise((done, reject) => {
    execFile(
      process.execPath,
      [join(HERE, 'e2e-scenario.js'), String(threads)],
      { timeout: 600_000, maxBuffer: 1 << 20 },
      (err, stdout, stderr) => {
        const last = stdout.trim().split('\n').at(-1) ?? '';
        if (err !== null || !last.startsWith('{'))
          reject(
            new Error(`e2e scenario with ${threads} thread(s) failed: ${err?.message ?? 'no outcome'}\n${stderr}`),
          );
        else done(JSON.parse(last) as E2eOutcome);
      },
    );
  });
}

function rows(o: E2eOutcome): BenchRow[] {
  const mode = o.threads === 0 ? 'main thread only (before)' : `${o.threads} ingestion thread(s)`;
  const n = (x: number): string => Math.round(x).toLocaleString('en-US');
  return [
    {
      name: `${mode}: events applied`,
      p50Us: 0,
      p99Us: 0,
      opsPerSec: o.appliedEventsPerSec,
      note:
        `${n(o.applied)} applied of ${n(o.sent)} sent, offered at ${n(o.offeredEventsPerSec)}/s, ` +
        `all applied ${(o.elapsedMs / 1000).toFixed(2)} s after the start; gaps ${o.gaps}, replayed batches ` +
        `${o.replayedBatches}, resets ${o.resets}, drops ${o.drops}; main thread busy ` +
        `${(o.mainUtilization * 100).toFixed(0)} %, ${o.mainUsPerEvent.toFixed(2)} µs per event applied`,
    },
    {
      name: `${mode}: event-loop lag`,
      p50Us: o.lagP50Ms * 1000,
      p99Us: o.lagP99Ms * 1000,
      opsPerSec: 0,
      note: `max ${o.lagMaxMs.toFixed(1)} ms`,
    },
    {
      name: `${mode}: routing decision meanwhile`,
      p50Us: o.decisionP50Us,
      p99Us: o.decisionP99Us,
      opsPerSec: 0,
      note:
        `${n(o.decisions)} decisions, one per ${o.warmDecision === null ? 2 : 3} ms ` +
        '(hash 8,192 tokens at block size 16, match, score, book); ' +
        `the same before any event flowed: p50 ${o.quietDecisionP50Us.toFixed(1)} µs`,
    },
    {
      name: `${mode}: the router's part meanwhile, given the hashes`,
      p50Us: o.hashedDecisionP50Us,
      p99Us: o.hashedDecisionP99Us,
      opsPerSec: 0,
      note:
        "match, score, book, with the prompt's hashes from a preprocessing thread (what kvgate serve's main " +
        `thread does per request), alternating with the row above; before any event flowed: p50 ` +
        `${o.quietHashedDecisionP50Us.toFixed(1)} µs`,
    },
    ...(o.warmDecision === null
      ? []
      : [
          {
            name: `${mode}: the routing decision right after another`,
            p50Us: o.warmDecision.p50Us,
            p99Us: 0,
            opsPerSec: 0,
            note:
              'the whole decision, timed right after an untimed one on another prompt (its code and the ' +
              `router's state in the CPU's caches); before any event flowed: p50 ${o.warmDecision.quietP50Us.toFixed(1)} µs`,
          },
        ]),
  ];
}

/** KVGATE_BENCH_E2E_THREADS: thread counts, 0 (the main thread alone) allowed. */
function threadModes(): number[] {
  const raw = process.env.KVGATE_BENCH_E2E_THREADS ?? '0,2';
  return raw.split(',').map((s) => {
    const n = Number(s.trim());
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`KVGATE_BENCH_E2E_THREADS: ${s} is not a thread count`);
    return n;
  });
}

export async function run(): Promise<BenchSection> {
  const out: BenchRow[] = [];
  for (const threads of threadModes()) out.push(...rows(await runMode(threads)));
  return {
    title,
    rows: out,
    notes: [
      'Workload: the events/ingest loop (chains of 16-token blocks, 2 blocks stored per event, 1 removed per ' +
        'event, vLLM tagged arrays), each engine its own sequence; lag from monitorEventLoopDelay at 1 ms ' +
        'resolution from the start until the last batch is applied.',
    ],
  };
}
