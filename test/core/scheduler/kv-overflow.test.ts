/**
 * KV overflow in the cost: where the blocks of a worker's running requests plus the prompt's new blocks
 * exceed its advertised KV capacity, the engine admits the prompt only once running requests finish, so
 * the cache credit it would earn there is void and the overflow is charged as prefill. Where every
 * candidate overflows, each is charged only its overflow beyond the least one's. Below a full cache, with
 * no known capacity, or with weight 0 (the Dynamo presets), the cost is Dynamo's.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { candidateCost } from '../../../src/core/cost.js';
import { KV_ROUTER_DEFAULTS, routerPresetOptions, type KvRouterOptions } from '../../../src/core/index.js';
import { KvRouter } from '../../../src/routing/index.js';
import { promptHashes } from '../../../src/wasm/index.js';
import { dynamoCostKnobs } from '../../helpers/cost-knobs.js';

const BS = 4;
const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);
/** Dynamo's prefill scale and the term at weight 1, which the costs below are worked in (kvgate's defaults: 4 and 2). */
const UNIT: KvRouterOptions = { prefillLoadScale: 1, routerKvOverflowWeight: 1 };
/** The new prompt: 10 blocks, the first 8 cached on worker 1. */
const PROMPT = tokens(40);

/**
 * Two workers of `capacity` blocks. Worker 1 holds 8 of the prompt's 10 blocks (a paused session's
 * context) and runs a request of 4 blocks, so taking the prompt needs 4 + 10 blocks; worker 2 is idle
 * and empty. Dynamo's cost prefers worker 1 (2 blocks to prefill and 14 active against 10 and 10).
 */
function scene(config: KvRouterOptions, capacity: number | undefined): KvRouter {
  const r = new KvRouter({
    blockSize: BS,
    config: { ...UNIT, ...config },
    clock: new ManualClock(),
    rng: seededRng(5),
  });
  for (const w of [1, 2]) r.addWorker(w, capacity === undefined ? {} : { totalKvBlocks: capacity });
  const h = promptHashes(PROMPT.slice(0, 32), BS);
  r.index.applyStored(1, 0, null, h.seq, h.local);
  r.findBestMatch({ requestId: 'running', tokens: tokens(16, 5000), routing: { backendInstanceId: 1 } });
  r.markPrefillCompleted('running');
  return r;
}

function costs(r: KvRouter, requestId = 'new'): { costs: Record<number, number>; workerId: number } {
  const d = r.findBestMatch({ requestId, tokens: PROMPT }, { mode: 'query' });
  return { costs: Object.fromEntries(d.candidates.map((c) => [c.workerId, c.cost])), workerId: d.workerId };
}

describe('KV overflow (routerKvOverflowWeight)', () => {
  it('voids the credit of a worker the prompt overflows and charges the overflow, so the prompt goes where it fits', () => {
    // Worker 1: prefill 10 - 8 credit, + (8 credit + 2 overflow), + 14 active; worker 2: prefill 10 + 10 active.
    expect(costs(scene({}, 12))).toEqual({ costs: { 1: 2 + 10 + 14, 2: 20 }, workerId: 2 });
    // At the prefill scale, like the prefill it stands for.
    expect(costs(scene({ prefillLoadScale: 2 }, 12)).costs).toEqual({ 1: 2 * (2 + 10) + 14, 2: 2 * 10 + 10 });
    // kvgate's defaults, prefill scale 4 and weight 2: the credit counts against worker 1 twice.
    const defaults = { prefillLoadScale: KV_ROUTER_DEFAULTS.prefillLoadScale, routerKvOverflowWeight: 2 };
    expect(costs(scene(defaults, 12))).toEqual({ costs: { 1: 4 * (2 + 2 * 10) + 14, 2: 4 * 10 + 10 }, workerId: 2 });
  });

  it('follows the bookings: once the running request ends, the prompt fits and its cache wins again', () => {
    const r = scene({}, 12);
    expect(costs(r, 'a').workerId).toBe(2);
    r.free('running');
    expect(costs(r, 'b')).toEqual({ costs: { 1: 2 + 10, 2: 20 }, workerId: 1 });
  });

  it('where every worker overflows, charges each only its overflow beyond the least, so the cache counts again', () => {
    // Worker 2 runs a request too: `blocks` of its own, so taking the prompt needs blocks + 10 there.
    const both = (capacity: number, blocks: number): ReturnType<typeof costs> => {
      const r = scene({}, capacity);
      r.findBestMatch({ requestId: 'running-2', tokens: tokens(blocks * BS, 9000), routing: { backendInstanceId: 2 } });
      r.markPrefillCompleted('running-2');
      return costs(r);
    };
    // Both need 14 of 12 blocks: the prompt waits on either, so neither overflow is charged and worker 1's
    // cache wins (voiding both credits instead would have tied them at 2 + 10 + 14 and 10 + 2 + 14).
    expect(both(12, 4)).toEqual({ costs: { 1: 2 + 14, 2: 10 + 14 }, workerId: 1 });
    // Worker 2 overflows by 3, worker 1 by 2: only worker 2 pays, for its 1 block beyond worker 1's 2.
    expect(both(12, 5)).toEqual({ costs: { 1: 2 + 14, 2: 10 + (0 + 1) + 15 }, workerId: 1 });
    // Worker 2 fits (its 2 blocks + 10): worker 1 pays its whole overflow, as before.
    expect(both(12, 2)).toEqual({ costs: { 1: 2 + (8 + 2) + 14, 2: 10 + 12 }, workerId: 2 });
  });

  it("is Dynamo's cost with weight 0, with room in the cache, with no advertised capacity, and in the Dynamo presets", () => {
    for (const [config, capacity] of [
      [{ routerKvOverflowWeight: 0 }, 12],
      [{}, 14],
      [{}, undefined],
    ] as const) {
      expect(costs(scene(config, capacity))).toEqual({ costs: { 1: 2 + 14, 2: 20 }, workerId: 1 });
    }
    expect(routerPresetOptions('dynamo').routerKvOverflowWeight).toBe(0);
    expect(routerPresetOptions('dynamo-agentic').routerKvOverflowWeight).toBe(0);
    expect(KV_ROUTER_DEFAULTS.routerKvOverflowWeight).toBe(2);
  });

  it('the pure cost: the credit and the overflow weighted and scaled; absent weight or the decode exception ignore them', () => {
    const knobs = dynamoCostKnobs({ prefillLoadScale: 3 });
    const req = { isl: 40, blockSize: 4, minActivePrefillTokens: 0 };
    const c = { activePrefillTokens: 0, deviceOverlapBlocks: 6, potentialDecodeBlocks: 20, activeRequests: 1 };
    expect(candidateCost(knobs, req, { ...c, overflowBlocks: 4 })).toBe(3 * 4 + 20);
    expect(candidateCost({ ...knobs, kvOverflowWeight: 1 }, req, { ...c, overflowBlocks: 4 })).toBe(3 * (4 + 10) + 20);
    expect(candidateCost({ ...knobs, kvOverflowWeight: 0.5 }, req, { ...c, overflowBlocks: 4 })).toBe(3 * (4 + 5) + 20);
    expect(candidateCost({ ...knobs, kvOverflowWeight: 1 }, req, c)).toBe(3 * 4 + 20);
    const decode = { ...knobs, kvOverflowWeight: 1, decodeException: true, trackPrefillTokens: false };
    expect(candidateCost(decode, req, { ...c, overflowBlocks: 4 })).toBe(20 - 6);
  });
});
