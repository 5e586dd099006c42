/**
 * Hybrid attention end to end with real engines: `kvgate serve` in front of two `kvgate mocker` engines
 * started with `--kv-groups full,sliding:64` (full attention + a 64-token sliding window, as a Gemma-3- or
 * gpt-oss-style model), beside the same fleet in full attention only. Every process is real and every byte
 * crosses a socket: the engines' KV events over ZMQ (one event per group, encoded as vLLM encodes them), their
 * answers over HTTP, the group layout read from their `/metrics` on join.
 *
 * 1. A prefix slid out of the window on one engine but not on the other: engine A served a 40-block document
 *    then a 48-block unrelated prompt, which evicted the document's tail from A's block pool (tail first) and
 *    the document's head from A's window group (blocks that slid out of the window go first). A still holds the
 *    document's first 15 blocks in full attention, but not the window before any of them, so it can reuse
 *    nothing; engine B served the document's first 8 blocks and holds them whole. A request on the first 16
 *    blocks goes to A in full attention (15 blocks cached against 8, which outweighs the 4 blocks A's full cache
 *    must evict to take it) and to B on the hybrid fleet, where the engine then reports exactly the 8 blocks the
 *    router predicted.
 * 2. Prediction error: the same seeded agent-like workload (growing conversations under cache pressure, routed
 *    by kv, one request at a time) on both fleets; the exact-hit share of the router's predictions
 *    (`kvgate_router_prediction_total`, predicted vs engine-reported cached tokens) on the hybrid fleet is within
 *    one percentage point of the full-attention fleet's.
 *
 * Each fleet is one mocker process and one gateway, started once for both tests: each test has a model of its own
 * in it (the gateway's name for the engines' one model, `served_model_name`), over two engines of its own, so each
 * starts from empty caches and an empty index and reads its own model's series.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countersFrom, metric } from '../../helpers/metric-sum.js';
import { mulberry32 } from '../../helpers/rng.js';
import { startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { startServeCli } from '../../helpers/cli-process.js';
import { until } from '../../helpers/until.js';

/** The model the mocker engines serve. */
const MODEL = 'mock-model';
const BS = 16;
/** The tests, each with a model of its own in each fleet: its name there, served by two engines of its own. */
const CASES = ['window', 'predictions'] as const;
type Case = (typeof CASES)[number];

/** A test's model in a fleet: the fleet's gateway, and the model's name there. */
interface Fleet {
  readonly url: string;
  readonly model: string;
}

/**
 * Mocker engines with `groups` and a 64-block cache, two per test, behind one gateway routing by kv: the test
 * `CASES[k]`'s model is served by engines 2k and 2k + 1, as workers 2k + 1 and 2k + 2.
 */
async function startFleet(name: string, groups: readonly string[]): Promise<{ suite: MockerSuite; url: string }> {
  const suite = await startMockerSuite(
    name,
    ['--speedup', '1000', '--block-size', String(BS), '--num-gpu-blocks', '64', '--tokenizer', 'demo', ...groups],
    2 * CASES.length,
  );
  const models = CASES.flatMap((c, k) => [
    `  - name: ${c}-model`,
    `    served_model_name: ${MODEL}`,
    '    tokenizer: demo',
    `    block_size: ${BS}`,
    '    workers:',
    ...[2 * k, 2 * k + 1].map((e) => `      - ${workerEntry(e + 1, suite.engines[e]!)}`),
  ]);
  const config = ['listen: { port: 0 }', 'admin: { enabled: true }', 'preprocess: { threads: 0 }', 'models:'];
  const file = suite.write('serve.yaml', [...config, ...models, ''].join('\n'));
  const gw = await startServeCli(file);
  suite.procs.push(gw.proc);
  return { suite, url: gw.url };
}

async function postJson(
  url: string,
  path: string,
  body: unknown,
): Promise<{ json: Record<string, unknown>; worker: number }> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (res.status !== 200) throw new Error(`${path} answered ${res.status}: ${JSON.stringify(json)}`);
  return { json, worker: Number(res.headers.get('x-kvgate-worker')) };
}

/** The router's decision for `prompt` (optionally pinned to `worker`), without dispatching. */
async function route(
  f: Fleet,
  prompt: readonly number[],
  worker?: number,
): Promise<{ worker: number; overlap: number }> {
  const nvext = worker === undefined ? {} : { nvext: { backend_instance_id: worker } };
  const { json: a } = await postJson(f.url, '/v1/route', { model: f.model, prompt, max_tokens: 1, ...nvext });
  return { worker: (a.worker as { worker_id: number }).worker_id, overlap: a.overlap_blocks as number };
}

/** Serves `prompt` (pinned to `worker` when given) and waits until the router indexed what the engine cached. */
async function serve(f: Fleet, prompt: readonly number[], worker?: number): Promise<number> {
  const nvext = worker === undefined ? {} : { nvext: { backend_instance_id: worker } };
  const a = await postJson(f.url, '/v1/completions', { model: f.model, prompt, max_tokens: 1, ...nvext });
  const usage = a.json.usage as { prompt_tokens_details?: { cached_tokens?: number } };
  // The engine just computed every full block of `prompt` (its window included): once the router's index
  // shows them on the engine that served, every event of this request (stores and evictions) is applied.
  const full = Math.floor(prompt.length / BS);
  const on = a.worker;
  expect(on).toBe(worker ?? on);
  await until(async () => (await route(f, prompt, on)).overlap === full, `the served prompt indexed on worker ${on}`);
  return usage.prompt_tokens_details?.cached_tokens ?? 0;
}

function tokens(rng: () => number, n: number): number[] {
  return Array.from({ length: n }, () => 1000 + Math.floor(rng() * 30_000));
}

/** How many of the router's cached-token predictions so far were exact, of how many. */
async function predictions(f: Fleet): Promise<{ exact: number; total: number }> {
  const by = (outcome: string): Promise<number> =>
    metric(f.url, 'kvgate_router_prediction_total', { model: f.model, outcome });
  const [exact, over, under] = await Promise.all([by('exact'), by('over'), by('under')]);
  return { exact, total: exact + over + under };
}

describe('hybrid attention with mocker engines (sliding window + full)', () => {
  const suites: MockerSuite[] = [];
  let hybridUrl = '';
  let fullUrl = '';
  beforeAll(async () => {
    // Both fleets start together; each one that started is stopped after the tests, whether or not the other did.
    const started = await Promise.allSettled([
      startFleet('hybrid', ['--kv-groups', 'full,sliding:64']),
      startFleet('full', []),
    ]);
    for (const r of started) if (r.status === 'fulfilled') suites.push(r.value.suite);
    const [hybrid, full] = started.map((r) => {
      if (r.status === 'rejected') throw r.reason;
      return r.value.url;
    });
    [hybridUrl, fullUrl] = [hybrid!, full!];
  }, 60_000);
  afterAll(async () => {
    await Promise.allSettled(suites.map((s) => s.stop()));
  });
  /** The test's model on the hybrid fleet and on the full-attention one (its engines and index its own). */
  const fleetsOf = (c: Case): { hybrid: Fleet; full: Fleet } => ({
    hybrid: { url: hybridUrl, model: `${c}-model` },
    full: { url: fullUrl, model: `${c}-model` },
  });

  it('a prefix that slid out of the window on one engine goes to the engine that can reuse it', async () => {
    const rng = mulberry32(7);
    const doc = tokens(rng, 40 * BS + 3);
    const other = tokens(rng, 48 * BS + 5);
    const request = [...doc.slice(0, 16 * BS), ...tokens(rng, 4 * BS + 3)];
    const { hybrid, full } = fleetsOf('window');
    const picks: Record<string, number> = {};
    for (const [name, f] of [
      ['hybrid', hybrid],
      ['full', full],
    ] as const) {
      await serve(f, doc, 1);
      await serve(f, other, 1);
      await serve(f, doc.slice(0, 8 * BS), 2);
      // A kept the document's first 15 blocks in its pool (49 blocks of the other prompt evicted 25, tail first).
      const onA = await route(f, request, 1);
      const onB = await route(f, request, 2);
      expect(onB.overlap).toBe(8);
      // Full attention reuses A's 15 blocks; the hybrid engine lost the window before each of them.
      expect(onA.overlap).toBe(name === 'hybrid' ? 0 : 15);
      const best = await route(f, request);
      picks[name] = best.worker;
      const cached = await serve(f, request);
      expect(cached).toBe(best.overlap * BS);
    }
    expect(picks).toEqual({ hybrid: 2, full: 1 });
  }, 120_000);

  it('the router predicts hybrid engines within one point of full-attention engines', async () => {
    const { hybrid, full } = fleetsOf('predictions');
    // The removal counts have no model label: counted from here, they are this test's (the other's engines idle).
    const [hybridCounters, fullCounters] = await Promise.all([countersFrom(hybrid.url), countersFrom(full.url)]);
    const shares: Record<string, { exact: number; total: number }> = {};
    const cached: Record<string, number> = { hybrid: 0, full: 0 };
    for (const [name, f] of [
      ['hybrid', hybrid],
      ['full', full],
    ] as const) {
      // Four conversations taking turns; each turn resends its history plus about 2.5 new blocks, so the
      // fleet's 128 blocks overflow and both engines evict (pool and window group) as the turns go on.
      const rng = mulberry32(11);
      const conversations = [1, 2, 3, 4].map(() => tokens(rng, 20 * BS + 5));
      for (let turn = 0; turn < 8; turn++) {
        for (const c of conversations) {
          cached[name]! += await serve(f, c);
          c.push(...tokens(rng, 2 * BS + 9));
        }
      }
      const p = await predictions(f);
      shares[name] = { exact: p.exact / p.total, total: p.total };
    }
    // Both fleets ran out of blocks: the engines evicted (pool and window group), and the router followed.
    const removed = { event_type: 'removed' };
    expect(await hybridCounters('kvgate_kv_events_applied_total', removed)).toBeGreaterThan(0);
    expect(await fullCounters('kvgate_kv_events_applied_total', removed)).toBeGreaterThan(0);
    console.log(`cached tokens served: ${JSON.stringify(cached)}`);
    console.log(
      `exact-hit share of predictions: hybrid ${(shares.hybrid!.exact * 100).toFixed(1)} % ` +
        `(${shares.hybrid!.total} requests), full attention ${(shares.full!.exact * 100).toFixed(1)} % ` +
        `(${shares.full!.total} requests)`,
    );
    expect(shares.hybrid!.total).toBe(32);
    expect(shares.full!.total).toBe(32);
    expect(Math.abs(shares.hybrid!.exact - shares.full!.exact)).toBeLessThanOrEqual(0.01);
  }, 180_000);
});
