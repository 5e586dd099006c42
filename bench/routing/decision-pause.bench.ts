/**
 * The routing decision after a pause: what the same decision costs right after another, and after the thread
 * has done something else or slept. The KV-event end-to-end bench (`events/e2e`) makes one decision per
 * millisecond between event batches, and there the whole decision reads well above this bench's back-to-back
 * figure; this bench separates the causes in one process, with no events.
 *
 * The router and prompts are the end-to-end bench's: 32 workers of one dp rank, 1,024 prompts of one
 * 8,192-token document with random tails, block size 16, about 4 requests a worker in flight. The kinds of
 * timed work alternate: the whole decision from the prompt's tokens (hash, match, score, book), also right after
 * an untimed one on another router (below); the router's
 * part given the hashes (as `kvgate serve`'s main thread decides; its hashes come from a preprocessing
 * thread), also on a router without the in-flight trie and as a query; the router's part for the prompt's
 * first block alone (the path every decision runs, whatever its length), with and without the trie; the
 * router's part right after an untimed one on another router (the same code, its own bookings and copies of
 * the hashes: the code warm, the data cold); and a fixed integer loop that touches no memory (the control:
 * how fast the core itself runs). Before each, the thread does one of:
 * - nothing (back to back);
 * - 1 ms of a loop that touches almost nothing (it reads the clock);
 * - a sweep of 16 MiB (the core's caches displaced, the thread awake);
 * - a sleep of 50 µs, 1 ms or 5 ms (`Atomics.wait`: the thread blocks in the kernel, as the event loop does
 *   between events, and the core idles or runs something else).
 * The cases run interleaved, in rounds, so each sees the same background load.
 * Each kind's share of the gap: the trie (the part against the part without it), the booking (against the
 * query), the fixed path (the first block alone), cold code against cold data (the part against the part
 * with its code warm).
 * Run: npm run bench -- decision-pause
 */
import { seededRng } from '../../src/common/index.js';
import type { KvRouterOptions } from '../../src/core/index.js';
import { KvRouter, type KvRouteRequest } from '../../src/routing/index.js';
import type { BenchRow, BenchSection } from '../util.js';
import { quantile } from './decision-stats.js';
import { oneDocumentPrompts } from './one-document-prompts.js';

export const title = 'The routing decision after a pause: back to back, after other work, after a sleep';

const BLOCK = 16;
const PROMPT_TOKENS = 8192;
const ENGINES = 32;
const ROUNDS = 5;
/** Timed operations per case and round, a quarter of each kind. */
const PER_ROUND = 700;
/** The control loop's iterations (about 7 µs on a 3 GHz core). */
const ALU_STEPS = 5000;
const WARMUP = 3000;

interface Pause {
  readonly label: string;
  readonly before: () => void;
}

const sleeper = new Int32Array(new SharedArrayBuffer(4));
const sleep = (ms: number) => (): void => void Atomics.wait(sleeper, 0, 0, ms);
const sweepArea = new Float64Array(2 << 20);
let sink = 0;

/** The control: dependent multiply-adds, no memory. */
function alu(): number {
  let x = sink | 1;
  for (let i = 0; i < ALU_STEPS; i++) x = (Math.imul(x, 1664525) + 1013904223) | 0;
  return x;
}

const KINDS = [
  'whole',
  'whole, code warm',
  'part',
  'part, no trie',
  'part, query',
  'first block',
  'first block, no trie',
  'part, code warm',
  'control',
] as const;
type Kind = (typeof KINDS)[number];

const PAUSES: readonly Pause[] = [
  { label: 'back to back', before: () => undefined },
  {
    label: 'after 1 ms of a loop that touches almost nothing',
    before: () => {
      const end = performance.now() + 1;
      while (performance.now() < end) sink++;
    },
  },
  {
    label: 'after sweeping 16 MiB',
    before: () => {
      for (let i = 0; i < sweepArea.length; i += 8) sink += sweepArea[i]!;
    },
  },
  { label: 'after sleeping 50 µs', before: sleep(0.05) },
  { label: 'after sleeping 1 ms', before: sleep(1) },
  { label: 'after sleeping 5 ms', before: sleep(5) },
];

export async function run(): Promise<BenchSection> {
  const prompts = oneDocumentPrompts(1024, PROMPT_TOKENS, BLOCK);
  const firstBlocks = prompts.map((p) => ({ local: p.hashes.local.subarray(0, 1), seq: p.hashes.seq.subarray(0, 1) }));
  /** A router of 32 workers with its requests in flight (about 4 a worker, the oldest freed). */
  const routerOf = (config: KvRouterOptions): { book(req: KvRouteRequest): void; router: KvRouter } => {
    const router = new KvRouter({ blockSize: BLOCK, config, rng: seededRng(7) });
    for (let i = 0; i < ENGINES; i++) router.addWorker(i + 1, { dataParallelSize: 1 });
    const inFlight: string[] = [];
    return {
      router,
      book(req) {
        router.findBestMatch(req);
        inFlight.push(req.requestId);
        if (inFlight.length > ENGINES * 4) router.free(inFlight.shift()!);
      },
    };
  };
  const main = routerOf({});
  const noTrie = routerOf({ routerTrackActiveBlocks: false });
  // The same router's code on other data: its own bookings and its own copies of the prompts' hashes.
  const other = routerOf({});
  const otherHashes = prompts.map((p) => ({ local: p.hashes.local.slice(), seq: p.hashes.seq.slice() }));
  const otherTokens = prompts.map((p) => p.tokens.slice());
  let id = 0;
  /** One timed operation of `kind`, µs. */
  const time = (kind: Kind): number => {
    const k = id % prompts.length;
    const p = prompts[k]!;
    const requestId = `r${id++}`;
    const isl = p.tokens.length;
    const o = (k * 7 + 1) % prompts.length;
    if (kind === 'part, code warm') other.book({ requestId, hashes: otherHashes[o]!, isl });
    else if (kind === 'whole, code warm') other.book({ requestId, tokens: otherTokens[o]! });
    const t0 = performance.now();
    if (kind === 'whole' || kind === 'whole, code warm') main.book({ requestId, tokens: p.tokens });
    else if (kind === 'part, no trie') noTrie.book({ requestId, hashes: p.hashes, isl });
    else if (kind === 'part' || kind === 'part, code warm') main.book({ requestId, hashes: p.hashes, isl });
    else if (kind === 'part, query') main.router.findBestMatch({ requestId, hashes: p.hashes, isl }, { mode: 'query' });
    else if (kind === 'first block') main.book({ requestId, hashes: firstBlocks[k]!, isl: BLOCK });
    else if (kind === 'first block, no trie') noTrie.book({ requestId, hashes: firstBlocks[k]!, isl: BLOCK });
    else sink += alu();
    return (performance.now() - t0) * 1000;
  };
  for (let i = 0; i < WARMUP; i++) time(KINDS[i % KINDS.length]!);
  const samples = PAUSES.map(() => KINDS.map(() => [] as number[]));
  const order = seededRng(3);
  for (let r = 0; r < ROUNDS; r++) {
    PAUSES.forEach((pause, c) => {
      for (let i = 0; i < PER_ROUND; i++) {
        pause.before();
        const kind = Math.floor(order() * KINDS.length);
        samples[c]![kind]!.push(time(KINDS[kind]!));
      }
    });
  }
  const stats = samples.map((byKind) => byKind.map((xs) => Float64Array.from(xs).sort()));
  const p50 = (c: number, kind: number): number => quantile(stats[c]![kind]!, 0.5);
  const rows: BenchRow[] = PAUSES.map((pause, c) => {
    const ratio = (kind: number): string => `${(p50(c, kind) / p50(0, kind)).toFixed(2)}x`;
    return {
      name: pause.label,
      p50Us: p50(c, 0),
      p99Us: quantile(stats[c]![0]!, 0.99),
      opsPerSec: 1e6 / p50(c, 0),
      note:
        `whole decision ${ratio(0)} back to back; ` +
        KINDS.slice(1)
          .map((kind, j) => `${kind} ${p50(c, j + 1).toFixed(1)} µs (${ratio(j + 1)})`)
          .join('; '),
    };
  });
  return {
    title,
    rows,
    notes: [
      `p50 and p99 are the whole decision (hash 8,192 tokens, match, score, book); the note's figures are p50s, ` +
        `each ratio against the same kind back to back; about ${Math.round((ROUNDS * PER_ROUND) / KINDS.length)} of each ` +
        `kind per case, in a seeded random order, ` +
        `${ENGINES} workers, block size ${BLOCK}`,
      'the work is the same in every case: what differs is the state the core is in when it starts',
      `(checksum: ${sink !== 0 ? 'nonzero' : 'zero'})`,
    ],
  };
}
