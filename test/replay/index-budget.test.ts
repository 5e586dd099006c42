/**
 * A replay's KV router holds its prefix index, with a hybrid model's KV-cache group indexes beside it, to the
 * policy's `router_index_memory_budget_mib`, as the gateway's pool does (routing's `holdIndexToBudget`): a hybrid
 * engine (full attention + sliding window, the mocker's core) serving many distinct prompts publishes more blocks
 * than the budget holds, and the replay's router evicts to stay within it.
 *
 * Before the fix the replay never set the budget: the index and its group indexes grew past it, so a replay of a
 * model with a budget over-stated the hits the gateway would see.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { createEngineCore } from '../../src/mocker/index.js';
import { parsePolicies, type PolicySpec } from '../../src/replay/index.js';
import { createPoolRouter } from '../../src/replay/routers.js';
import type { KvRouter } from '../../src/routing/index.js';

const BS = 16;
const BUDGET_MIB = 0.5;
const BUDGET = BUDGET_MIB * 2 ** 20;

/** The peak bytes of the router's whole index (its groups' included) and the router, after `requests` prompts. */
function replayHybrid(policy: PolicySpec, requests: number): { peak: number; router: KvRouter } {
  const clock = new ManualClock(0);
  const pool = createPoolRouter(
    policy,
    { role: 'aggregated', workerIds: [0], blockSize: BS, clock, maxNumBatchedTokens: 8192, totalKvBlocks: 100_000 },
    { count: 1, sync: false, syncDelayMs: 1, front: 'rr' },
    () => seededRng(1),
  );
  const router = (pool as unknown as { router: KvRouter }).router;
  const core = createEngineCore({
    kvGroups: 'full,sliding:64',
    numGpuBlocks: 100_000,
    blockSize: BS,
    maxModelLen: 100_000 * BS,
    engineHashSeed: 7n,
  });
  const rng = seededRng(5);
  let now = 0;
  let peak = 0;
  for (let n = 0; n < requests; n++) {
    const prompt = Array.from({ length: 32 * BS }, () => 1 + Math.floor(rng() * 50_000));
    core.add({ id: `r${n}`, promptTokens: prompt, maxTokens: 2, seed: n }, now);
    for (let guard = 0; !core.isIdle() && guard < 10_000; guard++) {
      const step = core.step(now);
      now += step.durationMs > 0 ? step.durationMs : 1;
      if (step.kvEvents.length > 0) pool.applyKvEvents(0, step.kvEvents);
      peak = Math.max(peak, router.index.pooledBytes);
    }
  }
  return { peak, router };
}

describe("a hybrid model's replay under the index memory budget", () => {
  const [unbounded, bounded] = parsePolicies(['kv'], [JSON.stringify({ router_index_memory_budget_mib: BUDGET_MIB })]);

  it('evicts to stay within the budget, the sliding-window group held with the full-attention one', () => {
    // Without a budget the same traffic takes the index past it: the bound below is not vacuous.
    expect(replayHybrid(unbounded!, 400).peak).toBeGreaterThan(BUDGET * 1.5);
    const { peak, router } = replayHybrid(bounded!, 400);
    expect(peak).toBeLessThanOrEqual(BUDGET);
    expect(router.index.memoryBudget).toBe(BUDGET);
    expect(router.index.evictedEntries).toBeGreaterThan(0);
    // The group's index shares the budget: the pool holds more than the primary alone.
    expect(router.index.pooledBytes).toBeGreaterThan(router.index.bytes);
  });
});
