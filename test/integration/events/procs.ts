/** Real `kvgate` processes for the events integration tests: spawn, collect stdout lines, find JSON lines, stop. */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { answerEngineProbe, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { ROOT, lineOf, MOCKER_OS_PORTS, start, stop, type Proc } from '../../helpers/process.js';
import { TestKvPublisher } from '../../helpers/zmq-publisher.js';

export { json, type Proc } from '../../helpers/process.js';

/** A suite's scratch folder and its mocker and gateway processes, stopped and removed after the suite. */
export interface SuiteProcesses {
  dir: string;
  /** The first mocker engine started. */
  mocker: Proc | undefined;
  /** Every mocker engine started after the first. */
  moreMockers: Proc[];
  gateway: Proc | undefined;
}

/** Registers the suite's setup (compiled CLI present, scratch folder) and teardown. */
export function suiteProcesses(prefix: string): SuiteProcesses {
  const s: SuiteProcesses = { dir: '', mocker: undefined, moreMockers: [], gateway: undefined };
  beforeAll(() => {
    if (!existsSync(join(ROOT, 'dist/src/cli/index.js')))
      throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
    s.dir = mkdtempSync(join(tmpdir(), prefix));
  });
  afterAll(async () => {
    await Promise.all([stop(s.gateway), stop(s.mocker), ...s.moreMockers.map(stop)]);
    rmSync(s.dir, { recursive: true, force: true });
  });
  return s;
}

/**
 * Starts a mocker engine (OS-chosen ports, speedup 100) with `args` added; resolves to its printed ports line.
 * The suite's first engine is `s.mocker`, later ones go to `s.moreMockers`.
 */
export async function startEngine(s: SuiteProcesses, args: readonly string[]): Promise<Record<string, unknown>> {
  const mocker = start(['mocker', ...MOCKER_OS_PORTS, '--speedup', '100', ...args]);
  if (s.mocker === undefined) s.mocker = mocker;
  else s.moreMockers.push(mocker);
  return lineOf(mocker, "the mocker's ports", (o) => typeof o.url === 'string');
}

/** The config entry of worker `id` served by the mocker `engine` (its startup line): its URL, KV events and replay. */
export function workerOf(id: number, engine: Record<string, unknown>): Record<string, unknown> {
  return {
    id,
    url: engine.url,
    kv_events: { endpoint: (engine.kv_events as string[])[0], replay: (engine.kv_events_replay as string[])[0] },
  };
}

/** POSTs a JSON body, expects a 200 and resolves to the JSON answer. */
export async function postOk(url: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

/**
 * Starts `kvgate serve` on an OS-chosen port with one model (`model`, the model's config section; `more` models
 * after it) and `extra` top-level sections, written to the suite's folder; resolves to its URL once it logged its
 * start.
 */
export async function startGateway(
  s: SuiteProcesses,
  model: Record<string, unknown>,
  extra: Record<string, unknown> = {},
  more: readonly Record<string, unknown>[] = [],
): Promise<string> {
  // One gateway per suite at a time: a test that starts another stops the one before (it was left running).
  if (s.gateway !== undefined) await stop(s.gateway);
  const config = join(s.dir, 'kvgate.json');
  writeFileSync(
    config,
    JSON.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      ...extra,
      models: [model, ...more],
    }),
  );
  s.gateway = start(['serve', '--config', config]);
  const started = await lineOf(s.gateway, "the gateway's startup line", (o) => o.msg === 'kvgate gateway started');
  return String(started.listen);
}

/**
 * Completions of fresh random prompts of `blocks` full blocks (and one token more) on a gateway, remembered
 * in `prompts`, and the overlap `/v1/route` predicts for a prompt.
 */
export function promptTraffic(
  url: string,
  model: string,
  opts: { blocks: number; blockSize: number; rng: () => number },
): { prompts: number[][]; complete(): Promise<void>; overlap(prompt: number[]): Promise<number> } {
  const prompts: number[][] = [];
  return {
    prompts,
    async complete() {
      const prompt = Array.from(
        { length: opts.blocks * opts.blockSize + 1 },
        () => 1000 + Math.floor(opts.rng() * 50_000),
      );
      await postOk(`${url}/v1/completions`, { model, prompt, max_tokens: 1 });
      prompts.push(prompt);
    },
    async overlap(prompt) {
      return (await postOk(`${url}/v1/route`, { model, prompt })).overlap_blocks as number;
    },
  };
}

/** A gateway whose one worker's KV events the test publishes by hand (`pub`), and the overlap it predicts. */
export interface PublishedGateway {
  readonly url: string;
  readonly pub: TestKvPublisher;
  overlap(prompt: number[]): Promise<number>;
}

/**
 * Starts `kvgate serve` (the suite's gateway) for `model` (demo tokenizer, `blockSize`) over one scripted engine
 * (HTTP probes answered, nothing served) whose KV events come from a `TestKvPublisher` of the test's, with the
 * `kv_events` section given; resolves once the gateway's subscription reached the publisher. The engine and the
 * publisher are closed after the suite.
 */
export function publishedGateways(
  s: SuiteProcesses,
  model: string,
  blockSize: number,
): (kvEvents: Record<string, unknown>) => Promise<PublishedGateway> {
  const gateway = publishedModels(s, [model], blockSize);
  return async (kvEvents) => (await gateway(kvEvents))[0]!;
}

/**
 * As `publishedGateways`, for several models in one gateway: `models[i]` is served by worker i + 1, over a scripted
 * engine and a publisher of its own, so each has its own prefix index and its own worker's series. Resolves to one
 * `PublishedGateway` per model, in order, once every subscription reached its publisher.
 */
export function publishedModels(
  s: SuiteProcesses,
  models: readonly string[],
  blockSize: number,
): (kvEvents: Record<string, unknown>) => Promise<PublishedGateway[]> {
  const held: { engine: HttpEngine; pub: TestKvPublisher }[] = [];
  afterAll(async () => {
    await stop(s.gateway);
    await Promise.allSettled(held.flatMap(({ engine, pub }) => [engine.close(), pub.close()]));
  });
  return async (kvEvents) => {
    const mine = await Promise.all(
      models.map(async (model) => {
        const engine = await startHttpEngine((req, res) => {
          if (!answerEngineProbe(req, res, model)) res.writeHead(200).end();
        });
        const pub = await TestKvPublisher.start();
        held.push({ engine, pub });
        return { engine, pub };
      }),
    );
    const [first, ...more] = models.map((name, i) => ({
      name,
      tokenizer: 'demo',
      block_size: blockSize,
      workers: [{ id: i + 1, url: mine[i]!.engine.url, kv_events: mine[i]!.pub.endpoint }],
    }));
    const url = await startGateway(s, first!, { kv_events: kvEvents }, more);
    await Promise.all(mine.map(({ pub }) => pub.waitForSubscribers(1)));
    return models.map((model, i) => ({
      url,
      pub: mine[i]!.pub,
      overlap: async (prompt: number[]): Promise<number> =>
        (await postOk(`${url}/v1/route`, { model, prompt, max_tokens: 1 })).overlap_blocks as number,
    }));
  };
}
