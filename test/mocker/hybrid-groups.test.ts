/**
 * The mocker as a hybrid engine (`kvGroups`): per-group caching, eviction and KV events, and `cached_tokens`
 * by the rule every group must serve. Its events, encoded as vLLM encodes them and applied to kvgate's group
 * indexes, let the router predict exactly the hits the engine reports: the exact-hit share (predicted ==
 * engine-reported cached tokens) of full + sliding window and full + Mamba engines is within 1 percentage
 * point of the full-attention engine's under the same seeded traffic, while the one-group index of before
 * mispredicts the sliding-window engine.
 */
import { describe, expect, it } from 'vitest';
import { seededRng, ManualClock } from '../../src/common/index.js';
import { decodeKvEventBatch, KvEventApplier, KvGroupIndexes, TieredPrefixIndex } from '../../src/events/index.js';
import { EngineCore, type StepResult } from '../../src/mocker/index.js';
import { encodeEventBatch } from '../../src/mocker/kv-events.js';
import { engineCoreOptions, resolveMockerOptions } from '../../src/mocker/options.js';
import { KvRouter } from '../../src/routing/index.js';
import { fallbackTokenizer } from '../../src/tokenizer/index.js';
import { PrefixIndex } from '../../src/wasm/index.js';

const BS = 16;

function drain(c: EngineCore, start: number): { steps: StepResult[]; end: number } {
  const steps: StepResult[] = [];
  let now = start;
  for (let guard = 0; !c.isIdle() && guard < 100_000; guard++) {
    const r = c.step(now);
    steps.push(r);
    now += r.durationMs > 0 ? r.durationMs : 1;
  }
  return { steps, end: now };
}

/** Seeded traffic on two engines of one layout; returns the exact-hit share of the router's predictions. */
function exactShare(kvGroups: string | undefined, groupAware: boolean): number {
  const rng = seededRng(42);
  const cores = [1, 2].map(
    (w) =>
      new EngineCore(
        engineCoreOptions(
          resolveMockerOptions({ engineHashSeed: BigInt(w * 977), numGpuBlocks: 120, blockSize: BS, kvGroups }),
          fallbackTokenizer().sampleVocabulary().ids,
        ),
      ),
  );
  const index = new PrefixIndex();
  const groups = groupAware ? new KvGroupIndexes({ primary: index }) : undefined;
  const kv = new KvRouter({ blockSize: BS, clock: new ManualClock(), rng: seededRng(1), index, kvGroups: groups });
  const applier = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(index), groups });
  for (const w of [1, 2]) kv.addWorker(w);
  const prefixes = Array.from({ length: 5 }, (_, p) => Array.from({ length: 8 * BS }, (_, i) => 100 * p + i + 1));
  let now = 0;
  let exact = 0;
  const N = 150;
  for (let n = 0; n < N; n++) {
    const prefix = prefixes[Math.floor(rng() * prefixes.length)]!;
    const tail = Array.from({ length: 1 + Math.floor(rng() * 4) * BS + 3 }, () => 20_000 + Math.floor(rng() * 50));
    const prompt = [...prefix, ...tail];
    const worker = 1 + Math.floor(rng() * 2);
    const d = kv.findBestMatch(
      { requestId: `r${n}`, tokens: prompt, routing: { backendInstanceId: worker } },
      { mode: 'query' },
    );
    const core = cores[worker - 1]!;
    core.add({ id: `r${n}`, promptTokens: prompt, maxTokens: 2 + Math.floor(rng() * 20), seed: n }, now);
    const run = drain(core, now);
    now = run.end;
    const reported = run.steps.flatMap((s) => s.admitted)[0]!.cachedTokens;
    if (Math.min(prompt.length, d.overlapBlocks * BS) === reported) exact++;
    const payload = encodeEventBatch(
      1.5,
      run.steps.flatMap((s) => s.kvEvents),
      0,
      { encoding: 'array', flavour: 'vllm' },
    );
    const decoded = decodeKvEventBatch(payload);
    if (!decoded.ok) throw new Error(decoded.error.message);
    expect(decoded.batch.errors).toEqual([]);
    applier.applyBatch({ workerId: worker, dpRank: 0 }, decoded.batch);
  }
  return exact / N;
}

describe('the mocker as a hybrid engine', () => {
  it('is predicted as exactly as a full-attention engine (exact-hit share within 1 point)', () => {
    const full = exactShare(undefined, true);
    const sliding = exactShare('full,sliding:48', true);
    const mamba = exactShare('full,mamba', true);
    expect(full).toBeGreaterThan(0.95);
    expect(Math.abs(sliding - full)).toBeLessThanOrEqual(0.01);
    expect(Math.abs(mamba - full)).toBeLessThanOrEqual(0.01);
    // The one-group index of before (other groups' events skipped) predicts hits the sliding engine does not make.
    expect(exactShare('full,sliding:48', false)).toBeLessThan(sliding - 0.05);
  });

  it("forgets every group's blocks at a prefix-cache reset, as vLLM resets every group", () => {
    // Group 1 (a sliding window) holds at most the pool's 12 blocks. After a reset (AllBlocksCleared, which
    // tells a router every group is empty) it must not evict blocks it held before: a router would count
    // those removals as not found, and they took the room of the blocks stored since.
    const c = new EngineCore(
      engineCoreOptions(
        resolveMockerOptions({ numGpuBlocks: 12, blockSize: BS, kvGroups: 'full,sliding:32' }),
        fallbackTokenizer().sampleVocabulary().ids,
      ),
    );
    const prompt = (from: number): number[] => Array.from({ length: 8 * BS }, (_, i) => from + i);
    c.add({ id: 'before', promptTokens: prompt(1000), maxTokens: 1, seed: 1 }, 0);
    const first = drain(c, 0);
    let now = first.end;
    expect(first.steps.some((s) => s.kvEvents.some((e) => e.type === 'stored' && e.groupIdx === 1))).toBe(true);
    expect(c.resetPrefixCache()).toBe(true);
    const after: StepResult[] = [];
    for (const from of [5000, 9000]) {
      c.add({ id: `after${from}`, promptTokens: prompt(from), maxTokens: 1, seed: from }, now);
      const run = drain(c, now);
      now = run.end;
      after.push(...run.steps);
    }
    const events = after.flatMap((s) => s.kvEvents);
    const stored = new Set(events.flatMap((e) => (e.type === 'stored' && e.groupIdx === 1 ? e.blockHashes : [])));
    const removed = events.flatMap((e) => (e.type === 'removed' && e.groupIdx === 1 ? e.blockHashes : []));
    expect(removed.length).toBeGreaterThan(0); // the second prompt needed room: the bound below is not vacuous
    for (const h of removed) expect(stored.has(h)).toBe(true);
  });

  it('refuses a layout it cannot emulate', () => {
    expect(() => resolveMockerOptions({ kvGroups: 'sliding:128,full' })).toThrow(/starting with full/);
    expect(() => resolveMockerOptions({ kvGroups: 'full,chunked:8192' })).toThrow(/KvGroups|kvGroups/);
  });
});
