/**
 * The streams soak (`npm run soak`, not part of `npm test`; issue 23): a real
 * `kvgate serve` (under `node --expose-gc`, admin on) in front of fast
 * `kvgate mocker` engines (one process each, KV events on), fed streams over
 * loopback: short and long (1,000-4,000 tokens), chat and completions, read
 * straight, slower than the engine, with pauses and a long stop, or left
 * early on purpose (stream-load.ts has the mix).
 *
 * 1. Saturation: closed loops of 8, 16, 32, ... streams for a step each; the
 *    rate at which streams end stops growing (under 10 % more for twice the
 *    loops) at the saturation rate, the best step's (`capped` in the summary
 *    when it still grew at SOAK_MAX_CONCURRENCY: then a lower bound). Each
 *    step reports the gateway's CPU (cores busy), which says whether the
 *    gateway or what shares its machine (the engines, this client) saturated.
 * 2. Warm-up, then the soak: an open loop (seeded Poisson arrivals) at 60 %
 *    of it, SOAK_SECONDS in all. After the warm-up and at the end the
 *    arrivals stop, every stream ends, every gauge of load must return to 0
 *    (in-flight HTTP requests, the workers' active requests, decode blocks and
 *    prefill tokens, the router queues; and the engines' running and waiting
 *    requests), and the gateway collects garbage (`POST /admin/gc`): the heap
 *    at the end must be within 10 % of the heap after the warm-up.
 *
 * Every stream must end with every token and `[DONE]` (or, for a client that
 * leaves, be freed: the gauges show it), none may pass its deadline (hung),
 * and the open loop gets no rejection. Prints a JSON summary for
 * BENCHMARKS.md.
 *
 * Knobs (environment): SOAK_SECONDS (default 600: warm-up and soak at the
 * rate), SOAK_WARMUP_SECONDS (default a fifth of it, at most 60),
 * SOAK_LOAD_FRACTION (0.6), SOAK_SATURATION_STEP_SECONDS (15),
 * SOAK_MAX_CONCURRENCY (256), SOAK_STREAM_DEADLINE_MS (60000, beyond a
 * stream's planned pauses), SOAK_ENGINES (2), SOAK_SEED (23).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../src/common/index.js';
import { servingUrl, startKvgate, type KvgateProcess } from '../helpers/kvgate-process.js';
import { metric } from '../helpers/metric-sum.js';
import { until } from '../helpers/until.js';
import { heapAfterGc, mib } from './gateway-heap.js';
import { StreamLoad, Tally, streamMix } from './stream-load.js';

const SECONDS = Number(process.env.SOAK_SECONDS ?? 600);
const WARMUP_SECONDS = Number(process.env.SOAK_WARMUP_SECONDS ?? Math.min(60, SECONDS / 5));
const LOAD_FRACTION = Number(process.env.SOAK_LOAD_FRACTION ?? 0.6);
const STEP_SECONDS = Number(process.env.SOAK_SATURATION_STEP_SECONDS ?? 15);
const MAX_CONCURRENCY = Number(process.env.SOAK_MAX_CONCURRENCY ?? 256);
const DEADLINE_MS = Number(process.env.SOAK_STREAM_DEADLINE_MS ?? 60_000);
const ENGINES = Number(process.env.SOAK_ENGINES ?? 2);
const SEED = Number(process.env.SOAK_SEED ?? 23);
const MODEL = 'mock-model';

/** The gauges of load in flight: each must read 0 once every stream has ended. */
const GATEWAY_GAUGES = [
  'kvgate_http_inflight_requests',
  'kvgate_worker_active_requests',
  'kvgate_worker_active_decode_blocks',
  'kvgate_worker_active_prefill_tokens',
  'kvgate_router_queue_pending_requests',
  'kvgate_router_queue_pending_isl_tokens',
];
const ENGINE_GAUGES = ['vllm:num_requests_running', 'vllm:num_requests_waiting'];
/** What else happened to the workers during the run, for reading the figures (a worker ejected, an index cleared). */
const INCIDENT_COUNTERS = {
  retries: 'kvgate_router_retries_total',
  migrations: 'kvgate_router_migrations_total',
  ejections: 'kvgate_worker_ejections_total',
  healthTransitions: 'kvgate_worker_health_transitions_total',
  kvEventGaps: 'kvgate_kv_event_gaps_total',
  kvEventResets: 'kvgate_kv_event_resets_total',
};

const procs: KvgateProcess[] = [];
let dir: string | undefined;
afterAll(async () => {
  await Promise.all(
    procs
      .splice(0)
      .reverse()
      .map((p) => p.stop()),
  );
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

async function startEngines(): Promise<{ url: string; kvEvents: string }[]> {
  return Promise.all(
    Array.from({ length: ENGINES }, async (_, i) => {
      const p = startKvgate([
        'mocker',
        '--count',
        '1',
        '--port',
        '0',
        '--kv-events-port',
        '0',
        '--bootstrap-port',
        '0',
        '--tokenizer',
        'demo',
        '--speedup',
        '1000',
        '--max-model-len',
        '65536',
        '--seed',
        String(SEED + i),
      ]);
      procs.push(p);
      const line = await p.jsonLine(`engine ${i}`, (o) => o.index === 0 && typeof o.url === 'string');
      return { url: String(line.url), kvEvents: (line.kv_events as string[])[0]! };
    }),
  );
}

async function startGateway(engines: readonly { url: string; kvEvents: string }[]): Promise<string> {
  dir = mkdtempSync(join(tmpdir(), 'kvgate-streams-soak-'));
  const config = join(dir, 'kvgate.json');
  writeFileSync(
    config,
    JSON.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      admin: { enabled: true },
      // Preprocessing on the main thread (its caches on the measured heap), bounded small enough to be full by the end of the warm-up.
      preprocess: { threads: 0, segment_cache_bytes: 1024 * 1024 },
      // No access line per request: the gateway's CPU goes to the streams.
      log: { level: 'warn' },
      models: [
        {
          name: MODEL,
          tokenizer: 'demo',
          block_size: 16,
          workers: engines.map((e, i) => ({ id: i + 1, url: e.url, kv_events: e.kvEvents })),
        },
      ],
    }),
  );
  const gateway = startKvgate(['serve', '--config', config], ['--expose-gc']);
  procs.push(gateway);
  return servingUrl(gateway);
}

/** Waits until every gauge of load reads 0 on the gateway and the engines; fails naming those that do not. */
async function gaugesBackToZero(url: string, engines: readonly string[], when: string): Promise<void> {
  const read = async (): Promise<Record<string, number>> => {
    const out: Record<string, number> = {};
    for (const g of GATEWAY_GAUGES) out[g] = await metric(url, g);
    for (const g of ENGINE_GAUGES)
      out[g] = (await Promise.all(engines.map((e) => metric(e, g)))).reduce((a, b) => a + b, 0);
    return out;
  };
  let last: Record<string, number> = {};
  try {
    await until(
      async () => Object.values((last = await read())).every((v) => v === 0),
      `every gauge at 0 ${when}`,
      30_000,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}: ${JSON.stringify(last)}`);
  }
}

const round = (v: number, digits: number): number => Math.round(v * 10 ** digits) / 10 ** digits;

interface Saturation {
  /** Streams ended per second at the best step. */
  readonly perSecond: number;
  readonly capped: boolean;
  readonly steps: Record<string, number>[];
}

/** Closed loops of doubling size until the rate stops growing; the best step's rate (streams ended per second). */
async function saturation(load: StreamLoad, url: string, tally: Tally): Promise<Saturation> {
  const steps: Record<string, number>[] = [];
  let best = 0;
  // Still growing at SOAK_MAX_CONCURRENCY: the rate found is a lower bound of saturation (said in the summary).
  let capped = true;
  for (let concurrency = 8; concurrency <= MAX_CONCURRENCY; concurrency *= 2) {
    const cpu0 = await metric(url, 'process_cpu_seconds_total');
    const from = performance.now();
    const to = from + STEP_SECONDS * 1000;
    const step = new Tally();
    await load.closedLoop(concurrency, to, step);
    const cpu1 = await metric(url, 'process_cpu_seconds_total');
    await load.drain();
    for (const e of step.ended) tally.add(e);
    const perSecond = step.servedWithin(from, to) / STEP_SECONDS;
    const cores = (cpu1 - cpu0) / ((performance.now() - from) / 1000);
    steps.push({ concurrency, streamsPerS: round(perSecond, 2), gatewayCpu: round(cores, 2) });
    const grew = perSecond >= best * 1.1;
    best = Math.max(best, perSecond);
    if (!grew) {
      capped = false;
      break;
    }
  }
  return { perSecond: best, capped, steps };
}

describe('streams soak', () => {
  it(
    `at ${LOAD_FRACTION * 100} % of saturation for ${SECONDS} s: no hung stream, every gauge back to 0, heap within 10 %`,
    async () => {
      const engines = await startEngines();
      const url = await startGateway(engines);
      const rng = seededRng(SEED);
      const load = new StreamLoad(url, streamMix(rng, { deadlineMs: DEADLINE_MS }));
      try {
        const t0 = performance.now();
        const satTally = new Tally();
        const sat = await saturation(load, url, satTally);
        await gaugesBackToZero(
          url,
          engines.map((e) => e.url),
          'after the saturation steps',
        );
        const rate = sat.perSecond * LOAD_FRACTION;
        expect(rate).toBeGreaterThan(0);

        const warmTally = new Tally();
        const warmFrom = performance.now();
        await load.openLoop(rate, warmFrom + WARMUP_SECONDS * 1000, rng, warmTally);
        await load.drain();
        await gaugesBackToZero(
          url,
          engines.map((e) => e.url),
          'after the warm-up',
        );
        const warm = await heapAfterGc(url);
        // What the engines' KV caches hold, mirrored in the prefix index: still filling after the warm-up, it is heap growth that is no leak.
        const warmIndexBlocks = await metric(url, 'kvgate_worker_index_blocks');

        const soakTally = new Tally();
        const soakFrom = performance.now();
        await load.openLoop(rate, soakFrom + (SECONDS - WARMUP_SECONDS) * 1000, rng, soakTally);
        const soakSeconds = (performance.now() - soakFrom) / 1000;
        await load.drain();
        await gaugesBackToZero(
          url,
          engines.map((e) => e.url),
          'after the soak',
        );
        const end = await heapAfterGc(url);
        const endIndexBlocks = await metric(url, 'kvgate_worker_index_blocks');
        const incidents: Record<string, number> = {};
        for (const [name, series] of Object.entries(INCIDENT_COUNTERS)) incidents[name] = await metric(url, series);

        const summary = {
          seconds: Math.round((performance.now() - t0) / 1000),
          engines: ENGINES,
          seed: SEED,
          saturation: {
            streamsPerS: round(sat.perSecond, 2),
            capped: sat.capped,
            stepSeconds: STEP_SECONDS,
            steps: sat.steps,
          },
          rate: {
            fraction: LOAD_FRACTION,
            targetPerS: round(rate, 2),
            achievedPerS: round(soakTally.ended.length / soakSeconds, 2),
          },
          saturationStreams: satTally.summary(),
          warmup: { seconds: WARMUP_SECONDS, ...warmTally.summary() },
          soak: { seconds: Math.round(soakSeconds), ...soakTally.summary() },
          heapMiB: {
            warm: mib(warm.heapUsed),
            end: mib(end.heapUsed),
            arrayBuffersWarm: mib(warm.arrayBuffers),
            arrayBuffersEnd: mib(end.arrayBuffers),
            rssWarm: mib(warm.rss),
            rssEnd: mib(end.rss),
          },
          endOverWarm: round(end.heapUsed / warm.heapUsed, 3),
          indexBlocks: { warm: warmIndexBlocks, end: endIndexBlocks },
          incidents,
        };
        process.stdout.write(`kvgate streams soak: ${JSON.stringify(summary)}\n`);

        for (const t of [satTally, warmTally, soakTally]) {
          expect(t.count('hung'), 'hung streams').toBe(0);
          expect(t.count('failed'), 'broken streams').toBe(0);
        }
        // Below saturation nothing is turned away.
        expect(warmTally.count('rejected') + soakTally.count('rejected'), 'rejected streams at the soak rate').toBe(0);
        expect(end.heapUsed).toBeLessThanOrEqual(warm.heapUsed * 1.1);
      } finally {
        load.close();
      }
    },
    (SECONDS + 8 * STEP_SECONDS + 600) * 1000,
  );
});
