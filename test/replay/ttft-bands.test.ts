import { describe, expect, it } from 'vitest';
import { newOutcome, round, type RequestOutcome } from '../../src/replay/results.js';
import { ttftBands } from '../../src/replay/ttft-bands.js';

/** A completed request: TTFT `ttft` ms, admitted `wait` ms after arrival, on `worker`. */
function done(index: number, ttft: number, over: Partial<RequestOutcome> = {}): RequestOutcome {
  return {
    ...newOutcome(index, 1000 * index, 10_000, 100),
    firstTokenMs: 1000 * index + ttft,
    finishMs: 1000 * index + ttft + 50,
    outputTokens: 100,
    workerId: 1,
    ...over,
  };
}

const none = (): undefined => undefined;

describe('TTFT bands', () => {
  // TTFT i + 1 ms for i = 0..199: the slowest 1 % is 200 and 199, the next 9 % 198 down to 181.
  const outcomes = Array.from({ length: 200 }, (_, i) =>
    done(i, i + 1, {
      admittedMs: 1000 * i + (i + 1) / 2,
      cachedTokens: 8_000,
      predictedCachedTokens: i >= 190 ? 9_000 : 8_000,
    }),
  );

  it('ranks completed requests by TTFT and gives each band its share of the summed TTFT and its means', () => {
    const failed = { ...newOutcome(200, 0, 10_000, 100), error: 'engine failed' };
    const noFirstToken = newOutcome(201, 0, 10_000, 100);
    const bands = ttftBands([...outcomes, failed, noFirstToken], none, round);
    expect(bands.map((b) => [b.band, b.requests])).toEqual([
      ['slowest 1 %', 2],
      ['next 9 %', 18],
      ['other 90 %', 180],
    ]);
    const total = (200 * 201) / 2;
    expect(bands[0]).toEqual({
      band: 'slowest 1 %',
      requests: 2,
      ttft_share: round((200 + 199) / total),
      ttft_mean_ms: 199.5,
      engine_wait_mean_ms: 99.75,
      prompt_tokens_mean: 10_000,
      uncached_tokens_mean: 2_000,
      moved_share: null,
      cache_shortfall_tokens_mean: 1_000,
    });
    // TTFT 198 down to 181 (indexes 197 to 180): 8 of the 18 (indexes 190 to 197) were predicted 1,000 tokens too many.
    expect(bands[1]!.ttft_mean_ms).toBe(189.5);
    expect(bands[1]!.cache_shortfall_tokens_mean).toBe(round(8_000 / 18));
    expect(bands[2]!.cache_shortfall_tokens_mean).toBe(0);
    expect(bands.reduce((s, b) => s + b.ttft_share!, 0)).toBeCloseTo(1, 3);
  });

  it('counts a request as moved when it runs on another engine than the one request it follows', () => {
    // Each request follows the one before; every fourth one changes engine.
    const chain = outcomes.map((o, i) => ({ ...o, workerId: 1 + Math.floor(i / 4) }));
    const follows = (i: number): number | undefined => (i > 0 ? i - 1 : undefined);
    const bands = ttftBands(chain, follows, round);
    // Slowest 1 %: indexes 199 and 198, neither the first of a run of four.
    expect(bands[0]!.moved_share).toBe(0);
    // Next 9 %: indexes 197 down to 180, of which 196, 192, 188, 184 and 180 start a run.
    expect(bands[1]!.moved_share).toBe(round(5 / 18));
    // The other 90 %: 179 down to 0; index 0 follows nothing.
    expect(bands[2]!.moved_share).toBe(round(44 / 179));
  });

  it('leaves out what a run did not record, and a run without completed requests', () => {
    const online = outcomes.map((o) => ({ ...o, admittedMs: null, cachedTokens: null, predictedCachedTokens: null }));
    const bands = ttftBands(online, none, round);
    expect(bands[0]).toMatchObject({
      requests: 2,
      engine_wait_mean_ms: null,
      uncached_tokens_mean: null,
      cache_shortfall_tokens_mean: null,
      moved_share: null,
    });
    expect(ttftBands([], none, round).every((b) => b.requests === 0 && b.ttft_share === null)).toBe(true);
  });
});
