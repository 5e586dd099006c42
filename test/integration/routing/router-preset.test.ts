/**
 * `router_preset` takes effect in a running gateway: `kvgate serve` in front of two `kvgate mocker` engines
 * (KV events over ZMQ, answers over HTTP), its config file naming the preset, reloaded with another.
 *
 * The scenario tells Dynamo's defaults from its `--agentic` preset: worker 1 holds a 9-block prompt (served
 * there once) and runs one stream (its engine then stalls every answer after 2 tokens, so it stays in flight);
 * worker 2 is idle and holds nothing. Under `dynamo` the active request costs nothing and the cached prefix
 * wins: the prompt routes to worker 1. Under `dynamo-agentic` each active request costs 64 blocks, more than
 * the prefill worker 2 would do (x4): the same prompt routes to worker 2. The switch is a SIGHUP reload of
 * the file, which the log names with the preset and the knobs it moved, and `/admin/config` shows.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { adminRouter, cacheOn, holdStreamOn, routeIds } from '../../helpers/routing-scene.js';

const MODEL = 'mock-model';
const BS = 16;
/** 8 full blocks and a partial one. */
const PROMPT = Array.from({ length: 8 * BS + 8 }, (_, i) => 1000 + ((i * 7919) % 30_000));
/** One full block, unrelated to PROMPT: the stream that stays in flight on worker 1. */
const HELD = Array.from({ length: BS + 4 }, (_, i) => 2000 + i);

describe('router_preset in a running gateway (kvgate serve + mocker engines)', () => {
  let suite: MockerSuite;
  let file: string;
  let url: string;
  let gateway: CliProcess;
  let held: ReadableStreamDefaultReader<Uint8Array> | undefined;

  const config = (preset: string): string =>
    serveConfig(MODEL, [
      `block_size: ${BS}`,
      `router: { router_preset: ${preset} }`,
      'workers:',
      ...suite.engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`),
    ]);

  beforeAll(async () => {
    suite = await startMockerSuite(
      'preset',
      ['--speedup', '100', '--block-size', String(BS), '--tokenizer', 'demo'],
      2,
    );
    file = suite.write('kvgate.yaml', config('dynamo'));
    const gw = await startServeCli(file);
    gateway = gw.proc;
    suite.procs.push(gateway);
    url = gw.url;

    const g = { url, model: MODEL };
    // Worker 1 caches PROMPT, and the router indexes it.
    await cacheOn(g, 1, PROMPT, 8);
    // A stream that stays in flight on worker 1: its engine now stalls every answer after 2 tokens.
    held = await holdStreamOn(g, 1, suite.engines[0]!.url, HELD);
  }, 60_000);

  afterAll(async () => {
    await held?.cancel().catch(() => undefined);
    await suite?.stop();
  });

  it('dynamo: the cached prefix wins over the busy worker', async () => {
    expect(await adminRouter({ url, model: MODEL })).toMatchObject({
      preset: 'dynamo',
      router: {
        overlapScoreCredit: 1,
        prefillLoadScale: 1,
        decodeActiveRequestWeight: 0,
        routerKvPressureWeight: 0,
        routerKvOverflowWeight: 0,
      },
    });
    expect(await routeIds({ url, model: MODEL }, PROMPT)).toEqual({ worker: 1, overlap: 8 });
  });

  it('dynamo-agentic after a reload: the active request outweighs the prefix, and the idle worker wins', async () => {
    writeFileSync(file, config('dynamo-agentic'));
    gateway.child.kill('SIGHUP');
    const line = (await gateway.waitFor(/configuration reloaded: ([^\n]*)/, 'the reload log line'))[1]!;
    expect(line).toContain('router_preset');
    expect(line).toContain('decode_active_request_weight');
    expect(await adminRouter({ url, model: MODEL })).toMatchObject({
      preset: 'dynamo-agentic',
      router: {
        overlapScoreCredit: 2,
        prefillLoadScale: 4,
        decodeActiveRequestWeight: 64,
        routerKvPressureWeight: 0,
        routerKvOverflowWeight: 0,
      },
    });
    // The stream is still booked on worker 1: only the knobs changed.
    expect(await metric(url, 'kvgate_worker_active_requests', { worker_id: '1' })).toBe(1);
    expect((await routeIds({ url, model: MODEL }, PROMPT)).worker).toBe(2);
  });
});
