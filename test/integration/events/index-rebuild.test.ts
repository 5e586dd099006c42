/**
 * The prefix index after the WebAssembly module fails an allocation, through `kvgate serve` as an operator
 * runs it: two mocker engines publish KV events over ZMQ with replay buffers; the gateway's module is made
 * to fail one index allocation (the test hook `KVGATE_TEST_INDEX_ALLOC_FAILURE`: once the model's KV-event
 * index holds that many entries, its next allocation fails exactly as an exhausted memory does). No request fails, the model's
 * index is discarded and rebuilt from both engines' replay buffers (every prompt stored before the failure is
 * matched in full again), one error line says so and `kvgate_index_rebuilds_total` counts it.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { json, postOk as post, startEngine, startGateway, suiteProcesses, workerOf } from './procs.js';

const BLOCK = 16;
const PROMPT_BLOCKS = 32;
/** The index's entries at which the hook arms the failure: a few prompts in. */
const FAIL_AT_ENTRIES = 100;
/** pino's numeric level of `error`. */
const ERROR = 50;

const ENGINE_ARGS = ['--kv-events-replay-port', '0', '--num-gpu-blocks', '200000'];

describe('the prefix index after an allocation failure in the WebAssembly module', () => {
  const procs = suiteProcesses('kvgate-index-rebuild-');

  it("is discarded and rebuilt from the engines' replay buffers while every request is answered", async () => {
    const a = await startEngine(procs, ['--seed', '7', ...ENGINE_ARGS]);
    const b = await startEngine(procs, ['--seed', '8', ...ENGINE_ARGS]);
    process.env.KVGATE_TEST_INDEX_ALLOC_FAILURE = String(FAIL_AT_ENTRIES);
    let url: string;
    try {
      url = await startGateway(procs, { name: a.model, block_size: BLOCK, workers: [workerOf(1, a), workerOf(2, b)] });
    } finally {
      delete process.env.KVGATE_TEST_INDEX_ALLOC_FAILURE;
    }
    const model = String(a.model);
    const rng = seededRng(28);
    const prompts: number[][] = [];
    const complete = async (): Promise<number[]> => {
      const prompt = Array.from({ length: PROMPT_BLOCKS * BLOCK + 1 }, () => 1000 + Math.floor(rng() * 50_000));
      await post(`${url}/v1/completions`, { model, prompt, max_tokens: 1 });
      prompts.push(prompt);
      return prompt;
    };
    const overlap = async (prompt: number[]): Promise<number> =>
      (await post(`${url}/v1/route`, { model, prompt })).overlap_blocks as number;
    const rebuilds = (): Promise<number> => metric(url, 'kvgate_index_rebuilds_total', { model });

    // Both subscriptions may join late (ZMQ slow joiner): wait until a prompt on each engine is in the index.
    await until(
      async () => {
        const p = await complete();
        return (await overlap(p)) === PROMPT_BLOCKS && (await overlap(prompts[0]!)) === PROMPT_BLOCKS;
      },
      'the index follows both engines',
      20_000,
    );
    expect(await rebuilds()).toBe(0);
    // Past the hook's entries, the index's next allocation fails; requests go on being answered (post checks 200).
    await until(
      async () => {
        await complete();
        return (await rebuilds()) > 0;
      },
      'a rebuild after the allocation failure',
      30_000,
    );
    for (let k = 0; k < 5; k++) await complete();
    // Rebuilt: every prompt stored before the failure (lost with the discarded index) is matched in full again.
    await until(
      async () => {
        for (const p of prompts) if ((await overlap(p)) !== PROMPT_BLOCKS) return false;
        return true;
      },
      "the index rebuilt from the engines' replay buffers",
      20_000,
    );
    expect(await rebuilds()).toBe(1);
    expect(await metric(url, 'kvgate_index_rebuilds_total', { model, worker_type: 'decode' })).toBe(1);
    expect(await metric(url, 'kvgate_kv_event_replays_total', { outcome: 'recovered' })).toBeGreaterThanOrEqual(2);
    const errors = procs
      .gateway!.lines.map(json)
      .filter((o) => o !== undefined && o.level === ERROR && /prefix index discarded/.test(String(o.msg)));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ code: 'KVG_ERR_INDEX_MEMORY', slots: 2, withReplay: 2, model });
  }, 120_000);
});
