/**
 * A GatewayServer on an OS-chosen port in front of FakeRouters (three models:
 * kv-style, direct, and one without tokenizer), with one main-thread
 * preprocessor per test file; servers started by a test are closed after it.
 */
import { pino, type Logger } from 'pino';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { loadGatewayConfig, type GatewayConfig } from '../../src/config/index.js';
import {
  GatewayServer,
  createPreprocessor,
  preprocessModelSpecs,
  type Preprocessor,
} from '../../src/frontend/index.js';
import type { PreprocessModelSpec } from '../../src/frontend/preprocess/protocol.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { FakeRouter } from './fake-router.js';

export const KEY = 'test-key-0123456789';

/** The harness's three models: `demo` (workers 1-3, `demo` fields merged over it), `direct` and `approx`. */
export function harnessModels(demo: Record<string, unknown> = {}): Record<string, unknown>[] {
  return [
    {
      name: 'demo',
      tokenizer: 'demo',
      workers: [
        { id: 1, url: 'http://127.0.0.1:1' },
        { id: 2, url: 'http://127.0.0.1:2' },
        { id: 3, url: 'http://127.0.0.1:3' },
      ],
      ...demo,
    },
    {
      name: 'direct',
      router_mode: 'direct',
      tokenizer: 'demo',
      max_prompt_tokens: 50,
      workers: [{ id: 11, url: 'http://127.0.0.1:11' }],
    },
    { name: 'approx', tokenizer: 'none', workers: [{ id: 21, url: 'http://127.0.0.1:21' }] },
  ];
}

function configDoc(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    listen: { port: 0 },
    router: { use_kv_events: false },
    limits: {
      max_body_bytes: 64 * 1024,
      max_prompt_tokens: 2000,
      max_concurrent_requests: 4,
      request_timeout_ms: 10_000,
    },
    shutdown: { drain_timeout_ms: 5000 },
    preprocess: { threads: 0 },
    log: { level: 'silent' },
    models: harnessModels(),
    ...extra,
  };
}

let preprocessor: Preprocessor;
beforeAll(async () => {
  preprocessor = await createPreprocessor(preprocessModelSpecs(loadGatewayConfig({ base: configDoc(), env: {} })), {
    threads: 0,
  });
});
afterAll(async () => {
  await preprocessor.close();
});

interface Running {
  server: GatewayServer;
  url: string;
  adminUrl: string | undefined;
  routers: { demo: FakeRouter; direct: FakeRouter; approx: FakeRouter };
}

const running: GatewayServer[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.close({ drainTimeoutMs: 100 })));
});

export async function start(extra: Record<string, unknown> = {}): Promise<Running> {
  const config = loadGatewayConfig({ base: configDoc(extra), env: {} });
  const routers = {
    demo: new FakeRouter({ model: 'demo' }),
    direct: new FakeRouter({ model: 'direct', workerIds: [11], direct: true }),
    approx: new FakeRouter({ model: 'approx', workerIds: [21] }),
  };
  const server = new GatewayServer({
    config,
    routers: Object.values(routers),
    preprocessor,
    logger: pino({ level: 'silent' }),
    metrics: new KvgateMetrics({ processMetrics: false }),
  });
  running.push(server);
  const addr = await server.listen();
  return {
    server,
    url: `http://127.0.0.1:${addr.public.port}`,
    adminUrl: addr.admin !== undefined ? `http://127.0.0.1:${addr.admin.port}` : undefined,
    routers,
  };
}

/**
 * One demo model (worker 1, never dialled), bodies up to 4 MiB and prompts up to 120k tokens: agent-sized turns;
 * `extra` adds top-level sections (tenants, ...).
 */
export function largeBodyConfig(extra: Record<string, unknown> = {}): GatewayConfig {
  return loadGatewayConfig({
    base: {
      listen: { port: 0 },
      router: { use_kv_events: false },
      limits: { max_body_bytes: 4 * 1024 * 1024, max_prompt_tokens: 120_000 },
      log: { level: 'silent' },
      models: [{ name: 'demo', tokenizer: 'demo', workers: [{ id: 1, url: 'http://127.0.0.1:1' }] }],
      ...extra,
    },
    env: {},
  });
}

/**
 * A gateway in front of one FakeRouter with a preprocessor of its own (`pre`: its pool options), writing to `logger`
 * (default: silent); closed by `close`.
 */
export interface PoolGateway {
  url: string;
  server: GatewayServer;
  router: FakeRouter;
  pre: Preprocessor;
  close(): Promise<void>;
}

export async function startPoolGateway(
  config: GatewayConfig,
  router: FakeRouter,
  pre: Parameters<typeof createPreprocessor>[1],
  specs: readonly PreprocessModelSpec[] = preprocessModelSpecs(config),
  logger: Logger = pino({ level: 'silent' }),
): Promise<PoolGateway> {
  const preprocessor = await createPreprocessor(specs, pre);
  const server = new GatewayServer({
    config,
    routers: [router],
    preprocessor,
    logger,
    metrics: new KvgateMetrics({ processMetrics: false }),
  });
  const addr = await server.listen();
  return {
    url: `http://127.0.0.1:${addr.public.port}`,
    server,
    router,
    pre: preprocessor,
    close: async () => {
      await server.close({ drainTimeoutMs: 100 });
      await preprocessor.close();
    },
  };
}

export async function post(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; json: any; headers: Headers }> {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: r.status, json, headers: r.headers };
}

export const chat = (content: string, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model: 'demo',
  messages: [{ role: 'user', content }],
  ...extra,
});
