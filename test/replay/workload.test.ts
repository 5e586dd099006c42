import { describe, expect, it } from 'vitest';
import { promptHashes } from '../../src/wasm/index.js';
import {
  arrivalOffsets,
  buildWorkload,
  hitRateBound,
  loadTrace,
  parseTrace,
  pooledLruHitRate,
  TokenSynthesizer,
  type ReplayRequest,
} from '../../src/replay/index.js';

const SMALL = new URL('../fixtures/traces/small.jsonl', import.meta.url).pathname;

function trace(rows: [number, number, number, number[]][], traceBlockSize = 512) {
  return parseTrace(
    rows
      .map(([timestamp, input_length, output_length, hash_ids]) =>
        JSON.stringify({ timestamp, input_length, output_length, hash_ids }),
      )
      .join('\n'),
    { traceBlockSize },
  );
}

describe('token synthesis', () => {
  const synth = new TokenSynthesizer({ traceBlockSize: 512, seed: 7 });

  it('gives each hash id one fixed chunk, whatever the request', () => {
    const a = synth.tokens([10, 11, 12], 1400);
    const b = synth.tokens([10, 11, 99], 1536);
    expect(a).toHaveLength(1400);
    expect(a.slice(0, 1024)).toEqual(b.slice(0, 1024));
    expect(a.slice(1024)).toEqual(Array.from(synth.chunk(12).subarray(0, 376)));
    expect(a.slice(1024, 1030)).not.toEqual(b.slice(1024, 1030));
    expect(new TokenSynthesizer({ traceBlockSize: 512, seed: 8 }).tokens([10], 512)).not.toEqual(
      synth.tokens([10], 512),
    );
    expect(Math.max(...a)).toBeLessThan(32_000);
  });

  it('shared ids are shared prefixes at any engine block size', () => {
    const a = synth.tokens([1, 2, 3, 4], 2048);
    const b = synth.tokens([1, 2, 3, 5], 2048);
    for (const bs of [16, 32, 64, 128, 512, 100]) {
      const ha = promptHashes(a, bs).seq;
      const hb = promptHashes(b, bs).seq;
      let common = 0;
      while (common < ha.length && ha[common] === hb[common]) common++;
      expect(common).toBe(Math.floor(1536 / bs));
    }
  });

  it('rejects ids that cannot cover the prompt', () => {
    expect(() => synth.tokens([1], 513)).toThrow(/cannot cover/);
  });
});

describe('workload', () => {
  it('divides arrivals by the speedup and keeps trace order', () => {
    const w = buildWorkload(
      trace([
        [100, 10, 1, [1]],
        [300, 10, 1, [2]],
        [1100, 10, 1, [3]],
      ]),
      { speedup: 4 },
    );
    expect(w.requests.map((r) => r.arrivalMs)).toEqual([0, 50, 250]);
    expect(w.spanMs).toBe(250);
  });

  it('spreads runs of equal timestamps evenly up to the next timestamp', () => {
    const t = trace([
      [0, 10, 1, [1]],
      [0, 10, 1, [2]],
      [0, 10, 1, [3]],
      [3000, 10, 1, [4]],
      [3000, 10, 1, [5]],
    ]);
    expect(arrivalOffsets(t.records, 'as-recorded')).toEqual([0, 0, 0, 3000, 3000]);
    // The last run is spread over the median gap between distinct timestamps (3000 ms).
    expect(arrivalOffsets(t.records, 'spread')).toEqual([0, 1000, 2000, 3000, 4500]);
  });

  it('caps requests and prompt lengths, and reports what it cut', () => {
    const w = buildWorkload(
      trace([
        [0, 2000, 5, [1, 2, 3, 4]],
        [1, 600, 5, [1, 2]],
        [2, 100, 5, [9]],
      ]),
      { maxIsl: 1000, maxRequests: 2 },
    );
    expect(w.requests).toHaveLength(2);
    expect(w.droppedByMaxRequests).toBe(1);
    expect(w.requests[0]).toMatchObject({ inputLength: 1000, hashIds: [1, 2], cappedFrom: 2000 });
    expect(w.requests[1]!.cappedFrom).toBeUndefined();
    expect(w.capping).toEqual({ maxIsl: 1000, requestsCapped: 1, tokensRemoved: 1000 });
    expect(() => buildWorkload(trace([[0, 10, 1, [1]]]), { speedup: 0 })).toThrow(/speedup/);
    // A later slice: arrivals start at the first kept request.
    const slice = buildWorkload(
      trace([
        [0, 10, 1, [1]],
        [40, 10, 1, [2]],
        [100, 10, 1, [3]],
        [160, 10, 1, [4]],
      ]),
      { skipRequests: 1, maxRequests: 2 },
    );
    expect(slice.requests.map((r) => [r.line, r.arrivalMs, r.index])).toEqual([
      [2, 0, 0],
      [3, 60, 1],
    ]);
    expect(slice.droppedByMaxRequests).toBe(2);
    expect(() => buildWorkload(trace([[0, 10, 1, [1]]]), { skipRequests: 1 })).toThrow(/leaves none/);
  });

  it('computes the infinite-cache bound from block ids', () => {
    const req = (index: number, inputLength: number, hashIds: number[]): ReplayRequest => ({
      index,
      line: index + 1,
      arrivalMs: index,
      inputLength,
      outputLength: 1,
      hashIds,
    });
    const reqs = [
      req(0, 1000, [1, 2]), // 512 + 488 tokens, nothing seen
      req(1, 1500, [1, 2, 3]), // ids 1, 2 seen: 512 + 488 of block 2 were materialised -> 1000 tokens
      req(2, 512, [1]), // 512 tokens
    ];
    const b = hitRateBound(reqs, 512, 16);
    expect(b.traceBlocks).toBeCloseTo(3 / 6);
    // Engine-aligned: floor(1000 / 16) * 16 = 992, then 512.
    expect(b.tokens).toBeCloseTo((992 + 512) / 3012);
    // By tokens of the seen blocks as they appear in the later request (block 2 is full in request 1).
    expect(b.traceTokens).toBeCloseTo((1024 + 512) / 3012);
    expect(hitRateBound(reqs, 512, 512).tokens).toBeCloseTo((512 + 512) / 3012);
  });

  it('the pooled LRU reference reaches the bound with room for everything and less without', () => {
    const w = buildWorkload(loadTrace(SMALL));
    const bound = hitRateBound(w.requests, 512, 16).tokens;
    expect(bound).toBeGreaterThan(0.3);
    expect(pooledLruHitRate(w.requests, 512, 16, 1e9)).toBeCloseTo(bound, 10);
    const small = pooledLruHitRate(w.requests, 512, 16, 8 * 512);
    expect(small).toBeLessThan(bound);
    expect(small).toBeGreaterThanOrEqual(0);
  });
});
