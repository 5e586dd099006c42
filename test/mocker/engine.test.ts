import { describe, expect, it } from 'vitest';
import { promptHashes, xxh3 } from '../../src/wasm/index.js';
import { EngineCore, type CoreRequest, type KvEvent, type StepResult } from '../../src/mocker/index.js';
import { engineCoreOptions, resolveMockerOptions, type MockerInput } from '../../src/mocker/options.js';
import { polynomialPrefillMs } from '../../src/mocker/timing.js';
import { VirtualEngine } from '../../src/mocker/virtual-engine.js';
import { fallbackTokenizer } from '../../src/tokenizer/index.js';
import { mulberry32 } from '../helpers/rng.js';

const SEED = 0x1234_5678_9abc_def0n;

function core(input: MockerInput = {}): EngineCore {
  const o = resolveMockerOptions({ engineHashSeed: SEED, ...input });
  return new EngineCore(engineCoreOptions(o, fallbackTokenizer().sampleVocabulary().ids));
}

function tokens(n: number, seed: number, vocab = 50_000): number[] {
  const rng = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rng() * vocab));
}

/** Steps until idle; returns every step result. */
function drain(c: EngineCore, start = 0): { steps: StepResult[]; end: number } {
  const steps: StepResult[] = [];
  let now = start;
  for (let guard = 0; !c.isIdle() && guard < 100_000; guard++) {
    const r = c.step(now);
    steps.push(r);
    now += r.durationMs > 0 ? r.durationMs : 1;
  }
  return { steps, end: now };
}

const events = (steps: StepResult[]): KvEvent[] => steps.flatMap((s) => s.kvEvents);
const req = (id: string, promptTokens: number[], maxTokens = 4, extra: Partial<CoreRequest> = {}): CoreRequest => ({
  id,
  promptTokens,
  maxTokens,
  seed: 7,
  ...extra,
});

function engineHash(seq: bigint, seed = SEED): bigint {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, seq, true);
  return xxh3(b, seed);
}

describe('EngineCore prefix cache', () => {
  it('a repeated prompt hits the full-block prefix (vLLM keeps the last token to compute)', () => {
    const c = core();
    const prompt = tokens(100, 1);
    c.add(req('a', prompt), 0);
    const first = drain(c);
    expect(first.steps.flatMap((s) => s.admitted)).toEqual([{ requestId: 'a', cachedTokens: 0, queuedMs: 0 }]);
    c.add(req('b', prompt), first.end);
    const second = drain(c, first.end);
    expect(second.steps.flatMap((s) => s.admitted)[0]!.cachedTokens).toBe(96);
    expect(second.steps.flatMap((s) => s.finished)[0]!.cachedTokens).toBe(96);
    // Block-aligned prompt fully cached: the last block is recomputed.
    const c2 = core();
    c2.add(req('x', prompt.slice(0, 96)), 0);
    const r = drain(c2);
    c2.add(req('y', prompt.slice(0, 96)), r.end);
    expect(drain(c2, r.end).steps.flatMap((s) => s.admitted)[0]!.cachedTokens).toBe(80);
    expect(c.stats().prefixHitTokens).toBe(96);
    expect(c.stats().prefixQueriedTokens).toBe(200);
  });

  it('BlockStored carries opaque engine hashes of the router sequence hashes, the parent, and the tokens', () => {
    const c = core();
    const prompt = tokens(100, 2);
    c.add(req('a', prompt), 0);
    const ev = events(drain(c).steps);
    const stored = ev.filter((e) => e.type === 'stored');
    expect(stored).toHaveLength(1);
    const s0 = stored[0]!;
    if (s0.type !== 'stored') throw new Error('unreachable');
    const { seq } = promptHashes(prompt, 16);
    expect(s0.blockHashes).toEqual([...seq].map((h) => engineHash(h)));
    expect(s0.parentBlockHash).toBeNull();
    expect(s0.tokenIds).toEqual(prompt.slice(0, 96));
    expect(s0.blockSize).toBe(16);
    // Opaque: not the router's hash, and another seed gives other values.
    expect(s0.blockHashes[0]).not.toBe(seq[0]);
    expect(engineHash(seq[0]!, 1n)).not.toBe(s0.blockHashes[0]);
  });

  it('generated blocks are chained like prompt blocks (hashes equal promptHashes over prompt + output)', () => {
    const c = core({ blockSize: 4 });
    const prompt = tokens(10, 3);
    c.add(req('a', prompt, 12), 0);
    const { steps } = drain(c);
    const out = steps.flatMap((s) => s.outputs).map((o) => o.tokenId);
    expect(out).toHaveLength(12);
    const all = [...prompt, ...out];
    const stored = events(steps).flatMap((e) => (e.type === 'stored' ? e.blockHashes : []));
    // 22 tokens, 21 computed -> 5 full blocks
    const { seq } = promptHashes(all, 4);
    expect(stored).toEqual([...seq].slice(0, 5).map((h) => engineHash(h)));
    const parents = events(steps).flatMap((e) => (e.type === 'stored' ? [e.parentBlockHash] : []));
    expect(parents[0]).toBeNull();
    expect(parents[1]).toBe(engineHash(seq[1]!)); // second event starts at block 2
  });

  it('LoRA and cache salt namespace the hashes and ride on the event', () => {
    const c = core({ blockSize: 4 });
    const prompt = tokens(9, 4);
    c.add(req('a', prompt, 1, { loraName: 'ad', cacheSalt: 'tenant' }), 0);
    const ev = events(drain(c).steps)[0]!;
    if (ev.type !== 'stored') throw new Error('expected stored');
    expect(ev.loraName).toBe('ad');
    expect(ev.cacheSalt).toBe('tenant');
    const { seq } = promptHashes(prompt, 4, { loraName: 'ad', cacheSalt: 'tenant' });
    expect(ev.blockHashes).toEqual([...seq].map((h) => engineHash(h)));
  });

  it('eviction under a small cache emits BlockRemoved (tail first) and stops the hits', () => {
    const c = core({ blockSize: 4, numGpuBlocks: 8 });
    const a = tokens(21, 5);
    c.add(req('a', a, 1), 0); // 5 full blocks cached + 1 partial released
    let t = drain(c).end;
    const { seq } = promptHashes(a, 4);
    c.add(req('b', tokens(32, 6), 1), t); // needs all 8 blocks: evicts every cached block of a
    const r = drain(c, t);
    t = r.end;
    const removed = events(r.steps)
      .filter((e) => e.type === 'removed')
      .flatMap((e) => (e.type === 'removed' ? e.blockHashes : []));
    expect(removed).toEqual([4, 3, 2, 1, 0].map((k) => engineHash(seq[k]!)));
    c.add(req('a2', a, 1), t);
    expect(drain(c, t).steps.flatMap((s) => s.admitted)[0]!.cachedTokens).toBe(0);
  });

  it('resetPrefixCache emits AllBlocksCleared and is refused while blocks are in use', () => {
    const c = core({ blockSize: 4 });
    c.add(req('a', tokens(9, 7), 3), 0);
    c.step(0);
    expect(c.resetPrefixCache()).toBe(false);
    const t = drain(c, 1).end;
    expect(c.resetPrefixCache()).toBe(true);
    expect(c.isIdle()).toBe(false); // the event is pending
    expect(c.step(t).kvEvents).toEqual([{ type: 'cleared' }]);
    expect(c.stats().cachedBlocks).toBe(0);
  });
});

describe('EngineCore scheduling', () => {
  it('chunks a prefill larger than the token budget', () => {
    const c = core({ maxNumBatchedTokens: 32 });
    c.add(req('a', tokens(100, 8), 2), 0);
    const { steps } = drain(c);
    expect(steps.map((s) => s.scheduledTokens)).toEqual([32, 32, 32, 4, 1]);
    expect(steps.map((s) => s.outputs.length)).toEqual([0, 0, 0, 1, 1]);
  });

  it('batches decodes of many requests under max_num_seqs', () => {
    const c = core({ maxNumSeqs: 3 });
    for (let i = 0; i < 5; i++) c.add(req(`r${i}`, tokens(20, 100 + i), 3), 0);
    const first = c.step(0);
    expect(first.admitted.map((a) => a.requestId)).toEqual(['r0', 'r1', 'r2']);
    expect(first.prefillTokens).toBe(60);
    const second = c.step(first.durationMs);
    expect(second.decodeSequences).toBe(3);
    expect(c.stats().waiting).toBe(2);
    drain(c, 100);
    expect(c.stats().generationTokens).toBe(15);
  });

  it('preempts the newest running request when the cache runs out, and still finishes everything', () => {
    const c = core({ blockSize: 4, numGpuBlocks: 10 });
    c.add(req('a', tokens(8, 9), 16), 0);
    c.add(req('b', tokens(8, 10), 16), 0);
    const { steps } = drain(c);
    expect(steps.flatMap((s) => s.preempted)).toContain('b');
    expect(c.stats().preemptions).toBeGreaterThan(0);
    const fin = steps.flatMap((s) => s.finished);
    expect(fin.map((f) => [f.requestId, f.outputTokens]).sort()).toEqual([
      ['a', 16],
      ['b', 16],
    ]);
    expect(c.stats().activeBlocks).toBe(0);
  });

  it("under vLLM's priority policy admits by priority, then arrival; under fcfs by arrival", () => {
    const order = (schedulingPolicy: 'fcfs' | 'priority'): string[] => {
      const c = core({ maxNumSeqs: 1, schedulingPolicy });
      c.add(req('late-low', tokens(20, 1), 2, { priority: 5 }), 0);
      c.add(req('high', tokens(20, 2), 2, { priority: -1 }), 1);
      c.add(req('mid-first', tokens(20, 3), 2, { priority: 0 }), 2);
      c.add(req('mid-second', tokens(20, 4), 2), 3);
      return drain(c, 3).steps.flatMap((s) => s.admitted.map((a) => a.requestId));
    };
    expect(order('priority')).toEqual(['high', 'mid-first', 'mid-second', 'late-low']);
    expect(order('fcfs')).toEqual(['late-low', 'high', 'mid-first', 'mid-second']);
  });

  it("under vLLM's priority policy preempts the highest priority value, not the last admitted", () => {
    const run = (schedulingPolicy: 'fcfs' | 'priority'): StepResult[] => {
      const c = core({ blockSize: 4, numGpuBlocks: 10, schedulingPolicy });
      // `a` is admitted first but matters least; the two fill new blocks on different steps, so the cache
      // runs out while `b` needs a block and `a`, already scheduled in that step, does not.
      c.add(req('a', tokens(8, 9), 16, { priority: 3 }), 0);
      const first = c.step(0);
      c.add(req('b', tokens(11, 10), 16, { priority: 1 }), first.durationMs);
      const { steps } = drain(c, first.durationMs);
      expect(
        steps
          .flatMap((s) => s.finished)
          .map((f) => f.requestId)
          .sort(),
      ).toEqual(['a', 'b']);
      expect(c.stats().activeBlocks).toBe(0);
      return steps;
    };
    const preempted = (steps: StepResult[]): string[] => [...new Set(steps.flatMap((s) => s.preempted))];
    expect(preempted(run('fcfs'))).toEqual(['b']);
    const steps = run('priority');
    expect(preempted(steps)).toEqual(['a']);
    // The victim had been scheduled in that step: it is unscheduled, so only `b` computes there.
    const step = steps.find((s) => s.preempted.includes('a'))!;
    expect([step.scheduledTokens, step.decodeSequences, step.prefillTokens]).toEqual([1, 1, 0]);
  });

  it('never gives up a step that preempted a request while another running request can go on', () => {
    // vLLM stops a step's pass over its running requests where one preempts itself, then schedules the rest in its
    // next pass, at once. A step of the mocker that scheduled nothing reads to its drivers as waiting for input or
    // a wake time: the replay stopped there, the running requests left unfinished. So the next pass is made in the
    // same step. Swept over prompt lengths and cache sizes: `a`, admitted first but least important, reaches a block
    // boundary with the cache full ahead of `b` in the running order, and so preempts itself.
    let selfPreempted = 0;
    for (const blocks of [6, 7, 8, 9, 10])
      for (let aLen = 5; aLen <= 12; aLen++)
        for (let bLen = 5; bLen <= 12; bLen++) {
          const c = core({ blockSize: 4, numGpuBlocks: blocks, schedulingPolicy: 'priority' });
          if (Math.ceil((aLen + 16) / 4) > blocks || Math.ceil((bLen + 16) / 4) > blocks) continue;
          c.add(req('a', tokens(aLen, 31), 16, { priority: 3 }), 0);
          const first = c.step(0);
          c.add(req('b', tokens(bLen, 32), 16, { priority: 1 }), first.durationMs);
          const { steps } = drain(c, first.durationMs);
          for (const step of steps) {
            if (step.preempted.length === 0) continue;
            if (step.preempted.includes('a') && step.outputs.some((o) => o.requestId === 'b')) selfPreempted++;
            expect(step.scheduledTokens, `${blocks} blocks, prompts ${aLen} and ${bLen}`).toBeGreaterThan(0);
          }
          expect(steps.flatMap((s) => s.finished).length).toBe(2);
        }
    expect(selfPreempted).toBeGreaterThan(0);
  });

  it("under SGLang's priority eviction a full cache drops the least important requests' blocks first", () => {
    // Block size 4, 8 blocks. `old` (priority 1) then `young` (priority 5) each leave 2 cached blocks; `fill`
    // needs 5 blocks: the 4 free ones and one evicted. LRU drops the tail of the least recently released prompt
    // (old's); priority eviction the tail of the least important one (young's). Unless a later, more important
    // request (priority 0) has read young's blocks since: it extends young's prompt by a block (so it reads both,
    // the last token being computed), which leaves one block less free, so old's two blocks go, tail first.
    const oldPrompt = tokens(8, 21);
    const youngPrompt = tokens(8, 22);
    const evicted = (evictionPolicy: 'lru' | 'priority', rereadYoung: boolean): bigint[] => {
      const c = core({ blockSize: 4, numGpuBlocks: 8, schedulingPolicy: 'priority', evictionPolicy });
      let now = 0;
      const run = (r: CoreRequest): StepResult[] => {
        c.add(r, now);
        const d = drain(c, now);
        now = d.end;
        return d.steps;
      };
      run(req('old', oldPrompt, 1, { priority: 1 }));
      run(req('young', youngPrompt, 1, { priority: 5 }));
      if (rereadYoung) run(req('young-again', [...youngPrompt, ...tokens(4, 24)], 1, { priority: 0 }));
      const steps = run(req('fill', tokens(17, 23), 1, { priority: 3 }));
      return events(steps).flatMap((e) => (e.type === 'removed' ? e.blockHashes : []));
    };
    const block = (prompt: number[], k: number): bigint =>
      engineHash(promptHashes(Uint32Array.from(prompt), 4).seq[k]!);
    expect(evicted('lru', false)).toEqual([block(oldPrompt, 1)]);
    expect(evicted('priority', false)).toEqual([block(youngPrompt, 1)]);
    expect(evicted('priority', true)).toEqual([block(oldPrompt, 1), block(oldPrompt, 0)]);
  });

  it('refuses a priority that is not an integer', () => {
    const c = core({ schedulingPolicy: 'priority' });
    expect(() => c.add(req('x', tokens(8, 1), 2, { priority: 1.5 }), 0)).toThrow(/priority must be an integer/);
  });

  it('generated tokens are deterministic for a seed', () => {
    const run = (seed: number): number[] => {
      const c = core();
      c.add(req('a', tokens(30, 11), 20, { seed }), 0);
      return drain(c).steps.flatMap((s) => s.outputs.map((o) => o.tokenId));
    };
    expect(run(1)).toEqual(run(1));
    expect(run(1)).not.toEqual(run(2));
  });

  it('rejects requests that can never run', () => {
    const c = core({ blockSize: 4, numGpuBlocks: 4 });
    expect(() => c.add(req('a', tokens(17, 1), 1), 0)).toThrow(/needs 5 KV blocks/);
    c.add(req('fits', tokens(16, 1), 1), 0);
    expect(() => c.add(req('b', [], 1), 0)).toThrow(/empty/);
    expect(() => c.add(req('c', [1], 0), 0)).toThrow(/at least 1/);
    c.add(req('d', [1], 1), 0);
    expect(() => c.add(req('d', [1], 1), 0)).toThrow(/already in use/);
    expect(c.abort('d')).toBe(true);
    expect(c.abort('d')).toBe(false);
  });

  it('step duration is the polynomial model over uncached tokens, divided by speedup', () => {
    const c = core({ speedup: 10 });
    const prompt = tokens(4096, 12);
    c.add(req('a', prompt, 1), 0);
    const r = c.step(0);
    expect(r.durationMs).toBeCloseTo(polynomialPrefillMs(4096) / 10, 9);
    c.add(req('b', prompt, 1), 100);
    expect(c.step(100).durationMs).toBeCloseTo(polynomialPrefillMs(16) / 10, 9);
  });
});

describe('EngineCore P/D', () => {
  it('remote prefill waits the transfer delay, then decodes with the prompt cached', () => {
    const c = core({ kvBytesPerToken: 1_000_000, kvTransferBandwidthGBps: 1 }); // 1 ms per token
    const prompt = tokens(50, 13);
    c.add(req('d', prompt, 2, { remotePrefill: true }), 0);
    const s0 = c.step(0);
    expect(s0.scheduledTokens).toBe(0);
    expect(c.nextWakeTime()).toBeCloseTo(50, 9);
    expect(c.stats().transferring).toBe(1);
    const s1 = c.step(50);
    expect(s1.scheduledTokens).toBe(1);
    expect(s1.outputs).toHaveLength(1);
    // Full blocks of the transferred prompt are now cached here and announced.
    expect(s1.kvEvents.filter((e) => e.type === 'stored')).toHaveLength(1);
  });

  it("holds a prefill request's blocks for a pull, then releases them", () => {
    const c = core();
    c.add(req('p', tokens(40, 14), 1, { holdBlocksMs: 1000 }), 0);
    const { steps } = drain(c);
    const fin = steps.flatMap((s) => s.finished)[0]!;
    expect(fin.heldBlockIds).toEqual([0, 1, 2]);
    expect(c.stats().activeBlocks).toBe(3);
    expect(c.pullHeld('p', [0, 1, 9], 10)).toMatchObject({ ok: false });
    expect(c.pullHeld('p', [0, 1, 2], 10)).toEqual({ ok: true, numTokens: 40 });
    expect(c.pullHeld('p', undefined, 10)).toMatchObject({
      ok: false,
      reason: expect.stringMatching(/already pulled/),
    });
    expect(c.stats().activeBlocks).toBe(0);
    c.add(req('q', tokens(40, 15), 1, { holdBlocksMs: 1000 }), 20);
    drain(c, 20);
    expect(c.nextWakeTime()).toBeGreaterThan(1000);
    expect(c.pullHeld('q', undefined, 5000)).toMatchObject({ ok: false, reason: expect.stringMatching(/expired/) });
  });
});

describe('VirtualEngine', () => {
  it('runs 1,000 requests in virtual time in well under 5 s of wall time', () => {
    const o = resolveMockerOptions({ engineHashSeed: SEED });
    let ve = new VirtualEngine(new EngineCore(engineCoreOptions(o, fallbackTokenizer().sampleVocabulary().ids)));
    const rng = mulberry32(42);
    const prefixes = Array.from({ length: 10 }, (_, i) => tokens(512, 1000 + i));
    let kvEvents = 0;
    ve = new VirtualEngine(ve.core, { onStep: (r) => (kvEvents += r.kvEvents.length) });
    let t = 0;
    for (let i = 0; i < 1000; i++) {
      t += rng() * 50; // ~20 requests/s
      const prompt = [...prefixes[i % 10]!, ...tokens(64 + Math.floor(rng() * 256), 5000 + i)];
      ve.submit({ id: `r${i}`, promptTokens: prompt, maxTokens: 32 + Math.floor(rng() * 96), seed: i }, t);
    }
    const wall = performance.now();
    const last = ve.runUntilIdle();
    const wallMs = performance.now() - wall;
    const recs = [...ve.records()];
    expect(recs).toHaveLength(1000);
    expect(
      recs.every(
        (r) => r.finishedMs !== undefined && r.firstTokenMs! >= r.arrivalMs && r.finishedMs >= r.firstTokenMs!,
      ),
    ).toBe(true);
    // Shared 512-token prefixes are hits after their first use.
    expect(recs.filter((r) => r.cachedTokens >= 512).length).toBeGreaterThan(900);
    expect(last).toBeGreaterThan(t);
    expect(wallMs).toBeLessThan(5000);
    expect(kvEvents).toBeGreaterThan(0);
  });

  it('delivers a step at its completion time and admits arrivals in between to the next step', () => {
    const o = resolveMockerOptions({ engineHashSeed: SEED, speedup: 1 });
    const seen: number[] = [];
    const ve = new VirtualEngine(new EngineCore(engineCoreOptions(o, fallbackTokenizer().sampleVocabulary().ids)), {
      onStep: (_r, at) => seen.push(at),
    });
    ve.submit(req('a', tokens(4096, 20), 1), 0);
    ve.submit(req('b', tokens(16, 21), 1), 10);
    expect(ve.nextEventTime()).toBe(0);
    ve.runUntil(5);
    expect(ve.nextEventTime()).toBe(10); // b's arrival
    ve.runUntil(20);
    expect(ve.nextEventTime()).toBeCloseTo(polynomialPrefillMs(4096), 9); // a's step still in flight
    ve.runUntilIdle();
    expect(ve.record('a')!.firstTokenMs).toBeCloseTo(polynomialPrefillMs(4096), 9);
    // b arrived at 10 while a's step was in flight: admitted when it ended.
    expect(ve.record('b')!.admittedMs).toBeCloseTo(polynomialPrefillMs(4096), 9);
    expect(seen[0]).toBeCloseTo(polynomialPrefillMs(4096), 9);
  });
});
