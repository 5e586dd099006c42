/**
 * The time-unit cost: with the engines' step profile, the router scores a candidate by the predicted
 * milliseconds to the first token (queued and own prefill, the running requests' decode carried by
 * each prefill step, a wait when the KV cache cannot take the prompt) instead of counting blocks.
 * A linear step model (1 ms per prefill token, decode 10 ms + 0.001 ms per context token per
 * sequence) keeps the expected figures exact.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { KV_ROUTER_DEFAULTS, type StepCostModel } from '../../src/core/index.js';
import { newCostInput } from '../../src/core/cost.js';
import { chunkedPrefillMs, newStepCostLoad, stepCostOf } from '../../src/core/step-cost.js';
import { KvRouter } from '../../src/routing/index.js';
import { promptHashes } from '../../src/wasm/index.js';
import { dynamoCostKnobs } from '../helpers/cost-knobs.js';

const LINEAR: StepCostModel = {
  prefillMs: (_cached, tokens) => tokens,
  decodeMs: (batch, context) => 10 + 0.001 * batch * context,
};
const BS = 4;
const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

const KNOBS = dynamoCostKnobs({ kvPressureWeight: 1 });

describe('the time-unit cost (stepCostOf)', () => {
  it('is the predicted prefill ms, plus each prefill step carrying the running decodes', () => {
    const x = newCostInput();
    Object.assign(x, { isl: 100, blockSize: BS, requestBlocks: 25, activePrefill: 20, deviceOverlap: 10 });
    const l = newStepCostLoad();
    l.maxBatched = 32;
    // Idle: 20 queued + 60 uncached tokens, no running request.
    expect(stepCostOf(KNOBS, LINEAR, x, l)).toBe(80);
    // 2 running requests holding 100 blocks (200 tokens each): 3 steps of 32, each + (10.4 - 10) ms.
    Object.assign(x, { activeRequests: 2, potentialDecodeBlocks: 125 });
    l.activeBlocks = 100;
    expect(stepCostOf(KNOBS, LINEAR, x, l)).toBeCloseTo(80 + 3 * 0.4, 9);
  });

  it('waits for running requests to free the overflow when the KV cache cannot take the prompt', () => {
    const x = newCostInput();
    // 110 blocks to hold in a cache of 100: 10 over.
    Object.assign(x, { isl: 40, blockSize: BS, requestBlocks: 10, activeRequests: 4, potentialDecodeBlocks: 110 });
    x.overflow = 10;
    const l = newStepCostLoad();
    Object.assign(l, { maxBatched: 64, activeBlocks: 100 });
    const interfere = 10 + 0.001 * 4 * 100 - 10;
    // No request finished yet: the 10 overflow blocks' prefill (40 ms).
    expect(stepCostOf(KNOBS, LINEAR, x, l)).toBeCloseTo(40 + interfere + 40, 9);
    // Mean service 1 s: one of 4 requests (25 blocks each) must finish: 1000 / 4 ms.
    l.meanServiceMs = 1000;
    expect(stepCostOf(KNOBS, LINEAR, x, l)).toBeCloseTo(40 + interfere + 250, 9);
    // 60 overflow blocks: 3 of 4 must finish: 1000 × (1/4 + 1/3 + 1/2).
    Object.assign(x, { potentialDecodeBlocks: 160, overflow: 60 });
    expect(stepCostOf(KNOBS, LINEAR, x, l)).toBeCloseTo(40 + interfere + 1000 * (1 / 4 + 1 / 3 + 1 / 2), 9);
  });

  it('charges evicted blocks as their prefill, and chunks prefill by max_num_batched_tokens', () => {
    const x = newCostInput();
    Object.assign(x, { isl: 8, blockSize: BS, requestBlocks: 2, evicted: 2 });
    const l = newStepCostLoad();
    l.maxBatched = 8;
    expect(stepCostOf(KNOBS, LINEAR, x, l)).toBe(16);
    expect(stepCostOf({ ...KNOBS, kvPressureWeight: 0 }, LINEAR, x, l)).toBe(8);
    const calls: [number, number][] = [];
    chunkedPrefillMs({ prefillMs: (c, n) => (calls.push([c, n]), n), decodeMs: () => 0 }, 5, 20, 8);
    expect(calls).toEqual([
      [5, 8],
      [13, 8],
      [21, 4],
    ]);
  });
});

describe('a KvRouter given the step profile', () => {
  function scene(stepCost: StepCostModel | undefined): KvRouter {
    // Dynamo's prefill scale (1): the block counting below is Dynamo's, and the time-unit cost takes no scale.
    const config = { prefillLoadScale: 1 };
    const r = new KvRouter({ blockSize: BS, config, clock: new ManualClock(), rng: seededRng(1), stepCost });
    for (const w of [1, 2]) r.addWorker(w, { totalKvBlocks: 1000, maxNumBatchedTokens: 64 });
    // Worker 1 holds the session's 32-block context, and a 40-block request decodes there.
    const ctx = promptHashes(tokens(128), BS);
    r.index.applyStored(1, 0, null, ctx.seq, ctx.local);
    r.findBestMatch({ requestId: 'running', tokens: tokens(160, 9000), routing: { backendInstanceId: 1 } });
    r.markPrefillCompleted('running');
    return r;
  }
  const followUp = { requestId: 'turn', tokens: tokens(136) };

  it('keeps the follow-up on the worker holding its context, where block counting moves it away', () => {
    // Block counting: worker 1 = 2 prefill + 40 + 34 decode blocks = 76; worker 2 = 34 + 34 = 68.
    const counted = scene(undefined).findBestMatch(followUp, { mode: 'query' });
    expect(counted.workerId).toBe(2);
    // Time units: worker 1 = 8 ms prefill + 1 step × 0.16 ms decode; worker 2 = 136 ms prefill.
    const timed = scene(LINEAR).findBestMatch(followUp, { mode: 'query' });
    expect(timed.workerId).toBe(1);
    expect(Object.fromEntries(timed.candidates.map((c) => [c.workerId, c.cost]))).toEqual({
      1: 8 + 0.001 * 160,
      2: 136,
    });
  });

  it('scores with the block-counting cost when no profile is given', () => {
    const d = scene(undefined).findBestMatch(followUp, { mode: 'query' });
    expect(Object.fromEntries(d.candidates.map((c) => [c.workerId, c.cost]))).toEqual({ 1: 76, 2: 68 });
    expect(KV_ROUTER_DEFAULTS.routerKvPressureWeight).toBe(1);
  });
});
