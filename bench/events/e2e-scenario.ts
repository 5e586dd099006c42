/**
 * One mode of the end-to-end ingestion bench, in a process of its own (e2e.bench.ts starts it):
 * `node e2e-scenario.js <ingest threads>`. Publisher threads (rate-publisher.ts) simulate the engines;
 * this process is the gateway side: a `KvRouter` whose prefix index a real `KvEventManager` keeps
 * true from those engines over ZMQ (with `ingestThreads` threads, 0 = everything on the main thread),
 * while the main thread makes one routing decision (hash an 8,192-token prompt at block size 16,
 * match, score, book) every millisecond and `monitorEventLoopDelay` watches its lag. Prints one JSON
 * line: `E2eOutcome`.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { seededRng } from '../../src/common/index.js';
import { KvEventApplier, KvEventManager, TieredPrefixIndex } from '../../src/events/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { eventHooks } from '../../src/routing/event-hooks.js';
import { KvRouter } from '../../src/routing/index.js';
import { oneDocumentPrompts, type DecisionPrompt } from '../routing/one-document-prompts.js';
import type { RatePublisherConfig } from './rate-publisher.js';

export interface E2eOutcome {
  threads: number;
  offeredEventsPerSec: number;
  appliedEventsPerSec: number;
  applied: number;
  /** Events the engines sent. */
  sent: number;
  /** From 'go' until the last batch sent was applied, ms. */
  elapsedMs: number;
  lagP50Ms: number;
  lagP99Ms: number;
  lagMaxMs: number;
  decisionP50Us: number;
  decisionP99Us: number;
  decisions: number;
  /** The same decisions before any event flowed, p50 (µs). */
  quietDecisionP50Us: number;
  /** The router's part given the prompt's hashes (as `kvgate serve`'s main thread decides), p50 / p99 (µs). */
  hashedDecisionP50Us: number;
  hashedDecisionP99Us: number;
  quietHashedDecisionP50Us: number;
  /**
   * With KVGATE_BENCH_E2E_WARM=1, a third kind of decision: the whole decision made right after another whole
   * decision (on another prompt, untimed, freed at once), p50 (µs), loaded and quiet. Its code
   * and the router's state are then in the CPU's caches, as in a tight loop: the gap to `decisionP50Us` is
   * what a decision pays for running cold, once per millisecond between other work. null without it.
   */
  warmDecision: { readonly p50Us: number; readonly quietP50Us: number } | null;
  /**
   * The main thread's busy time (event-loop utilization) per event applied, µs: its whole work (receiving,
   * judging and applying the events, the decisions, timers) divided by the events. Where the ingestion
   * threads are the cap (fewer cores than threads need), this, not the rate, shows the main thread's cost.
   */
  mainUsPerEvent: number;
  /** The main thread's event-loop utilization over the run, 0 to 1. */
  mainUtilization: number;
  gaps: number;
  replayedBatches: number;
  resets: number;
  drops: number;
}

const env = (name: string, fallback: number): number => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
  return v;
};

const BLOCK = 16;
const PROMPT_TOKENS = 8192;
const threads = Number(process.argv[2] ?? 0);
const engines = env('KVGATE_BENCH_E2E_ENGINES', 8);
const publishers = Math.min(engines, env('KVGATE_BENCH_E2E_PUBLISHERS', 2));
const rate = env('KVGATE_BENCH_E2E_RATE', 200_000);
const seconds = env('KVGATE_BENCH_E2E_SECONDS', 5);
const eventsPerBatch = env('KVGATE_BENCH_E2E_EVENTS_PER_BATCH', 8);
/** Adds the warm decision (`E2eOutcome.warmDecision`) to the alternation. */
const warmKind = process.env.KVGATE_BENCH_E2E_WARM === '1';
/**
 * The gateway's KV-event metrics (`kvgate_kv_events_*`, counted per event on the main thread), as `kvgate serve`
 * keeps them; `KVGATE_BENCH_E2E_METRICS=0` leaves them out, as the harness did before the twelfth round.
 */
const withMetrics = process.env.KVGATE_BENCH_E2E_METRICS !== '0';
/** The gateway's per-turn bounds (`kv_events.events_per_turn`, `turn_budget_ms`); their defaults unless set. */
const perTurn = process.env.KVGATE_BENCH_E2E_EVENTS_PER_TURN;
const turnMs = process.env.KVGATE_BENCH_E2E_TURN_MS;

function startPublishers(): { workers: Worker[]; ready: Promise<{ pub: string; replay: string }[]> } {
  const workers: Worker[] = [];
  const parts: Promise<{ pub: string; replay: string }[]>[] = [];
  for (let p = 0; p < publishers; p++) {
    const mine = Math.floor(engines / publishers) + (p < engines % publishers ? 1 : 0);
    const workerData: RatePublisherConfig = {
      engines: mine,
      eventsPerSec: (rate * mine) / engines,
      seconds,
      encoding: 'vllm-array',
      eventsPerBatch,
    };
    const w = new Worker(new URL('./rate-publisher.js', import.meta.url), { workerData });
    workers.push(w);
    parts.push(
      new Promise((resolve, reject) => {
        w.once('message', (m: { endpoints: { pub: string; replay: string }[] }) => resolve(m.endpoints));
        w.once('error', reject);
      }),
    );
  }
  return { workers, ready: Promise.all(parts).then((all) => all.flat()) };
}

/** Prompts the decisions cycle through. */
const PROMPTS = 1024;
/** How long the decisions run before the engines start (the quiet figure). */
const QUIET_MS = 3000;

/**
 * Decision timings, µs, sorted: the whole decision from tokens, the router's part given the hashes, and (only with
 * `warmKind`) the whole decision right after another.
 */
interface Decisions {
  readonly fromTokens: Float64Array;
  readonly fromHashes: Float64Array;
  readonly afterAnother: Float64Array;
}

/**
 * One decision per millisecond on the main thread, timed; returns a stop function with the timings (it
 * frees the requests still booked). Decisions alternate between the whole decision from the prompt's tokens
 * (hash 8,192 tokens, match, score, book) and the part `kvgate serve` makes on its main thread, given the
 * hashes a preprocessing thread computed (match, score, book), and with `warmKind` a third: the whole decision
 * timed right after an untimed one. The prompts are made up front, so the main thread's time goes to the
 * gateway's work, not to the harness's random numbers.
 */
function decide(router: KvRouter, prompts: readonly DecisionPrompt[]): () => Decisions {
  const timings: [number[], number[], number[]] = [[], [], []];
  const kinds = warmKind ? 3 : 2;
  const inFlight: string[] = [];
  let id = 0;
  let stopped = false;
  const tick = (): void => {
    if (stopped) return;
    const p = prompts[id % prompts.length]!;
    const kind = id % kinds;
    const requestId = `r${id++}`;
    if (kind === 2) {
      // The warm-up decision: another prompt, booked and freed, untimed.
      const other = prompts[(id * 7) % prompts.length]!;
      router.findBestMatch({ requestId: `${requestId}w`, tokens: other.tokens });
      router.free(`${requestId}w`);
    }
    const t0 = performance.now();
    if (kind === 1) router.findBestMatch({ requestId, hashes: p.hashes, isl: p.tokens.length });
    else router.findBestMatch({ requestId, tokens: p.tokens });
    timings[kind]!.push((performance.now() - t0) * 1000);
    inFlight.push(requestId);
    if (inFlight.length > engines * 4) router.free(inFlight.shift()!);
    setTimeout(tick, 1);
  };
  setTimeout(tick, 1);
  const sorted = (xs: number[]): Float64Array => Float64Array.from(xs).sort();
  return () => {
    stopped = true;
    for (const r of inFlight) router.free(r);
    return { fromTokens: sorted(timings[0]), fromHashes: sorted(timings[1]), afterAnother: sorted(timings[2]) };
  };
}

const q = (sorted: Float64Array, p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? 0;

async function main(): Promise<void> {
  const { workers, ready } = startPublishers();
  // Listened to from the start: a publisher may end while the manager closes.
  const exited = workers.map((w) => new Promise((r) => w.once('exit', r)));
  const endpoints = await ready;
  const router = new KvRouter({ blockSize: BLOCK, config: {}, rng: seededRng(7) });
  for (let i = 0; i < engines; i++) router.addWorker(i + 1, { dataParallelSize: 1 });
  const applier = new KvEventApplier({ blockSize: BLOCK, indexes: new TieredPrefixIndex(router.index) });
  const watch = { blockSizeMismatch: (): void => undefined, replayed: (): void => undefined };
  const manager = new KvEventManager({
    applier,
    ingestThreads: threads,
    ...(withMetrics ? { hooks: eventHooks(new KvgateMetrics({ processMetrics: false }), watch, BLOCK) } : {}),
    ...(perTurn !== undefined ? { maxEventsPerTurn: Number(perTurn) } : {}),
    ...(turnMs !== undefined ? { maxTurnMs: Number(turnMs) } : {}),
  });
  for (let i = 0; i < engines; i++)
    await manager.add({
      workerId: i + 1,
      dpRank: 0,
      endpoint: endpoints[i]!.pub,
      replayEndpoint: endpoints[i]!.replay,
      topic: 'kv-events',
    });
  // The same decisions with no event flowing first (prompts and in-flight load alike): what ingestion adds.
  const prompts = oneDocumentPrompts(PROMPTS, PROMPT_TOKENS, BLOCK);
  // A second of decisions to warm the JIT first, not recorded.
  const stopWarm = decide(router, prompts);
  await new Promise((r) => setTimeout(r, 1000));
  stopWarm();
  const stopQuiet = decide(router, prompts);
  await new Promise((r) => setTimeout(r, QUIET_MS));
  const quiet = stopQuiet();
  const lag = monitorEventLoopDelay({ resolution: 1 });
  const done = workers.map((w) => new Promise<{ sent: number[]; events: number }>((r) => w.once('message', r)));
  lag.enable();
  const stopDeciding = decide(router, prompts);
  const elu0 = performance.eventLoopUtilization();
  const start = performance.now();
  for (const w of workers) w.postMessage('go');
  const reports = await Promise.all(done);
  const sent = reports.flatMap((d) => d.sent);
  const slots = Array.from({ length: engines }, (_, i) => manager.subscriber({ workerId: i + 1, dpRank: 0 })!.stream);
  const caughtUp = (): boolean =>
    slots.every((s, i) => s.cursor === BigInt(sent[i]! - 1) && !s.recovering && s.pendingCount === 0);
  while (!caughtUp() && performance.now() - start < seconds * 1000 + 60_000) await new Promise((r) => setTimeout(r, 1));
  const elapsedMs = performance.now() - start;
  const elu = performance.eventLoopUtilization(elu0);
  lag.disable();
  const decisions = stopDeciding();
  const s = manager.counters.snapshot();
  const applied = Object.values(s.events).reduce((n, byStatus) => n + byStatus.ok + byStatus.not_found, 0);
  const out: E2eOutcome = {
    threads,
    offeredEventsPerSec: rate,
    appliedEventsPerSec: (applied / elapsedMs) * 1000,
    applied,
    sent: reports.reduce((n, d) => n + d.events, 0),
    elapsedMs,
    lagP50Ms: lag.percentile(50) / 1e6,
    lagP99Ms: lag.percentile(99) / 1e6,
    lagMaxMs: lag.max / 1e6,
    decisionP50Us: q(decisions.fromTokens, 0.5),
    decisionP99Us: q(decisions.fromTokens, 0.99),
    decisions: decisions.fromTokens.length,
    quietDecisionP50Us: q(quiet.fromTokens, 0.5),
    hashedDecisionP50Us: q(decisions.fromHashes, 0.5),
    hashedDecisionP99Us: q(decisions.fromHashes, 0.99),
    quietHashedDecisionP50Us: q(quiet.fromHashes, 0.5),
    warmDecision: warmKind ? { p50Us: q(decisions.afterAnother, 0.5), quietP50Us: q(quiet.afterAnother, 0.5) } : null,
    mainUsPerEvent: applied > 0 ? (elu.active * 1000) / applied : 0,
    mainUtilization: elu.utilization,
    gaps: s.gaps,
    replayedBatches: s.replayedBatches,
    resets: Object.values(s.resets).reduce((a, b) => a + b, 0),
    drops: Object.values(s.dropped).reduce((a, b) => a + b, 0),
  };
  for (const w of workers) w.postMessage('stop');
  await manager.close();
  await Promise.all(exited);
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

void main();
