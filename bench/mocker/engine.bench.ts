/**
 * The simulated engine's own cost, which bounds how fast offline replay runs:
 * - one EngineCore.step in steady state with up to 256 running requests
 *   (512-token prompts, 128 generated tokens, finished requests replaced);
 * - a whole virtual-time run of 1,000 requests (10 shared 512-token prefixes,
 *   ~20 requests/s arrivals), reported as simulated requests per wall second;
 * - encoding one KV-event batch (a 32-block BlockStored) in both encodings.
 * Run: npm run bench -- mocker
 */
import { createEngineCore, createVirtualEngine, encodeEventBatch, type KvEvent } from '../../src/mocker/index.js';
import { seededRng } from '../../src/common/index.js';
import { timeAll, type BenchSection } from '../util.js';

export const title = 'Mocker: engine step, virtual-time replay, KV-event encoding';

function tokens(n: number, seed: number): number[] {
  const rng = seededRng(seed);
  return Array.from({ length: n }, () => Math.floor(rng() * 50_000));
}

function virtualRun(): { wallMs: number; simulatedMs: number; requests: number } {
  const ve = createVirtualEngine({ engineHashSeed: 1n });
  const rng = seededRng(42);
  const prefixes = Array.from({ length: 10 }, (_, i) => tokens(512, 1000 + i));
  let t = 0;
  for (let i = 0; i < 1000; i++) {
    t += rng() * 50;
    ve.submit(
      {
        id: `r${i}`,
        promptTokens: [...prefixes[i % 10]!, ...tokens(64 + Math.floor(rng() * 256), 5000 + i)],
        maxTokens: 32 + Math.floor(rng() * 96),
        seed: i,
      },
      t,
    );
  }
  const start = performance.now();
  const end = ve.runUntilIdle();
  return { wallMs: performance.now() - start, simulatedMs: end, requests: 1000 };
}

export async function run(): Promise<BenchSection> {
  // Steady state: keep 256 requests in flight.
  const core = createEngineCore({ engineHashSeed: 1n, maxNumSeqs: 256 });
  let next = 0;
  const prompts = Array.from({ length: 64 }, (_, i) => tokens(512, i));
  const add = (): void => {
    core.add({ id: `s${next}`, promptTokens: prompts[next % 64]!, maxTokens: 128, seed: next }, 0);
    next++;
  };
  for (let i = 0; i < 256; i++) add();
  let now = 0;
  let steps = 0;
  let generated = 0;
  const step = (): void => {
    const r = core.step(now);
    now += r.durationMs;
    steps++;
    generated += r.outputs.length;
    for (let i = 0; i < r.finished.length; i++) add();
  };
  for (let i = 0; i < 300; i++) step(); // warm into steady state
  if (core.stats().running < 200) throw new Error(`steady state not reached: ${core.stats().running} running`);

  const check = virtualRun();
  if (check.wallMs > 5000) throw new Error(`virtual run too slow: ${check.wallMs} ms`);

  const stored: KvEvent = {
    type: 'stored',
    blockHashes: Array.from({ length: 32 }, (_, i) => 0x8000_0000_0000_0000n + BigInt(i) * 0x1234_5678_9abcn),
    parentBlockHash: 0xdead_beef_dead_beefn,
    tokenIds: tokens(512, 7),
    blockSize: 16,
    loraName: null,
    cacheSalt: null,
  };
  const stepsBefore = steps;
  const genBefore = generated;
  const rows = await timeAll({
    'EngineCore.step, ~256 running requests': step,
    'virtual run: 1,000 requests to completion': () => virtualRun(),
    'encode KV-event batch, 32-block BlockStored (array)': () =>
      encodeEventBatch(1.5, [stored], 0, { encoding: 'array', flavour: 'vllm' }),
    'encode KV-event batch, 32-block BlockStored (map)': () =>
      encodeEventBatch(1.5, [stored], 0, { encoding: 'map', flavour: 'vllm' }),
  });
  const tokensPerStep = (generated - genBefore) / (steps - stepsBefore);
  const runRow = rows[1]!;
  rows[0]!.note = `${tokensPerStep.toFixed(0)} tokens generated per step`;
  runRow.note = `${(1000 / (runRow.p50Us / 1e6)).toFixed(0)} simulated requests per wall second; ${(check.simulatedMs / 1000).toFixed(0)} s of simulated time`;
  return {
    title,
    rows,
    notes: [
      `Target: 1,000 requests in virtual time in under 5 s of wall time; measured ${(runRow.p50Us / 1000).toFixed(0)} ms (median).`,
    ],
  };
}
