/**
 * The KV-overflow term in a running gateway: `kvgate serve` in front of two `kvgate mocker` engines of 96
 * KV blocks each (KV events over ZMQ, answers over HTTP).
 *
 * Worker 1 holds a conversation's 40-block context (served there once) and runs a 40-block stream that stays
 * in flight (its engine stalls every answer after 2 tokens). The conversation's next turn is 64 blocks: on
 * worker 1 it needs 40 + 64 blocks of a 96-block cache, so the engine would hold it until the stream ends.
 * With the term off (weight 0) the cached context wins and the router picks worker 1, where the turn would
 * wait; reloaded (SIGHUP) to the default cost, the router sends the turn to idle worker 2, which serves it.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { adminRouter, cacheOn, holdStreamOn, postModel, routeIds } from '../../helpers/routing-scene.js';

const MODEL = 'mock-model';
const BS = 16;
const CAPACITY = 96;
const ids = (blocks: number, from: number): number[] => Array.from({ length: blocks * BS }, (_, i) => from + i);
/** The conversation so far: 40 blocks, cached on worker 1. */
const CONTEXT = ids(40, 1000);
/** Its next turn: the context and 24 blocks more. */
const TURN = [...CONTEXT, ...ids(24, 5000)];
/** 40 blocks unrelated to the conversation, plus a partial one: the stream that stays in flight on worker 1. */
const HELD = [...ids(40, 20_000), 1, 2, 3, 4];

describe('the KV-overflow term in a running gateway (kvgate serve + mocker engines)', () => {
  let suite: MockerSuite;
  let file: string;
  let url: string;
  let gateway: CliProcess;
  let held: ReadableStreamDefaultReader<Uint8Array> | undefined;

  const config = (router: string): string =>
    serveConfig(MODEL, [
      `block_size: ${BS}`,
      `router: { ${router} }`,
      'workers:',
      ...suite.engines.map(
        (e, i) => `  - { id: ${i + 1}, url: "${e.url}", kv_events: "${e.kv_events[0]}", total_kv_blocks: ${CAPACITY} }`,
      ),
    ]);

  const overflowWeight = async (): Promise<unknown> =>
    (await adminRouter({ url, model: MODEL })).router.routerKvOverflowWeight;
  const route = (prompt: readonly number[]): Promise<{ worker: number; overlap: number }> =>
    routeIds({ url, model: MODEL }, prompt);

  beforeAll(async () => {
    suite = await startMockerSuite(
      'kv-overflow',
      ['--speedup', '100', '--block-size', String(BS), '--num-gpu-blocks', String(CAPACITY), '--tokenizer', 'demo'],
      2,
    );
    file = suite.write('kvgate.yaml', config('router_preset: kv, router_kv_overflow_weight: 0'));
    const gw = await startServeCli(file);
    gateway = gw.proc;
    suite.procs.push(gateway);
    url = gw.url;

    const g = { url, model: MODEL };
    // Worker 1 caches the context, and the router indexes it.
    await cacheOn(g, 1, CONTEXT, 40);
    // A stream that stays in flight on worker 1: its engine now stalls every answer after 2 tokens.
    held = await holdStreamOn(g, 1, suite.engines[0]!.url, HELD);
  }, 60_000);

  afterAll(async () => {
    await held?.cancel().catch(() => undefined);
    await suite?.stop();
  });

  it('with the term off, the cached context wins the turn for worker 1, where the engine has no room for it', async () => {
    expect(await overflowWeight()).toBe(0);
    // Worker 1: 24 blocks to prefill and 8 evicted at scale 4, 104 active blocks (232); worker 2: 64 blocks to
    // prefill and 64 active (320).
    expect(await route(TURN)).toEqual({ worker: 1, overlap: 40 });
  });

  it('with the default cost the turn goes to the worker with room, and is served there', async () => {
    writeFileSync(file, config('router_preset: kv'));
    gateway.child.kill('SIGHUP');
    const line = (await gateway.waitFor(/configuration reloaded: ([^\n]*)/, 'the reload log line'))[1]!;
    expect(line).toContain('router_kv_overflow_weight');
    expect(await overflowWeight()).toBe(2);
    // The stream is still booked on worker 1: only the knob changed. Worker 1 now also pays the credit of 40
    // and the overflow of 8, twice, at scale 4: 232 + 4 x 2 x 48 = 616, against 320.
    expect(await metric(url, 'kvgate_worker_active_requests', { worker_id: '1' })).toBe(1);
    expect(await route(TURN)).toEqual({ worker: 2, overlap: 0 });
    const res = await postModel({ url, model: MODEL }, '/v1/completions', { prompt: TURN, max_tokens: 2 });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-kvgate-worker')).toBe('2');
    await res.arrayBuffer();
  });
});
