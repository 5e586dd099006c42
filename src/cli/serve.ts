/**
 * `kvgate serve`: the gateway. Reads the config file and flags (src/config),
 * starts the preprocessing pool, one router per model and the HTTP server
 * (src/frontend), and runs until SIGTERM or SIGINT, then drains.
 *
 * The embedded demo: with no model configured, it first starts four
 * in-process simulated engines (src/mocker) on loopback, publishing KV events,
 * serving the demo model with the bundled Qwen3 tokenizer, and routes to them
 * with KV-aware routing; it prints a curl command to try.
 */
import { pino, type Logger } from 'pino';
import { loadGatewayConfig, parseServeFlags, serveUsage, type GatewayConfig } from '../config/index.js';
import { HealthProber, WorkerRegistry } from '../discovery/index.js';
import { EngineClient } from '../engines/index.js';
import { isKvgateError } from '../errors/index.js';
import { startGateway, type Gateway, type RouterPortFactory } from '../frontend/index.js';
import { startMocker, type MockerHandle } from '../mocker/index.js';
import { seededRng } from '../common/index.js';
import { ModelRouter, makeRouterContext } from '../routing/index.js';

/** The demo model's name (served by the embedded simulated engines). */
export const DEMO_MODEL = 'qwen3-demo';
export const DEMO_ENGINES = 4;

/** What builds the routers of a config, and what it must release at shutdown. */
export interface RouterFleet {
  createRouter: RouterPortFactory;
  close(): Promise<void>;
}

/**
 * The routers of a config: one worker registry (fed from the config, with active
 * health probing) and one engine client shared by every model; a ModelRouter per model.
 */
function fleetRouters(config: GatewayConfig): RouterFleet {
  const registry = new WorkerRegistry();
  const engine = new EngineClient({ headersTimeoutMs: config.limits.requestTimeoutMs, bodyTimeoutMs: config.limits.requestTimeoutMs });
  for (const m of config.models) {
    for (const w of m.workers) {
      registry.add(w);
      engine.addWorker(w.url);
    }
  }
  const prober = new HealthProber(registry);
  prober.start();
  return {
    // One context per model, handed down to every router and KV-event manager: their warnings go
    // to the gateway's pino logger, each line carrying the model.
    createRouter: (model, deps) => new ModelRouter({
      model: model.name, mode: model.routerMode, blockSize: model.blockSize, routerConfig: model.router, registry, engine,
      onWorkerUnreachable: (id) => prober.reportFailure(id), enforceDisagg: model.enforceDisagg, kvEvents: config.kvEvents,
    }, makeRouterContext({ metrics: deps.metrics, log: deps.logger, rng: seededRng(Date.now() >>> 0) })),
    async close(): Promise<void> {
      prober.close();
      await engine.close();
    },
  };
}

export interface ServeOptions {
  /** Builds the routers of the resolved config (default: `fleetRouters`). */
  routers?: (config: GatewayConfig) => RouterFleet;
  env?: Readonly<Record<string, string | undefined>>;
  logger?: Logger;
  /** Where the human-readable banner goes (default: process.stdout). */
  out?: { write(text: string): unknown };
}

export interface ServeHandle {
  readonly gateway: Gateway;
  /** The embedded demo's engines (empty when models are configured). */
  readonly mockers: readonly MockerHandle[];
  /** Drains the gateway, then stops the demo engines. Idempotent. */
  stop(): Promise<void>;
}

/** The demo model's config entry, pointing at the given engines. */
function demoModels(engines: readonly { url: string; kvEvents: string }[]): Record<string, unknown> {
  return {
    models: [{
      name: DEMO_MODEL,
      tokenizer: 'demo',
      block_size: 16,
      workers: engines.map((e, i) => ({ id: i + 1, url: e.url, kv_events: e.kvEvents })),
    }],
  };
}

async function startDemoEngines(blockSize: number): Promise<MockerHandle[]> {
  const started: MockerHandle[] = [];
  try {
    for (let i = 0; i < DEMO_ENGINES; i++) {
      started.push(await startMocker({ model: DEMO_MODEL, tokenizer: 'demo', blockSize, kvEvents: true, seed: i + 1, host: '127.0.0.1' }));
    }
  } catch (err) {
    await Promise.allSettled(started.map((m) => m.close()));
    throw err;
  }
  return started;
}

function banner(config: GatewayConfig, gateway: Gateway, demo: boolean): string {
  const url = `http://${gateway.addresses.public.host}:${gateway.addresses.public.port}`;
  const model = config.models[0]!;
  const lines = [
    '',
    demo
      ? `kvgate: serving the embedded demo at ${url}: model ${model.name} on ${model.workers.length} simulated engines (in-process, KV events on), ${model.routerMode} routing.`
      : `kvgate: serving ${config.models.map((m) => `${m.name} (${m.workers.length} workers, ${m.routerMode})`).join(', ')} at ${url}.`,
    'Try it (the x-kvgate-worker response header names the engine that served it; send the same conversation twice and it sticks):',
    `  curl -si ${url}/v1/chat/completions -H 'content-type: application/json'${config.apiKeys.length > 0 ? " -H 'authorization: Bearer <key>'" : ''} \\`,
    `    -d '{"model": "${model.name}", "messages": [{"role": "user", "content": "Tell me about KV caches."}], "max_tokens": 32}'`,
    '',
  ];
  return lines.join('\n');
}

/**
 * Starts `kvgate serve` with `argv`; resolves once it serves. Undefined for `--help`.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG (every problem listed) and whatever startup fails on.
 */
export async function serve(argv: readonly string[], opts: ServeOptions = {}): Promise<ServeHandle | undefined> {
  const out = opts.out ?? process.stdout;
  const env = opts.env ?? process.env;
  const flags = parseServeFlags(argv);
  if (flags.help) {
    out.write(serveUsage());
    return undefined;
  }
  const load = (base?: Record<string, unknown>): GatewayConfig =>
    loadGatewayConfig({ file: flags.configFile, overrides: flags.overrides, env, base });
  let config = load();
  let mockers: MockerHandle[] = [];
  const demo = config.models.length === 0;
  if (demo) {
    // Resolve the demo entry once with placeholder engines, so flags (--block-size, router knobs) are
    // validated and known before the engines start with the same block size.
    const planned = load(demoModels(Array.from({ length: DEMO_ENGINES }, (_, i) => ({ url: `http://127.0.0.1:${i + 1}`, kvEvents: `tcp://127.0.0.1:${i + 1}` }))));
    mockers = await startDemoEngines(planned.models[0]!.blockSize);
    try {
      config = load(demoModels(mockers.map((m) => ({ url: m.url, kvEvents: m.kvEventsEndpoints[0]! }))));
    } catch (err) {
      await Promise.allSettled(mockers.map((m) => m.close()));
      throw err;
    }
  }
  // The one place a logger is created (unless the caller brings its own): the gateway, every
  // router and every KV-event stream below write to it.
  const logger = opts.logger ?? pino({ level: config.logLevel, base: { svc: 'kvgate' } });
  let gateway: Gateway;
  const fleet = (opts.routers ?? fleetRouters)(config);
  try {
    gateway = await startGateway({ config, createRouter: fleet.createRouter, logger });
  } catch (err) {
    await fleet.close().catch(() => undefined);
    await Promise.allSettled(mockers.map((m) => m.close()));
    throw err;
  }
  out.write(banner(config, gateway, demo));
  let stopping: Promise<void> | undefined;
  return {
    gateway,
    mockers,
    stop(): Promise<void> {
      stopping ??= (async () => {
        await gateway.close();
        await fleet.close();
        await Promise.allSettled(mockers.map((m) => m.close()));
      })();
      return stopping;
    },
  };
}

/** Runs until SIGTERM/SIGINT (a second signal exits at once). Resolves to the exit code. */
export async function serveCommand(argv: string[], opts: ServeOptions = {}): Promise<number> {
  let handle: ServeHandle | undefined;
  try {
    handle = await serve(argv, opts);
  } catch (err) {
    process.stderr.write(`kvgate serve: ${isKvgateError(err) ? err.message : (err as Error).stack ?? String(err)}\n`);
    return isKvgateError(err, 'KVG_ERR_INVALID_CONFIG') ? 2 : 1;
  }
  if (handle === undefined) return 0;
  const h = handle;
  await new Promise<void>((resolve) => {
    const onSignal = (signal: NodeJS.Signals): void => {
      h.gateway.logger.info({ signal, inflight: h.gateway.server.inflight }, 'shutting down: draining in-flight requests');
      process.once(signal, () => process.exit(130));
      void h.stop().then(resolve, (err: unknown) => {
        h.gateway.logger.error({ err }, 'shutdown failed');
        resolve();
      });
    };
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
  });
  return 0;
}
