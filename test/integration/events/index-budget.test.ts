/**
 * The prefix index under its memory budget (`router_index_memory_budget_mib`), through `kvgate serve`
 * as an operator runs it: a real mocker engine publishing KV events over ZMQ fills the gateway's index
 * past a small budget. The index evicts its least recently matched blocks, never holds more than the
 * budget, and says so: one warn line per episode, the eviction counters and the bytes gauge in /metrics;
 * the gateway keeps routing on what it kept.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { json, postOk as post, startEngine, startGateway, suiteProcesses } from './procs.js';

const BLOCK = 16;
const PROMPT_BLOCKS = 32;
const BUDGET_MIB = 0.5;
/** pino's numeric level of `warn`. */
const WARN = 40;

describe('the prefix index under its memory budget', () => {
  const procs = suiteProcesses('kvgate-index-budget-');

  it('evicts the least recently matched blocks at the budget: warn line once, counters, gauge, routing goes on', async () => {
    const engine = await startEngine(procs, ['--seed', '5', '--num-gpu-blocks', '200000']);
    const url = await startGateway(procs, {
      name: engine.model,
      block_size: BLOCK,
      router: { router_index_memory_budget_mib: BUDGET_MIB },
      workers: [{ id: 1, url: engine.url, kv_events: (engine.kv_events as string[])[0] }],
    });
    const model = String(engine.model);
    const rng = seededRng(28);
    const prompts: number[][] = [];
    const complete = async (): Promise<void> => {
      const prompt = Array.from({ length: PROMPT_BLOCKS * BLOCK + 1 }, () => 1000 + Math.floor(rng() * 50_000));
      await post(`${url}/v1/completions`, { model, prompt, max_tokens: 1 });
      prompts.push(prompt);
    };
    const overlap = async (prompt: number[]): Promise<number> =>
      (await post(`${url}/v1/route`, { model, prompt })).overlap_blocks as number;
    const evicted = (): Promise<number> => metric(url, 'kvgate_index_evicted_entries_total', { model });

    // The subscription may join late (ZMQ slow joiner): the first prompt is in the index once it routes to it.
    await until(
      async () => {
        await complete();
        return (await overlap(prompts.at(-1)!)) === PROMPT_BLOCKS;
      },
      'the index follows the engine',
      20_000,
    );
    // The first prompt the index held is never matched again: the least recently matched, it goes first.
    const first = prompts.at(-1)!;
    await until(
      async () => {
        for (let k = 0; k < 10; k++) await complete();
        return (await evicted()) > 0;
      },
      'an eviction under the budget',
      60_000,
    );
    for (let k = 0; k < 60; k++) await complete();

    const budgetBytes = BUDGET_MIB * 2 ** 20;
    await until(async () => (await metric(url, 'kvgate_index_memory_bytes', { model })) > 0, 'the index gauge', 5000);
    expect(await metric(url, 'kvgate_index_memory_bytes', { model, worker_type: 'decode' })).toBeLessThanOrEqual(
      budgetBytes,
    );
    expect(await metric(url, 'kvgate_index_eviction_episodes_total', { model, worker_type: 'decode' })).toBe(1);
    expect(await evicted()).toBeGreaterThan(0);
    const warns = procs
      .gateway!.lines.map(json)
      .filter((o) => o !== undefined && o.level === WARN && /reached its memory budget/.test(String(o.msg)));
    expect(warns).toHaveLength(1);
    expect(warns[0]).toMatchObject({ worker_type: 'decode', budget_bytes: budgetBytes, episodeStart: true });
    // Routing goes on over what was kept: the newest prompt is matched in full, the first is gone.
    expect(await overlap(prompts.at(-1)!)).toBe(PROMPT_BLOCKS);
    expect(await overlap(first)).toBe(0);
  }, 120_000);
});
