/**
 * One full KV routing decision with `KvRouter.findBestMatch`: hash an
 * 8,192-token prompt (promptHashes), match it in the prefix index
 * (findMatches over the events index and the active-block index), score every
 * (worker, dp_rank) slot with the v1.5 cost model, pick, and book it in the
 * load bookkeeping. Measured across 64 and 256 slots, at block sizes 16
 * (512 blocks per prompt) and 64 (128 blocks, the mocker's default).
 *
 * Workload (seeded): 16 shared "documents" of 8,192 tokens; each slot holds
 * prefixes of 8 of them in the index (as KV events would report); each
 * request is a random-length prefix of one document plus a private suffix up
 * to 8,192 tokens (a quarter are fully private). About 4 requests per slot are
 * in flight: after each timed decision the oldest request is freed (outside
 * the timed region) and every other one has its prefill marked complete, so
 * the bookkeeping stays at steady state with shared in-flight prefixes.
 *
 * The split (hashing / matching / scheduling = scoring + selection + booking)
 * comes from each decision's own timing, as Dynamo's
 * `dynamo_router_overhead_*_ms` metrics do. Each case runs 5 rounds of 1,000
 * decisions and reports the round with the lowest median (the machine is
 * shared), next to `promptHashes` alone timed in the same rounds.
 * Run: npm run bench -- kv-router
 */
import { KvRouter } from '../../src/routing/index.js';
import { seededRng, type KvRouterOptions, type RoutingDecision } from '../../src/core/index.js';
import { promptHashes } from '../../src/wasm/index.js';
import { cpus, loadavg } from 'node:os';
import type { BenchRow, BenchSection } from '../util.js';

export const title = 'KvRouter: one full routing decision (hash 8,192 tokens, match, score, book)';

const PROMPT_TOKENS = 8192;
const DOCS = 16;
const REQUESTS = 512;

interface CaseResult {
  row: BenchRow;
  hashing: number;
  matching: number;
  scheduling: number;
}

function quantile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

function median(values: number[]): number {
  const s = Float64Array.from(values).sort();
  return quantile(s, 0.5);
}

function runCase(slots: number, blockSize: number, config: KvRouterOptions, label: string, rounds: number, iterations: number): CaseResult {
  const rng = seededRng(slots * 1000 + blockSize);
  const tok = (): number => Math.floor(rng() * 150_000);
  const docs = Array.from({ length: DOCS }, () => Uint32Array.from({ length: PROMPT_TOKENS }, tok));
  const router = new KvRouter({ blockSize, config, rng: seededRng(7) });
  // Workers of 1 to 4 dp ranks until `slots` slots.
  let registered = 0;
  for (let w = 0; registered < slots; w++) {
    const size = Math.min(slots - registered, 1 + (w % 4));
    router.addWorker(1000 + w, { dataParallelSize: size });
    registered += size;
  }
  const slotList = router.loads().map((l) => [l.workerId, l.dpRank] as const);
  if (config.useKvEvents !== false) {
    const docHashes = docs.map((d) => promptHashes(d, blockSize));
    for (const [workerId, dpRank] of slotList) {
      for (let k = 0; k < 8; k++) {
        const h = docHashes[Math.floor(rng() * DOCS)]!;
        const depth = 1 + Math.floor(rng() * h.seq.length);
        router.index.applyStored(workerId, dpRank, null, h.seq.subarray(0, depth), h.local.subarray(0, depth));
      }
    }
  }
  const prompts = Array.from({ length: REQUESTS }, () => {
    const p = new Uint32Array(PROMPT_TOKENS);
    const shared = rng() < 0.75 ? Math.floor(rng() * PROMPT_TOKENS) : 0;
    p.set(docs[Math.floor(rng() * DOCS)]!.subarray(0, shared));
    for (let i = shared; i < PROMPT_TOKENS; i++) p[i] = tok();
    return p;
  });
  const inFlight: string[] = [];
  const target = slots * 4;
  let id = 0;
  const decide = (): RoutingDecision => {
    const requestId = `r${id}`;
    const d = router.findBestMatch({ requestId, tokens: prompts[id % REQUESTS]! });
    id++;
    inFlight.push(requestId);
    if (id % 2 === 0) router.markPrefillCompleted(requestId);
    if (inFlight.length > target) router.free(inFlight.shift()!);
    return d;
  };
  // Warm up and fill the bookkeeping to steady state.
  for (let i = 0; i < Math.max(target + 200, 600); i++) decide();
  // Rounds: the machine is shared, so each round is timed separately and the
  // round with the lowest median is reported (with its own p99). Each round
  // also times hashing alone on the same prompts: the same-run baseline.
  let best: { p50: number; p99: number; mean: number; split: [number, number, number]; cpu: number; baseline: number } | undefined;
  const medians: number[] = [];
  for (let round = 0; round < rounds; round++) {
    const totals = new Float64Array(iterations);
    const hashing: number[] = [];
    const matching: number[] = [];
    const scheduling: number[] = [];
    // CPU time of the timed loop (bookkeeping frees included): unlike wall time it excludes
    // preemption by other processes, which dominates the tail on a shared 2-core machine.
    const cpu0 = process.cpuUsage();
    for (let i = 0; i < iterations; i++) {
      const requestId = `r${id}`;
      const tokens = prompts[id % REQUESTS]!;
      id++;
      const t0 = performance.now();
      const d = router.findBestMatch({ requestId, tokens });
      totals[i] = performance.now() - t0;
      hashing.push(d.timing.hashingMs);
      matching.push(d.timing.matchingMs);
      scheduling.push(d.timing.schedulingMs);
      inFlight.push(requestId);
      if (id % 2 === 0) router.markPrefillCompleted(requestId);
      if (inFlight.length > target) router.free(inFlight.shift()!);
    }
    const cpu = process.cpuUsage(cpu0);
    const base = new Float64Array(iterations / 4);
    for (let i = 0; i < base.length; i++) {
      const t0 = performance.now();
      promptHashes(prompts[(id + i) % REQUESTS]!, blockSize);
      base[i] = performance.now() - t0;
    }
    base.sort();
    let sum = 0;
    for (const t of totals) sum += t;
    totals.sort();
    const p50 = quantile(totals, 0.5);
    medians.push(p50 * 1000);
    if (best === undefined || p50 < best.p50) {
      best = {
        p50, p99: quantile(totals, 0.99), mean: sum / iterations,
        split: [median(hashing), median(matching), median(scheduling)],
        cpu: (cpu.user + cpu.system) / iterations, baseline: quantile(base, 0.5),
      };
    }
  }
  const b = best!;
  const us = (ms: number): string => (ms * 1000).toFixed(1);
  return {
    row: {
      name: label,
      p50Us: b.p50 * 1000,
      p99Us: b.p99 * 1000,
      opsPerSec: 1000 / b.mean,
      note: `split (median µs): hashing ${us(b.split[0])} / matching ${us(b.split[1])} / scheduling ${us(b.split[2])}; `
        + `baseline promptHashes alone ${us(b.baseline)} µs; CPU ${b.cpu.toFixed(1)} µs per decision (mean, incl. frees); `
        + `round medians ${medians.map((m) => m.toFixed(1)).join(', ')} µs; ${router.scheduler.activeRequestCount} in flight`,
    },
    hashing: b.split[0],
    matching: b.split[1],
    scheduling: b.split[2],
  };
}

export async function run(): Promise<BenchSection> {
  const rounds = 5;
  const iterations = 1000;
  const cases: CaseResult[] = [];
  for (const blockSize of [64, 16]) {
    for (const slots of [64, 256]) {
      cases.push(runCase(slots, blockSize, {}, `${slots} slots, block size ${blockSize} (${PROMPT_TOKENS / blockSize} blocks)`, rounds, iterations));
    }
  }
  cases.push(runCase(64, 64, { useKvEvents: false }, '64 slots, block size 64, approximate mode (records each decision with a TTL)', rounds, iterations));
  cases.push(runCase(64, 64, { routerTemperature: 0.5 }, '64 slots, block size 64, softmax sampling (temperature 0.5)', rounds, iterations));
  const headline = cases[0]!.row;
  const heavy = cases[2]!.row;
  return {
    title,
    rows: cases.map((c) => c.row),
    notes: [
      `target at 64 slots (block size 64): median < 30 µs: ${headline.p50Us.toFixed(1)} µs (${headline.p50Us < 30 ? 'met' : 'missed'}); p99 < 100 µs: ${headline.p99Us.toFixed(1)} µs (${headline.p99Us < 100 ? 'met' : 'missed'})`,
      `at block size 16 (4x the blocks): median ${heavy.p50Us.toFixed(1)} µs, p99 ${heavy.p99Us.toFixed(1)} µs (${heavy.p50Us < 30 && heavy.p99Us < 100 ? 'met' : 'missed'})`,
      'hashing is the one WASM call over the whole prompt; matching is the events index (one WASM call) plus the walk of the in-flight prompt trie; scheduling is scoring every slot, picking, and booking',
      `load average during the run: ${loadavg().map((x) => x.toFixed(2)).join(' / ')} (1 / 5 / 15 min) on ${cpus().length} CPUs; wall-clock tails grow with it, CPU time does not`,
    ],
  };
}
