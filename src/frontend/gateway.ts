/**
 * Assembling a running gateway from a resolved config: the preprocessing
 * pool, one router port per model (from the injected factory), the HTTP
 * server, and a startup summary in the log. `close()` takes it down in the
 * reverse order: drain the server, then close the routers, then the pool.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { GatewayConfig } from '../config/index.js';
import { KvgateMetrics } from '../metrics/index.js';
import { settleInlineSystem } from './inline-system-modes.js';
import { createPreprocessor, preprocessModelSpecs, type Preprocessor } from './preprocess/preprocessor.js';
import type { ModelServices } from '../fleet/index.js';
import type { ModelRouterPort, RouterPortFactory } from './router-port.js';
import { GatewayServer, type GatewayAddresses, type GatewayServerOptions } from './server.js';

export interface GatewayOptions {
  config: GatewayConfig;
  createRouter: RouterPortFactory;
  /** The process's logger: the caller (the CLI) creates it; the gateway and every router write to it. */
  logger: Logger;
  metrics?: KvgateMetrics;
  /** Serves `POST /admin/reload` with this (hot reconfiguration; see GatewayServerOptions.reload). */
  reload?: GatewayServerOptions['reload'];
  /** Each worker's live status for `GET /admin/models` (see GatewayServerOptions.fleet). */
  fleet?: GatewayServerOptions['fleet'];
  /** This process's index in a `--processes N` cluster: the `x-kvgate-process` header and the `process` label of every series. */
  process?: number | undefined;
  /** In a cluster: given this process's registry, what `/metrics` serves instead of it alone (every process's series). */
  clusterMetrics?: ((registry: Registry) => () => Promise<string>) | undefined;
}

export interface Gateway {
  readonly config: GatewayConfig;
  readonly server: GatewayServer;
  readonly addresses: GatewayAddresses;
  readonly preprocessor: Preprocessor;
  readonly routers: readonly ModelRouterPort[];
  readonly logger: Logger;
  /** Drains (up to `drainTimeoutMs`, default the config's), then closes routers and the pool. Idempotent. */
  close(opts?: { drainTimeoutMs?: number }): Promise<void>;
}

/** The startup summary: listeners, preprocessing, and per model its mode, tokenizer and workers. */
function startupSummary(
  config: GatewayConfig,
  addresses: GatewayAddresses,
  preprocessor: Preprocessor,
): Record<string, unknown> {
  return {
    listen: `http://${addresses.public.host}:${addresses.public.port}`,
    backlog: config.listenBacklog,
    admin: !config.admin.enabled
      ? 'off'
      : addresses.admin !== undefined
        ? `http://${addresses.admin.host}:${addresses.admin.port}`
        : 'on the public listener',
    auth: config.apiKeys.length > 0 ? `${config.apiKeys.length} API key(s)` : 'none',
    preprocess: preprocessor.mode === 'pool' ? `${preprocessor.threads} thread(s)` : 'main thread',
    limits: config.limits,
    models: config.models.map((m) => ({
      name: m.name,
      mode: m.routerMode,
      blockSize: m.blockSize,
      tokenizer:
        m.tokenizer.kind === 'files'
          ? m.tokenizer.files.tokenizerJson
          : m.tokenizer.kind === 'none'
            ? `none (${m.tokenizer.onMissing})`
            : 'demo (bundled Qwen3)',
      kvEvents: m.routerMode === 'kv' ? m.router.useKvEvents : undefined,
      enforceDisagg: m.enforceDisagg || undefined,
      sessionPriority: m.sessionPriority,
      sessionAffinity: m.sessionAffinity,
      workers: m.workers.map(
        (w) =>
          `${w.id} ${w.role} ${w.dialect} ${w.url}` +
          (w.dpSize > 1 ? ` dp=${w.dpSize}` : '') +
          (w.kvEvents !== undefined ? ` events=${w.kvEvents.endpoint}` : ''),
      ),
    })),
  };
}

/**
 * Starts the gateway: preprocessing threads, routers, HTTP listeners.
 * @throws whatever the router factory or the preprocessor throws (tokenizer files, worker build); anything
 *   already started is closed first.
 */
/** Counts the conversation caches' tokens as results come, and writes their sizes at each scrape; returns the unhook. */
function scrapeConversations(metrics: KvgateMetrics, preprocessor: Preprocessor): () => void {
  preprocessor.conversations.onTokens = (model, reused, fresh) => {
    metrics.conversationTokens.inc({ model, source: 'reused' }, reused);
    metrics.conversationTokens.inc({ model, source: 'new' }, fresh);
  };
  return metrics.onScrape(() => {
    for (const [model, t] of preprocessor.conversations.totals()) {
      metrics.conversationCacheBytes.set({ model }, t.bytes);
      metrics.conversationCacheEntries.set({ model }, t.entries);
    }
  });
}

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const { config, logger } = opts;
  const metrics = opts.metrics ?? new KvgateMetrics();
  // In a cluster every series carries the process's index, and a scrape of any process shows every process's series.
  if (opts.process !== undefined) metrics.registry.setDefaultLabels({ process: String(opts.process) });
  if (opts.clusterMetrics !== undefined) metrics.textFrom(opts.clusterMetrics(metrics.registry));
  for (const w of config.warnings) logger.warn(w);
  // A KV-routed model without a tokenizer hashes prompts no engine's blocks match: flagged for as long as it runs.
  for (const m of config.models) {
    const missing = m.routerMode === 'kv' && m.tokenizer.kind === 'none';
    metrics.modelTokenizerMissing.labels({ model: m.name }).set(missing ? 1 : 0);
    if (missing)
      logger.warn(
        { model: m.name, tokenizer: 'none' },
        `model ${m.name} is KV-routed without a tokenizer: its cache-hit predictions are guesses (kvgate_model_tokenizer_missing)`,
      );
  }
  const preprocessor = await createPreprocessor(preprocessModelSpecs(config), {
    threads: config.preprocess.threads,
    taskTimeoutMs: config.preprocess.taskTimeoutMs,
  });
  const unscrape = scrapeConversations(metrics, preprocessor);
  const routers: ModelRouterPort[] = [];
  let server: GatewayServer | undefined;
  try {
    for (const model of config.models) {
      const tokenizeChat: ModelServices['tokenizeChat'] = async (messages) =>
        (
          await preprocessor.run({
            kind: 'chat',
            model: model.name,
            messages: [...messages],
            maxPromptTokens: model.maxPromptTokens,
          })
        ).tokenIds;
      routers.push(
        await opts.createRouter(model, { metrics, logger: logger.child({ model: model.name }), tokenizeChat }),
      );
    }
    server = new GatewayServer({
      config,
      routers,
      preprocessor,
      logger,
      metrics,
      reload: opts.reload,
      fleet: opts.fleet,
      process: opts.process,
      inlineSystem: await settleInlineSystem(config.models, preprocessor, logger),
    });
    const addresses = await server.listen();
    logger.info(startupSummary(config, addresses, preprocessor), 'kvgate gateway started');
    let closing: Promise<void> | undefined;
    const s = server;
    return {
      config,
      server: s,
      addresses,
      preprocessor,
      routers,
      logger,
      close(closeOpts = {}): Promise<void> {
        closing ??= (async () => {
          await s.close(closeOpts);
          await Promise.allSettled(routers.map((r) => r.close()));
          await preprocessor.close();
          unscrape();
          logger.info('kvgate gateway stopped');
        })();
        return closing;
      },
    };
  } catch (err) {
    await server?.close({ drainTimeoutMs: 0 }).catch(() => undefined);
    await Promise.allSettled(routers.map((r) => r.close()));
    await preprocessor.close();
    unscrape();
    throw err;
  }
}
