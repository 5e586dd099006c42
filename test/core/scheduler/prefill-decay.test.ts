/**
 * The prefill load model (`router_prefill_load_model: decay`, Dynamo's `aic` with the time measured): a slot's oldest
 * pending prefill counts less as the slot computes it, at the rate its earlier prefills went; the next one starts
 * decaying when it completes; a request freed before its first token gives no rate; without a measured rate, and
 * with the model off, the load is the booked tokens. And a decision: the worker whose long prefill is nearly done
 * takes the next request, where the booked tokens send it elsewhere.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { ActiveSequences } from '../../../src/core/active-sequences.js';
import { resolveKvRouterConfig } from '../../../src/core/index.js';
import { kvRouterOptionsFromFlags } from '../../../src/config/router-flags.js';
import { KvRouter } from '../../../src/routing/index.js';

const SLOTS = new Int32Array([0, 1]);

function sequences(clock: ManualClock, prefillDecay = true): ActiveSequences {
  const a = new ActiveSequences({ clock, prefillDecay });
  a.ensureSlot(0, 1, 0);
  a.ensureSlot(1, 2, 0);
  return a;
}

const book = (a: ActiveSequences, id: string, slot: number, prefillTokens: number): void =>
  a.add({ requestId: id, slot, hashes: null, prefillTokens });

describe('the prefill load model (router_prefill_load_model)', () => {
  it("decays a slot's oldest pending prefill at the rate the slot measured, then the next one from its start", () => {
    const clock = new ManualClock(0);
    const a = sequences(clock);
    book(a, 'first', 0, 1000);
    clock.advance(40);
    // No rate measured yet: the booked tokens.
    expect(a.prefillTokensNow(SLOTS, 2)[0]).toBe(1000);
    clock.advance(60);
    a.markPrefillCompleted('first'); // 1,000 tokens in 100 ms: 10 a ms
    book(a, 'a', 0, 2000);
    book(a, 'b', 0, 500);
    clock.advance(50);
    // a, the anchor since t = 100, is a quarter done; b waits in full.
    expect(a.prefillTokensNow(SLOTS, 2)[0]).toBe(1500 + 500);
    expect(a.activePrefillTokens[0]).toBe(2500); // the booked tokens, as the busy thresholds read them
    clock.advance(250);
    expect(a.prefillTokensNow(SLOTS, 2)[0]).toBe(500); // a overdue: counted as done, not below
    a.markPrefillCompleted('a'); // 2,000 tokens in 300 ms: the rate moves a quarter of the way to 6.67 a ms
    clock.advance(30);
    // b is the anchor from a's completion at t = 400: 500 tokens at 9.17 a ms, 30 ms in.
    expect(a.prefillTokensNow(SLOTS, 2)[0]).toBe(Math.ceil(500 * (1 - (30 * (10 + 0.25 * (2000 / 300 - 10))) / 500)));
    // Slot 1 measured nothing: its booked tokens.
    book(a, 'c', 1, 700);
    clock.advance(1000);
    expect(a.prefillTokensNow(SLOTS, 2)[1]).toBe(700);
  });

  it('takes no rate from a request freed before its first token, and makes the next one the anchor', () => {
    const clock = new ManualClock(0);
    const a = sequences(clock);
    book(a, 'cancelled', 0, 1000);
    clock.advance(10);
    a.free('cancelled');
    book(a, 'x', 0, 1000);
    clock.advance(100);
    a.markPrefillCompleted('x'); // 10 a ms, from x's own start: the cancelled one gave no sample
    book(a, 'y', 0, 1000);
    book(a, 'z', 0, 1000);
    clock.advance(20);
    a.free('y'); // the anchor freed: z is the anchor from now
    clock.advance(50);
    expect(a.prefillTokensNow(SLOTS, 1)[0]).toBe(500);
  });

  it('keeps the booked tokens with the model off', () => {
    const clock = new ManualClock(0);
    const a = sequences(clock, false);
    book(a, 'first', 0, 1000);
    clock.advance(100);
    a.markPrefillCompleted('first');
    book(a, 'next', 0, 1000);
    clock.advance(50);
    expect(a.prefillTokensNow(SLOTS, 1)).toBe(a.activePrefillTokens);
    expect(a.prefillTokensNow(SLOTS, 1)[0]).toBe(1000);
  });

  it("is read from Dynamo's spellings, aic taken as decay, and a wrong value names the field", () => {
    expect(resolveKvRouterConfig({}).routerPrefillLoadModel).toBe('none');
    expect(resolveKvRouterConfig({ routerPrefillLoadModel: 'aic' as 'decay' }).routerPrefillLoadModel).toBe('decay');
    expect(kvRouterOptionsFromFlags({ '--router-prefill-load-model': 'aic' })).toEqual({
      routerPrefillLoadModel: 'aic',
    });
    expect(() => resolveKvRouterConfig({ routerPrefillLoadModel: 'linear' as 'decay' })).toThrow(
      /router_prefill_load_model|routerPrefillLoadModel/,
    );
  });

  it('sends a request to the worker whose long prefill is nearly done, where the booked tokens send it elsewhere', () => {
    const pick = (model: 'none' | 'decay'): number => {
      const clock = new ManualClock(0);
      const r = new KvRouter({ blockSize: 4, config: { routerPrefillLoadModel: model }, clock, rng: seededRng(1) });
      r.addWorker(1);
      r.addWorker(2);
      const prompt = (n: number, from: number): number[] => Array.from({ length: n }, (_, i) => from + i);
      // Each worker measures its rate first: 1,000 tokens in 100 ms.
      for (const w of [1, 2]) {
        r.findBestMatch({
          requestId: `warm${w}`,
          tokens: prompt(1000, w * 100_000),
          routing: { backendInstanceId: w },
        });
      }
      clock.advance(100);
      for (const w of [1, 2]) {
        r.markPrefillCompleted(`warm${w}`);
        r.free(`warm${w}`);
      }
      // Worker 1 started a 10,000-token prefill 950 ms ago (about 500 tokens left); worker 2 a 3,000-token one now.
      r.findBestMatch({ requestId: 'long', tokens: prompt(10_000, 500_000), routing: { backendInstanceId: 1 } });
      clock.advance(950);
      r.findBestMatch({ requestId: 'short', tokens: prompt(3000, 700_000), routing: { backendInstanceId: 2 } });
      return r.findBestMatch({ requestId: 'next', tokens: prompt(2000, 900_000) }, { mode: 'query' }).workerId;
    };
    expect(pick('none')).toBe(2);
    expect(pick('decay')).toBe(1);
  });
});
