/**
 * A fleet of real mocker engines (HTTP + ZMQ KV events on loopback, OS-chosen
 * ports) behind a real ModelRouter with a real undici EngineClient. Tests
 * drive it through the same port the HTTP frontend uses.
 */
import { EngineClient } from '../../src/engines/index.js';
import { WorkerRegistry, type WorkerInfo } from '../../src/discovery/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { startMocker, type MockerHandle, type MockerInput } from '../../src/mocker/index.js';
import type { Clock } from '../../src/common/index.js';
import { ModelRouter, makeRouterContext, type ModelRouterOptions } from '../../src/routing/index.js';
import { seededRng } from '../../src/common/index.js';
import { promptHashes } from '../../src/wasm/index.js';
import { until as pollUntil } from './until.js';
import type { PreparedRequest, RoutedResponse } from '../../src/frontend/router-port.js';

export const MODEL = 'mock-model';
export const BLOCK = 16;

export interface Fleet {
  mockers: MockerHandle[];
  workers: WorkerInfo[];
  registry: WorkerRegistry;
  engine: EngineClient;
  metrics: KvgateMetrics;
  router: ModelRouter;
  close(): Promise<void>;
}

export async function startFleet(
  n: number,
  opts: {
    mocker?: MockerInput;
    router?: Partial<Omit<ModelRouterOptions, 'registry' | 'engine' | 'model' | 'blockSize'>> & { clock?: Clock };
    kvEvents?: boolean;
    /** Worker ids whose KV-event endpoint the router is not told about (their events never reach it). */
    withoutEvents?: readonly number[];
  } = {},
): Promise<Fleet> {
  const mockers = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      startMocker({
        model: MODEL,
        blockSize: BLOCK,
        speedup: 200,
        kvEvents: opts.kvEvents ?? true,
        kvEventsPort: 0,
        kvEventsReplayPort: 0,
        seed: 100 + i,
        engineHashSeed: BigInt(1000 + i),
        ...opts.mocker,
      }),
    ),
  );
  const workers: WorkerInfo[] = mockers.map((m, i) => ({
    id: i + 1,
    model: MODEL,
    url: m.url,
    role: 'aggregated',
    dialect: 'vllm',
    dpStart: 0,
    dpSize: 1,
    ...(m.kvEventsEndpoints.length > 0 && !(opts.withoutEvents ?? []).includes(i + 1)
      ? { kvEvents: { endpoint: m.kvEventsEndpoints[0]!, replayEndpoint: m.replayEndpoints[0] } }
      : {}),
  }));
  const registry = new WorkerRegistry();
  for (const w of workers) registry.add(w);
  const engine = new EngineClient({ connectTimeoutMs: 2000 });
  for (const w of workers) engine.addWorker(w.url);
  const metrics = new KvgateMetrics({ processMetrics: false });
  const { clock, ...routerOpts } = opts.router ?? {};
  const router = new ModelRouter(
    {
      model: MODEL,
      mode: 'kv',
      blockSize: BLOCK,
      registry,
      engine,
      tickIntervalMs: 0,
      ...routerOpts,
    },
    makeRouterContext({ metrics, rng: seededRng(7), ...(clock !== undefined ? { clock } : {}) }),
  );
  return {
    mockers,
    workers,
    registry,
    engine,
    metrics,
    router,
    async close() {
      await router.close();
      await engine.close({ force: true });
      await Promise.all(mockers.map((m) => m.close()));
    },
  };
}

let counter = 0;

/** A token-id completion request as the frontend would prepare it. */
export function prepare(
  tokens: number[],
  extra: Partial<PreparedRequest> & { maxTokens?: number } = {},
): PreparedRequest {
  const ids = Uint32Array.from(tokens);
  const hashes = promptHashes(ids, BLOCK);
  const stream = extra.stream ?? true;
  return {
    requestId: `req-${++counter}`,
    model: MODEL,
    endpoint: 'completion',
    body: {
      model: MODEL,
      prompt: tokens,
      max_tokens: extra.maxTokens ?? 4,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    },
    stream,
    tokenIds: ids,
    promptTokens: ids.length,
    hashes,
    approximate: false,
    hints: { annotations: [] },
    queryOnly: false,
    signal: new AbortController().signal,
    receivedAt: performance.now(),
    ...extra,
  };
}

/** Reads a routed response to its end; returns the SSE payloads (or the JSON body) and the usage. */
export async function drain(res: RoutedResponse): Promise<{
  payloads: string[];
  usage: { prompt_tokens?: number; prompt_tokens_details?: { cached_tokens?: number } } | undefined;
}> {
  const payloads: string[] = [];
  let usage;
  if (res.body.kind === 'json') {
    const json = JSON.parse(Buffer.from(res.body.bytes).toString('utf8'));
    return { payloads: [JSON.stringify(json)], usage: json.usage };
  }
  for await (const ev of res.body.events) {
    const data = typeof ev.data === 'string' ? ev.data : Buffer.from(ev.data).toString('utf8');
    payloads.push(data);
    if (data !== '[DONE]') {
      const j = JSON.parse(data);
      if (j.usage) usage = j.usage;
    }
  }
  return { payloads, usage };
}

/** `until` with the fleet tests' deadline (events cross real sockets): 10 s unless given. */
export function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  return pollUntil(cond, what, timeoutMs);
}

export function randomTokens(rng: () => number, n: number): number[] {
  return Array.from({ length: n }, () => 1 + Math.floor(rng() * 30_000));
}
