/**
 * The prefix index under its memory budget (`router_index_memory_budget_mib`), through `kvgate serve`
 * as an operator runs it: a real mocker engine publishing KV events over ZMQ fills the gateway's index
 * past a small budget. The index evicts its least recently matched blocks, never holds more than the
 * budget, and says so: one warn line per episode, the eviction counters and the bytes gauge in /metrics;
 * the gateway keeps routing on what it kept. For a hybrid-attention model (`--kv-groups full,sliding:64`)
 * the budget bounds its whole index, the sliding-window group's beside the full-attention group's.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { json, promptTraffic, startEngine, startGateway, suiteProcesses, type SuiteProcesses } from './procs.js';

const BLOCK = 16;
const PROMPT_BLOCKS = 32;
const BUDGET_MIB = 0.5;
const BUDGET_BYTES = BUDGET_MIB * 2 ** 20;
/** pino's numeric level of `warn`. */
const WARN = 40;

/**
 * A gateway with the budget over one mocker engine (`engineArgs` added), sent fresh prompts (seeded) ten at a
 * time until its index first evicts; `sent` says how many that took.
 */
async function filledToEviction(procs: SuiteProcesses, engineArgs: readonly string[]) {
  const engine = await startEngine(procs, ['--seed', '5', '--num-gpu-blocks', '200000', ...engineArgs]);
  const url = await startGateway(procs, {
    name: engine.model,
    block_size: BLOCK,
    router: { router_index_memory_budget_mib: BUDGET_MIB },
    workers: [{ id: 1, url: engine.url, kv_events: (engine.kv_events as string[])[0] }],
  });
  const model = String(engine.model);
  const traffic = promptTraffic(url, model, { blocks: PROMPT_BLOCKS, blockSize: BLOCK, rng: seededRng(28) });
  const evicted = (): Promise<number> => metric(url, 'kvgate_index_evicted_entries_total', { model });
  // The subscription may join late (ZMQ slow joiner): the first prompt is in the index once it routes to it.
  await until(
    async () => {
      await traffic.complete();
      return (await traffic.overlap(traffic.prompts.at(-1)!)) === PROMPT_BLOCKS;
    },
    'the index follows the engine',
    20_000,
  );
  // The first prompt the index held is never matched again: the least recently matched, it goes first.
  const first = traffic.prompts.at(-1)!;
  const before = traffic.prompts.length;
  await until(
    async () => {
      for (let k = 0; k < 10; k++) await traffic.complete();
      return (await evicted()) > 0;
    },
    'an eviction under the budget',
    60_000,
  );
  return { url, model, traffic, first, sent: traffic.prompts.length - before, evicted };
}

/** After more traffic past the budget: the gauge within it, one episode and its warn line, routing on what was kept. */
async function expectBoundedAndRouting(procs: SuiteProcesses, run: Awaited<ReturnType<typeof filledToEviction>>) {
  const { url, model, traffic, first } = run;
  for (let k = 0; k < 60; k++) await traffic.complete();
  await until(async () => (await metric(url, 'kvgate_index_memory_bytes', { model })) > 0, 'the index gauge', 5000);
  expect(await metric(url, 'kvgate_index_memory_bytes', { model, worker_type: 'decode' })).toBeLessThanOrEqual(
    BUDGET_BYTES,
  );
  expect(await metric(url, 'kvgate_index_eviction_episodes_total', { model, worker_type: 'decode' })).toBe(1);
  expect(await run.evicted()).toBeGreaterThan(0);
  const warns = procs
    .gateway!.lines.map(json)
    .filter((o) => o !== undefined && o.level === WARN && /reached its memory budget/.test(String(o.msg)));
  expect(warns).toHaveLength(1);
  expect(warns[0]).toMatchObject({ worker_type: 'decode', budget_bytes: BUDGET_BYTES, episodeStart: true });
  // Routing goes on over what was kept: the newest prompt is matched in full, the first is gone.
  expect(await traffic.overlap(traffic.prompts.at(-1)!)).toBe(PROMPT_BLOCKS);
  expect(await traffic.overlap(first)).toBe(0);
}

describe('the prefix index under its memory budget', () => {
  const procs = suiteProcesses('kvgate-index-budget-');

  it('evicts the least recently matched blocks at the budget: warn line once, counters, gauge, routing goes on', async () => {
    await expectBoundedAndRouting(procs, await filledToEviction(procs, []));
  }, 120_000);

  it("bounds a hybrid model's whole index: its sliding-window group's blocks count against the same budget", async () => {
    // The same prompts to a full-attention engine, then to a hybrid one whose window group caches every block too.
    const full = await filledToEviction(procs, []);
    const hybrid = await filledToEviction(procs, ['--kv-groups', 'full,sliding:64']);
    // Twice the entries a prompt: the budget is reached after about half the prompts.
    expect(hybrid.sent).toBeLessThan(full.sent * 0.75);
    // Both groups keep the newest prompt's blocks: the hybrid rule still predicts it in full.
    await expectBoundedAndRouting(procs, hybrid);
  }, 180_000);
});
