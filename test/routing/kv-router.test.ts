import { describe, expect, it } from 'vitest';
import { KvRouter, resolvePin } from '../../src/routing/index.js';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { outputBlockDecay, type KvRouterOptions } from '../../src/core/index.js';
import { candidateCost } from '../../src/core/cost.js';
import { dynamoCostKnobs } from '../helpers/cost-knobs.js';
import { isKvgateError } from '../../src/errors/index.js';
import { PrefixIndex, promptHashes } from '../../src/wasm/index.js';

const BS = 4;
/** Dynamo's prefill scale: these tests check its arithmetic (kvgate's default is 4; test/core/config.test.ts). */
const DYNAMO: KvRouterOptions = { prefillLoadScale: 1 };
const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

function router(
  config: KvRouterOptions = {},
  workers = [1, 2, 3],
  clock = new ManualClock(),
  index?: PrefixIndex,
): KvRouter {
  const opts = { blockSize: BS, config: { ...DYNAMO, ...config }, clock, rng: seededRng(5) };
  const r = new KvRouter({ ...opts, ...(index ? { index } : {}) });
  for (const w of workers) r.addWorker(w);
  return r;
}

/** Marks the first `blocks` blocks of `toks` as cached on worker `w` (a KV `stored` event). */
function cache(r: KvRouter, w: number, toks: number[], blocks: number, dpRank = 0): void {
  const h = promptHashes(toks.slice(0, blocks * BS), BS);
  r.index.applyStored(w, dpRank, null, h.seq, h.local);
}

function errorCode(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (isKvgateError(err)) return err.code;
    throw err;
  }
  return 'no error';
}

describe('KvRouter selection', () => {
  it('picks the worker with the longest cached prefix and explains every candidate', () => {
    const r = router();
    const prompt = tokens(40); // 10 blocks
    cache(r, 1, prompt, 2);
    cache(r, 2, prompt, 8);
    cache(r, 3, prompt, 5);
    const d = r.findBestMatch({ requestId: 'a', tokens: prompt });
    expect(d.workerId).toBe(2);
    expect(d.dpRank).toBe(0);
    expect(d.overlapBlocks).toBe(8);
    expect(d.requiredBlocks).toBe(10);
    expect(d.cachedTokens(BS)).toBe(32);
    expect(d.booked).toBe(true);
    expect(d.prefillTokens).toBe(8);
    const byWorker = Object.fromEntries(d.candidates.map((c) => [c.workerId, c]));
    expect(byWorker[1]).toMatchObject({
      overlapBlocks: 2,
      prefillTokens: 32,
      decodeBlocks: 10,
      activeRequests: 0,
      cost: 8 + 10,
    });
    expect(byWorker[2]).toMatchObject({ overlapBlocks: 8, prefillTokens: 8, decodeBlocks: 10, cost: 2 + 10 });
    expect(byWorker[3]).toMatchObject({ overlapBlocks: 5, prefillTokens: 20, decodeBlocks: 10, cost: 5 + 10 });
    expect(byWorker[1]!.probability).toBeUndefined();
    // Each candidate's cost is the cost model applied to its own row.
    const knobs = dynamoCostKnobs();
    for (const c of d.candidates) {
      expect(
        candidateCost(
          knobs,
          { isl: 40, blockSize: BS, minActivePrefillTokens: 0 },
          {
            activePrefillTokens: 0,
            deviceOverlapBlocks: c.overlapBlocks,
            potentialDecodeBlocks: c.decodeBlocks,
            activeRequests: 0,
          },
        ),
      ).toBe(c.cost);
    }
    expect(d.timing.totalMs).toBeGreaterThanOrEqual(0);
    expect(JSON.parse(JSON.stringify(d))).toMatchObject({ workerId: 2, candidates: expect.any(Array) });
    // Booked: the prompt's uncached tokens and its blocks are now load on worker 2.
    expect(r.load({ workerId: 2, dpRank: 0 })).toEqual({
      activePrefillTokens: 8,
      activeDecodeBlocks: 10,
      activeRequests: 1,
    });
  });

  it('query-only selection books nothing', () => {
    const r = router();
    const before = r.loads();
    const d = r.findBestMatch({ requestId: 'q', tokens: tokens(40) }, { mode: 'query' });
    expect(d.booked).toBe(false);
    expect(d.prefillTokens).toBe(0);
    expect(r.loads()).toEqual(before);
    expect(r.activeRequestCount).toBe(0);
    // The same id can be booked afterwards.
    r.findBestMatch({ requestId: 'q', tokens: tokens(40) });
    expect(errorCode(() => r.findBestMatch({ requestId: 'q', tokens: tokens(40) }))).toBe('KVG_ERR_DUPLICATE_REQUEST');
  });

  it('without cache hits, load spreads requests; shared in-flight prefixes pull siblings together only when cheaper', () => {
    const r = router();
    const seen = new Set<number>();
    for (let i = 0; i < 3; i++)
      seen.add(r.findBestMatch({ requestId: `s${i}`, tokens: tokens(40, 1000 * (i + 1)) }).workerId);
    expect(seen.size).toBe(3);
    // A sibling of s0's prompt: its blocks are already active on s0's worker, so fewer new decode blocks there.
    const s0 = r.activeRequest('s0')!;
    const d = r.findBestMatch({ requestId: 'sib', tokens: tokens(40, 1000) }, { mode: 'query' });
    const row = d.candidates.find((c) => c.workerId === s0.workerId)!;
    expect(row.decodeBlocks).toBe(10); // 10 active + 0 new
    const other = d.candidates.find((c) => c.workerId !== s0.workerId)!;
    expect(other.decodeBlocks).toBe(20); // 10 active + 10 new
    expect(d.workerId).toBe(s0.workerId);
  });

  it('temperature override samples; credit override 0 ignores the cache', () => {
    const r = router();
    const prompt = tokens(40);
    cache(r, 3, prompt, 10);
    expect(r.findBestMatch({ requestId: 'x', tokens: prompt }, { mode: 'query' }).workerId).toBe(3);
    // Credit 0: every worker costs the same (prefill 10 + decode 10): a uniform tie.
    const picks = new Set<number>();
    for (let i = 0; i < 30; i++)
      picks.add(
        r.findBestMatch(
          { requestId: 'x', tokens: prompt, routerConfigOverride: { overlap_score_credit: 0 } },
          { mode: 'query' },
        ).workerId,
      );
    expect(picks.size).toBe(3);
    const hot = r.findBestMatch(
      { requestId: 'x', tokens: prompt, routerConfigOverride: { routerTemperature: 1 } },
      { mode: 'query' },
    );
    expect(hot.temperature).toBe(1);
    const probs = hot.candidates.map((c) => c.probability!);
    expect(probs.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 12);
    expect(hot.candidates.find((c) => c.workerId === 3)!.probability).toBeGreaterThan(0.5);
    expect(
      errorCode(() =>
        r.findBestMatch({ requestId: 'x', tokens: prompt, routerConfigOverride: { routerTemperature: -1 } }),
      ),
    ).toBe('KVG_ERR_INVALID_ARGUMENT');
  });
});

describe('KvRouter pins and restrictions', () => {
  it('resolves pins by phase (no prefill fallback to backend_instance_id)', () => {
    const hints = { backendInstanceId: 1, prefillWorkerId: 2, decodeWorkerId: 3, dpRank: 4, prefillDpRank: 5 };
    expect(resolvePin('aggregated', hints)).toEqual({ workerId: 1, dpRank: 4 });
    expect(resolvePin('prefill', hints)).toEqual({ workerId: 2, dpRank: 5 });
    expect(resolvePin('decode', hints)).toEqual({ workerId: 3, dpRank: 4 });
    expect(resolvePin('decode', { backendInstanceId: 1 })).toEqual({ workerId: 1, dpRank: undefined });
    expect(resolvePin('prefill', { backendInstanceId: 1, dpRank: 2 })).toBeUndefined();
    expect(resolvePin('prefill', { prefillWorkerId: 7, dpRank: 2 })).toEqual({ workerId: 7, dpRank: 2 });
  });

  it('a pin overrides the cost model; dp ranks are validated against the advertised ranks', () => {
    const r = router({}, [1]);
    r.addWorker(9, { dataParallelStartRank: 2, dataParallelSize: 3 });
    const prompt = tokens(40);
    cache(r, 1, prompt, 10);
    const d = r.findBestMatch({ requestId: 'p', tokens: prompt, routing: { backendInstanceId: 9, dpRank: 3 } });
    expect([d.workerId, d.dpRank, d.pinned, d.candidateCount]).toEqual([9, 3, true, 1]);
    expect(
      errorCode(() =>
        r.findBestMatch({ requestId: 'p2', tokens: prompt, routing: { backendInstanceId: 9, dpRank: 5 } }),
      ),
    ).toBe('KVG_ERR_INVALID_DP_RANK');
    expect(
      errorCode(() =>
        r.findBestMatch({ requestId: 'p2', tokens: prompt, routing: { backendInstanceId: 9, dpRank: 1 } }),
      ),
    ).toBe('KVG_ERR_INVALID_DP_RANK');
    expect(
      errorCode(() => r.findBestMatch({ requestId: 'p2', tokens: prompt, routing: { backendInstanceId: 77 } })),
    ).toBe('KVG_ERR_UNKNOWN_WORKER');
    // Pinned without a rank: scheduled over that worker's ranks (rank 3 is now loaded, so not 3).
    const w = r.findBestMatch({ requestId: 'p3', tokens: tokens(40, 500), routing: { backendInstanceId: 9 } });
    expect(w.workerId).toBe(9);
    expect(w.candidateCount).toBe(3);
    expect([2, 4]).toContain(w.dpRank);
    // Decode phase uses decode_worker_id.
    expect(
      r.findBestMatch({
        requestId: 'p4',
        tokens: prompt,
        phase: 'decode',
        routing: { decodeWorkerId: 1, backendInstanceId: 9 },
      }).workerId,
    ).toBe(1);
  });

  it('allowed worker ids restrict the candidates', () => {
    const r = router();
    const prompt = tokens(40);
    cache(r, 1, prompt, 10);
    const d = r.findBestMatch({ requestId: 'a', tokens: prompt, routing: { allowedWorkerIds: [2, 3, 99] } });
    expect([2, 3]).toContain(d.workerId);
    expect(d.candidateCount).toBe(2);
    expect(
      errorCode(() =>
        r.findBestMatch({ requestId: 'b', tokens: prompt, routing: { allowedWorkerIds: new Set([42]) } }),
      ),
    ).toBe('KVG_ERR_NO_WORKERS');
    expect(errorCode(() => router({}, []).findBestMatch({ requestId: 'c', tokens: prompt }))).toBe(
      'KVG_ERR_NO_WORKERS',
    );
  });
});

describe('KvRouter modes and lifecycle', () => {
  it('approximate mode records each routed request with the TTL; query-only records nothing', () => {
    const clock = new ManualClock();
    const r = router({ useKvEvents: false, routerTtlSecs: 10 }, [1, 2, 3], clock);
    const prompt = tokens(40);
    r.findBestMatch({ requestId: 'q', tokens: prompt }, { mode: 'query' });
    expect(r.index.size).toBe(0);
    const first = r.findBestMatch({ requestId: 'a', tokens: prompt });
    expect(r.index.blockCount(first.workerId)).toBe(10);
    r.free('a');
    const again = r.findBestMatch({ requestId: 'b', tokens: prompt });
    expect(again.workerId).toBe(first.workerId);
    expect(again.overlapBlocks).toBe(10);
    r.free('b');
    clock.advance(10_001);
    expect(r.tick().expiredEntries).toBe(10);
    expect(r.index.size).toBe(0);
  });

  it('a request booked again with its start expires from it; a start after now or not finite is refused', () => {
    const clock = new ManualClock(5_000);
    const r = router({ activeRequestExpirySecs: 60 }, [1, 2], clock);
    clock.advance(40_000);
    r.addRequest({ requestId: 'again', tokens: tokens(16), workerId: 1, startedAt: 5_000 });
    for (const startedAt of [clock.now() + 1, Number.NaN, Number.NEGATIVE_INFINITY])
      expect(errorCode(() => r.addRequest({ requestId: 'bad', tokens: tokens(16), workerId: 1, startedAt }))).toBe(
        'KVG_ERR_INVALID_ARGUMENT',
      );
    expect(r.activeRequest('bad')).toBeUndefined();
    clock.advance(20_000);
    expect(r.tick().expiredRequests).toEqual(['again']);
  });

  it('predict-on-route: burst siblings see the side index before any KV event; overlap is the max of both', () => {
    const clock = new ManualClock();
    const r = router({ routerPredictedTtlSecs: 5 }, [1, 2, 3], clock);
    const prompt = tokens(40);
    const first = r.findBestMatch({ requestId: 'a', tokens: prompt });
    expect(r.index.size).toBe(0); // the events index is untouched
    // While the first is still prefilling, its worker's prefill load cancels the overlap credit (a tie):
    const tie = r.findBestMatch({ requestId: 'b', tokens: prompt }, { mode: 'query' });
    expect(tie.candidates.find((c) => c.workerId === first.workerId)!.overlapBlocks).toBe(10);
    expect(new Set(tie.candidates.map((c) => c.cost)).size).toBe(1);
    r.markPrefillCompleted('a');
    const sib = r.findBestMatch({ requestId: 'b', tokens: prompt }, { mode: 'query' });
    expect(sib.workerId).toBe(first.workerId);
    expect(sib.overlapBlocks).toBe(10);
    // A real event for 4 blocks elsewhere does not lower the predicted overlap.
    cache(r, first.workerId === 1 ? 2 : 1, prompt, 4);
    const rows = r.findBestMatch({ requestId: 'c', tokens: prompt }, { mode: 'query' }).candidates;
    expect(rows.find((c) => c.workerId === first.workerId)!.overlapBlocks).toBe(10);
    clock.advance(5_001);
    r.tick();
    expect(
      r
        .findBestMatch({ requestId: 'd', tokens: prompt }, { mode: 'query' })
        .candidates.find((c) => c.workerId === first.workerId)!.overlapBlocks,
    ).toBe(0);
  });

  it('host and disk tier hits earn their weights beyond the device overlap', () => {
    const host = new PrefixIndex();
    const disk = new PrefixIndex();
    const r = new KvRouter({
      blockSize: BS,
      config: DYNAMO,
      rng: seededRng(1),
      tierIndexes: { hostPinned: host, disk },
    });
    r.addWorker(1);
    r.addWorker(2);
    const prompt = tokens(40);
    const h = promptHashes(prompt, BS);
    r.index.applyStored(1, 0, null, h.seq.subarray(0, 4), h.local.subarray(0, 4));
    host.applyStored(2, 0, null, h.seq.subarray(0, 8), h.local.subarray(0, 8));
    disk.applyStored(2, 0, null, h.seq, h.local);
    const d = r.findBestMatch({ requestId: 't', tokens: prompt }, { mode: 'query' });
    const rows = Object.fromEntries(d.candidates.map((c) => [c.workerId, c.cost]));
    // Worker 1: 10 - 4 device + 10 decode = 16. Worker 2: 10 - (0.75 × 8 + 0.25 × 2) + 10 = 13.5.
    expect(rows).toEqual({ 1: 16, 2: 13.5 });
    expect(d.workerId).toBe(2);
  });

  it('output blocks are tracked only when configured; after random traffic all counters return to zero', () => {
    const off = router();
    off.findBestMatch({ requestId: 'a', tokens: tokens(40) });
    expect(off.addOutputBlock('a')).toBe(false);
    const clock = new ManualClock();
    const r = router({ routerTrackOutputBlocks: true }, [1, 2, 3], clock);
    const rng = seededRng(99);
    const live: string[] = [];
    for (let i = 0; i < 400; i++) {
      clock.advance(5);
      const op = rng();
      if (op < 0.45 || live.length === 0) {
        const id = `r${i}`;
        r.findBestMatch({
          requestId: id,
          tokens: tokens(8 + Math.floor(rng() * 60), Math.floor(rng() * 3) * 100),
          routing: { expectedOutputTokens: 32 },
        });
        live.push(id);
      } else if (op < 0.6) {
        r.markPrefillCompleted(live[Math.floor(rng() * live.length)]!);
      } else if (op < 0.8) {
        expect(
          r.addOutputBlock(live[Math.floor(rng() * live.length)]!, outputBlockDecay(Math.floor(rng() * 40), 32)),
        ).toBe(true);
      } else {
        const id = live.splice(Math.floor(rng() * live.length), 1)[0]!;
        expect(r.free(id)).toBe(true);
      }
    }
    for (const id of live) r.free(id);
    for (const l of r.loads())
      expect(l).toMatchObject({ activePrefillTokens: 0, activeDecodeBlocks: 0, activeRequests: 0 });
  });

  it('requests never freed expire at 300 s on tick; removing a worker drops its bookkeeping', () => {
    const clock = new ManualClock();
    const r = router({}, [1, 2], clock);
    r.findBestMatch({ requestId: 'lost', tokens: tokens(40) });
    clock.advance(299_999);
    expect(r.tick().expiredRequests).toEqual([]);
    clock.advance(1);
    expect(r.tick().expiredRequests).toEqual(['lost']);
    const d = r.findBestMatch({ requestId: 'x', tokens: tokens(40) });
    expect(r.removeWorker(d.workerId)).toBe(true);
    expect(r.free('x')).toBe(false);
    expect(r.load({ workerId: d.workerId, dpRank: 0 })).toBeUndefined();
    expect(r.workers().map((w) => w.workerId)).toEqual([d.workerId === 1 ? 2 : 1]);
  });

  it('invalid config fails at construction naming the field', () => {
    expect(() => new KvRouter({ blockSize: BS, config: { prefillLoadScale: -2 } })).toThrow(/prefillLoadScale/);
    expect(
      () => new KvRouter({ blockSize: BS, config: { routerTrackOutputBlocks: true, routerTrackActiveBlocks: false } }),
    ).toThrow(/routerTrackOutputBlocks/);
    expect(() => new KvRouter({ blockSize: BS, config: { bogus: 1 } as KvRouterOptions })).toThrow(/bogus/);
    expect(() => new KvRouter({ blockSize: 0 })).toThrow(
      expect.objectContaining({ code: 'KVG_ERR_INVALID_BLOCK_SIZE' }),
    );
  });
});

describe('KvRouter routing constraints', () => {
  it('required taints filter unpinned candidates; preferred taints scale the cost', () => {
    const r = new KvRouter({ blockSize: BS, config: DYNAMO, rng: seededRng(2) });
    r.addWorker(1, { taints: ['gpu:a100'] });
    r.addWorker(2, { taints: ['gpu:h100', 'zone:b'] });
    r.addWorker(3, { taints: ['gpu:h100'] });
    const prompt = tokens(40);
    cache(r, 1, prompt, 10);
    const d = r.findBestMatch(
      { requestId: 'a', tokens: prompt, routing: { routingConstraints: { requiredTaints: ['gpu:h100'] } } },
      { mode: 'query' },
    );
    expect(d.candidates.map((c) => c.workerId).sort()).toEqual([2, 3]);
    expect(d.maxOverlapBlocks).toBe(0);
    // Equal costs (10 prefill + 10 decode) on 2 and 3; a 0.5 factor for zone:b halves worker 2's.
    const b = r.findBestMatch(
      {
        requestId: 'b',
        tokens: prompt,
        routing: { routingConstraints: { requiredTaints: ['gpu:h100'], preferredTaints: { 'zone:b': 0.5 } } },
      },
      { mode: 'query' },
    );
    expect(b.workerId).toBe(2);
    expect(b.candidates.find((c) => c.workerId === 2)!.cost).toBe(10);
    // Without constraints, worker 1's cache wins, and the decision records the best overlap available.
    const c = r.findBestMatch({ requestId: 'c', tokens: prompt }, { mode: 'query' });
    expect([c.workerId, c.overlapBlocks, c.maxOverlapBlocks]).toEqual([1, 10, 10]);
    expect(
      errorCode(() =>
        r.findBestMatch({
          requestId: 'd',
          tokens: prompt,
          routing: { routingConstraints: { requiredTaints: ['tpu'] } },
        }),
      ),
    ).toBe('KVG_ERR_NO_WORKERS');
    expect(
      errorCode(() =>
        r.findBestMatch({
          requestId: 'e',
          tokens: prompt,
          routing: { routingConstraints: { preferredTaints: { x: -1 } } },
        }),
      ),
    ).toBe('KVG_ERR_INVALID_ARGUMENT');
    expect(r.workers().find((w) => w.workerId === 2)!.taints).toEqual(['gpu:h100', 'zone:b']);
  });
});
