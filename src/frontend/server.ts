/**
 * The gateway's HTTP server (node:http, no framework): the OpenAI-compatible
 * API, query-only routing, health, readiness, metrics and admin endpoints.
 *
 * A completion request goes: request id -> per-client bound -> edge headers ->
 * auth -> body (size-limited, with a bound on the pause between chunks and on
 * the whole body; see body.ts) -> concurrency slot -> the completion pipeline
 * (completion.ts). The slot is taken only once the body has arrived, so slow
 * clients cannot hold the slots; they are bounded by the header and body
 * deadlines and per client (connections.ts). The pipeline parses the body on a
 * pool thread when it is large (prepare.ts). Every failure before the response
 * starts is an OpenAI-style error object with a stable kvgate code; a failure
 * mid-stream ends the stream with an error event. Each request has an
 * AbortSignal that fires on client disconnect, on the request timeout and on
 * forced shutdown; its slot is held until its handler has returned too (a
 * preprocessing task that has started runs to its end, and counts until then).
 *
 * Shutdown (`close`): answer every new request with 503 + `Connection: close`,
 * then drain (shutdown.ts): the listeners close once no connection is queued,
 * in-flight requests finish until the drain deadline.
 *
 * Listeners: the public one always; admin endpoints (`/admin/config`,
 * `/admin/models`) only when `admin.enabled`, on a separate listener when
 * `admin.listen` is set, else on the public one. `/health`, `/ready` and
 * `/metrics` need no API key (probes and scrapers); `/v1/*` and `/admin/*` do
 * when keys are configured. The route tables and the answers of the routes that
 * are not completions are routes.ts's; a failed request's answer is
 * error-answer.ts's.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { Cancellation, traceLogFields, type InlineSystemMode } from '../common/index.js';
import type { GatewayConfig, ModelConfig } from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import { KvgateMetrics } from '../metrics/index.js';
import type { FleetStatus } from '../fleet/index.js';
import { discardBody, DISCARD_MS, readBodyBytes } from './body.js';
import { clientAddressesOf, type FallbackReason } from './client-address.js';
import { credentialOf } from './anthropic-error.js';
import type { CompletionOptions } from './completion.js';
import { ClientConnections } from './connections.js';
import { ConnectionCap } from './connection-cap.js';
import { checkEdgeHeaders, refuseFaultyFraming } from './edge.js';
import { answerError } from './error-answer.js';
import type { ModelTarget } from './model-lookup.js';
import { ApiKeys, pickRequestId } from './http-io.js';
import { servedModelConfig } from './inline-system-modes.js';
import { createListener, notFound, pathOf } from './listener.js';
import { PublicErrors } from './public-error.js';
import { ConcurrencySlots } from './concurrency.js';
import { RequestMetrics } from './request-metrics.js';
import type { Preprocessor } from './preprocess/preprocessor.js';
import { watchPreprocessor } from './preprocess-watch.js';
import type { Listener, RouteSpec } from './route-spec.js';
import type { RelayOptions, RequestContext } from './respond.js';
import type { ModelRouterPort } from './router-port.js';
import { matchRoute, routeTable, type ReloadOutcomeView, type RouteTableOptions } from './routes.js';
import { drain } from './shutdown.js';
import { TenantDirectory } from './tenants.js';

export interface GatewayServerOptions {
  config: GatewayConfig;
  /** One port per configured model (matched by `model`). */
  routers: Iterable<ModelRouterPort>;
  preprocessor: Preprocessor;
  /** The process's logger, owned by the caller (the CLI creates it); access and error lines go here. */
  logger: Logger;
  /** Serves /metrics from its registry and counts HTTP outcomes. Default: a fresh KvgateMetrics. */
  metrics?: KvgateMetrics;
  /** `POST /admin/reload` (admin enabled): re-reads the config; what changed and the workers that could not join. */
  reload?: (() => Promise<ReloadOutcomeView>) | undefined;
  /** Each worker's live status for `GET /admin/models` (source, state, capacity, last KV event). */
  fleet?: FleetStatus | undefined;
  /** This process's index in a `--processes N` cluster: every response carries it as `x-kvgate-process`. */
  process?: number | undefined;
  /** Each model's settled `anthropic_inline_system` (inline-system-modes.ts); a model missing here keeps `preserve`. */
  inlineSystem?: ReadonlyMap<string, InlineSystemMode> | undefined;
}

/** The body of a route that reads none. */
const NO_BODY = new Uint8Array(0);

export interface GatewayAddresses {
  public: { host: string; port: number };
  admin: { host: string; port: number } | undefined;
}

export class GatewayServer {
  /** The configuration in force (replaced whole by `reconfigure`). */
  config: GatewayConfig;
  readonly logger: Logger;
  readonly metrics: KvgateMetrics;
  readonly #ports = new Map<string, ModelRouterPort>();
  readonly #models = new Map<string, ModelConfig>();
  /** Each model's port and config, by model name (the model lookup's view). */
  readonly #served = new Map<string, Omit<ModelTarget, 'loraName'>>();
  readonly #preprocessor: Preprocessor;
  #keys = new ApiKeys([]);
  readonly #tenants: TenantDirectory;
  readonly #public: Server;
  readonly #admin: Server | undefined;
  readonly #conns: ClientConnections;
  /** `limits.max_connections`, on the public listener. */
  readonly #cap: ConnectionCap;
  #relay!: RelayOptions; // set by reconfigure
  readonly #createdSec = Math.floor(Date.now() / 1000);
  readonly #completionEnv: CompletionOptions;
  /** Who a client is for the per-client bound, by the config (its fallbacks logged once per reason across reloads). */
  readonly #clientAddresses = clientAddressesOf(new Set<FallbackReason>(), this);
  readonly #unscrape: () => void;
  readonly #slots: ConcurrencySlots;
  readonly #requestMetrics: RequestMetrics;
  /** The optional hooks: reload, the fleet's status, the process index. */
  readonly #opts: Pick<GatewayServerOptions, 'reload' | 'fleet' | 'process' | 'inlineSystem'>;
  #draining = false;
  #closing: Promise<void> | undefined;

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG when a port's model or block size disagrees with the config. */
  constructor(opts: GatewayServerOptions) {
    this.config = opts.config;
    this.logger = opts.logger;
    this.metrics = opts.metrics ?? new KvgateMetrics();
    this.#requestMetrics = new RequestMetrics(this.metrics, this.#models);
    this.#preprocessor = opts.preprocessor;
    this.#opts = opts;
    this.#tenants = new TenantDirectory(opts.config.tenants, this.metrics);
    this.#slots = new ConcurrencySlots(
      opts.config.limits.maxConcurrentRequests,
      opts.config.limits.requestTimeoutMs,
      (n) => this.metrics.inflight.set(n),
      { logger: this.logger, atBound: (n) => this.metrics.httpClientsAtRequestBound.set(n) },
    );
    this.#conns = new ClientConnections(
      opts.config.limits.maxPendingConnectionsPerClient,
      this.#clientAddresses(opts.config),
    );
    this.#cap = new ConnectionCap(opts.config.limits.maxConnections, this.logger, this.metrics);
    this.#unscrape = this.metrics.onScrape(() => this.metrics.httpPendingConnections.set(this.#conns.pending));
    watchPreprocessor(opts.preprocessor, this.metrics, this.logger);
    const limits = (): GatewayConfig['limits'] => this.config.limits;
    this.#completionEnv = {
      served: this.#served,
      preprocessor: this.#preprocessor,
      createdSec: this.#createdSec,
      relay: () => this.#relay,
      draining: () => this.#draining,
      tenants: this.#tenants,
      get maxMessages() {
        return limits().maxMessages;
      },
    };
    for (const port of opts.routers) {
      const model = opts.config.models.find((m) => m.name === port.model);
      if (model === undefined)
        throw new KvgateError(
          'KVG_ERR_INVALID_CONFIG',
          `a router was given for model ${port.model}, which is not configured`,
        );
      if (port.blockSize !== model.blockSize) {
        throw new KvgateError(
          'KVG_ERR_INVALID_CONFIG',
          `the router of model ${port.model} uses block size ${port.blockSize}, the config says ${model.blockSize}`,
        );
      }
      this.#ports.set(port.model, port);
    }
    this.reconfigure(opts.config);
    const routes: RouteTableOptions = {
      config: () => this.config,
      ports: this.#ports,
      metrics: this.metrics,
      completion: this.#completionEnv,
      inflight: () => this.#slots.size,
      reload: opts.reload,
      fleet: opts.fleet,
    };
    const adminSeparate = opts.config.admin.enabled && opts.config.admin.listen !== undefined;
    this.#public = this.#createServer('public', routeTable(routes, !adminSeparate && opts.config.admin.enabled, true));
    this.#admin = adminSeparate ? this.#createServer('admin', routeTable(routes, true, false)) : undefined;
  }

  #createServer(listener: Listener, routes: Map<string, RouteSpec>): Server {
    return createListener(listener, {
      limits: () => this.config.limits,
      logger: this.logger,
      metrics: this.metrics,
      cap: this.#cap,
      conns: this.#conns,
      dispatch: (req, res) => this.#dispatch(listener, routes, req, res),
    });
  }

  /**
   * Takes a reloaded configuration for the requests that arrive from now on: API keys, limits, each model's config
   * (the caller checked that only reloadable fields changed; the models are the same). Whole or not at all: all that
   * can throw (KVG_ERR_INVALID_CONFIG: a model without a router) is built before the first setting changes.
   */
  reconfigure(config: GatewayConfig): void {
    const unrouted = config.models.find((m) => !this.#ports.has(m.name));
    if (unrouted) throw new KvgateError('KVG_ERR_INVALID_CONFIG', `no router was given for model ${unrouted.name}`);
    const keys = new ApiKeys(config.apiKeys);
    const addresses = this.#clientAddresses(config);
    const relay: RelayOptions = {
      logger: this.logger,
      publicErrors: new PublicErrors(config.models),
      clientStallMs: config.limits.clientStallTimeoutMs,
      rejections: this.metrics.httpRejections,
    };
    this.#tenants.reconfigure(config.tenants);
    this.config = config;
    this.#keys = keys;
    this.#slots.setLimits(config.limits.maxConcurrentRequests, config.limits.maxConcurrentRequestsPerClient);
    // Each request waits on one preprocessing task at most: a queue this long is never full of requests alone.
    this.#preprocessor.maxQueued = config.limits.maxConcurrentRequests;
    this.#conns.maxPendingPerClient = config.limits.maxPendingConnectionsPerClient;
    this.#conns.maxOpenPerClient = config.limits.maxConnectionsPerClient;
    this.#cap.max = config.limits.maxConnections;
    this.#conns.addresses = addresses;
    this.#relay = relay;
    for (const m of config.models) {
      this.#models.set(m.name, m);
      this.#served.set(m.name, {
        port: this.#ports.get(m.name)!,
        model: servedModelConfig(m, this.#opts.inlineSystem),
      });
    }
  }

  /** Starts listening; resolves with the bound addresses (port 0 becomes the OS-chosen port). */
  async listen(): Promise<GatewayAddresses> {
    const backlog = this.config.listenBacklog;
    const bind = async (server: Server, host: string, port: number): Promise<{ host: string; port: number }> => {
      server.listen({ port, host, backlog });
      await once(server, 'listening');
      const a = server.address() as AddressInfo;
      return { host: a.address, port: a.port };
    };
    const pub = await bind(this.#public, this.config.listen.host, this.config.listen.port);
    const admin =
      this.#admin !== undefined
        ? await bind(this.#admin, this.config.admin.listen!.host, this.config.admin.listen!.port)
        : undefined;
    return { public: pub, admin };
  }

  /** Requests holding a concurrency slot right now. */
  get inflight(): number {
    return this.#slots.size;
  }

  /** Whether the public listener still accepts connections (it stops a moment after `close()` starts). */
  get listening(): boolean {
    return this.#public.listening;
  }

  get draining(): boolean {
    return this.#draining;
  }

  async #dispatch(
    listener: Listener,
    routes: Map<string, RouteSpec>,
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const startedAt = performance.now();
    const requestId = pickRequestId(req.headers['x-request-id'], randomUUID);
    res.setHeader('x-request-id', requestId);
    if (this.#opts.process !== undefined) res.setHeader('x-kvgate-process', this.#opts.process);
    const path = pathOf(req.url);
    const spec = matchRoute(routes, path);
    const controller = new Cancellation();
    const ctx: RequestContext = {
      req,
      res,
      requestId,
      route: spec?.name ?? 'unmatched',
      startedAt,
      signal: controller.signal,
      logFields: traceLogFields(),
    };
    const socket = req.socket;
    const admitted = this.#conns.requestStarted(req);
    ctx.client = this.#conns.clientOf(socket);
    // The slot is held until the response has closed and the handler has returned, whichever comes last: a client
    // that leaves aborts the request, but the work it started (a task on a preprocessing thread) runs on until it
    // ends, and counts against the limit until then.
    let slot = false;
    let closed = false;
    let handled = false;
    const release = (): void => {
      if (!slot || !closed || !handled) return;
      slot = false;
      this.#slots.release(controller);
    };
    res.on('close', () => {
      if (!res.writableFinished) {
        controller.abort(new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client closed the connection'));
        ctx.logFields.clientAborted = true;
      }
      this.#conns.requestDone(socket);
      closed = true;
      release();
      this.#logDone(ctx, listener);
    });
    try {
      if (!admitted) await this.#refuse(req);
      await refuseFaultyFraming(req, this.config.limits.maxBodyBytes);
      checkEdgeHeaders(req, spec?.auth === true);
      if (spec === undefined)
        throw new KvgateError('KVG_ERR_NOT_FOUND', notFound(listener, path, this.config), { param: null });
      const handler = spec.methods[req.method ?? ''];
      if (handler === undefined) {
        res.setHeader('allow', Object.keys(spec.methods).join(', '));
        throw new KvgateError('KVG_ERR_METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${path}`);
      }
      if (spec.auth && !this.#keys.accepts(credentialOf(ctx.route, req.headers))) {
        res.setHeader('www-authenticate', 'Bearer');
        throw new KvgateError('KVG_ERR_UNAUTHORIZED', 'a valid API key is required: Authorization: Bearer <key>');
      }
      if (spec.auth) ctx.tenant = this.#tenants.of(credentialOf(ctx.route, req.headers), req.headers);
      let body: Uint8Array = NO_BODY;
      if (spec.limited) {
        body = await readBodyBytes(req, this.config.limits, ctx.signal);
        this.#conns.requestArrived(socket);
        if (this.#draining) throw new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the gateway is shutting down');
        this.#slots.take(controller, ctx.client);
        slot = true;
      } else {
        this.#conns.requestArrived(socket);
      }
      await handler(ctx, body);
    } catch (err) {
      answerError(ctx, err, this.#relay, this.#draining, this.config.limits.retryAfterSeconds);
    } finally {
      handled = true;
      release();
    }
  }

  /**
   * Refuses a request over the per-client bound: 429, or 503 once draining (the answer closes the connection). Its
   * body is discarded for a moment first: closing with it unread would reset the connection before the client read
   * the answer.
   */
  async #refuse(req: IncomingMessage): Promise<never> {
    await discardBody(req, DISCARD_MS, this.config.limits.maxBodyBytes);
    if (this.#draining) throw new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the gateway is shutting down');
    throw new KvgateError(
      'KVG_ERR_TOO_MANY_CONNECTIONS',
      `this client holds ${this.config.limits.maxPendingConnectionsPerClient} connections ` +
        'whose request has not fully arrived, the limit; retry later',
    );
  }

  #logDone(ctx: RequestContext, listener: Listener): void {
    const status = ctx.res.statusCode;
    const seconds = (performance.now() - ctx.startedAt) / 1000;
    this.#requestMetrics.done(ctx.route, status, ctx.logFields.model, seconds);
    const level = status >= 500 ? 'warn' : 'info';
    if (!this.logger.isLevelEnabled(level)) return;
    this.logger[level](
      {
        reqId: ctx.requestId,
        method: ctx.req.method,
        route: ctx.route,
        status,
        ms: Math.round(seconds * 100_000) / 100,
        ...(listener === 'admin' ? { listener } : {}),
        ...ctx.logFields,
      },
      'request',
    );
  }

  /**
   * Graceful shutdown: stop accepting, drain in-flight requests up to `drainTimeoutMs`
   * (default: the config's), then abort what is left and close every connection.
   * Does not close the router ports or the preprocessor (their owner does). Idempotent.
   */
  close(opts: { drainTimeoutMs?: number } = {}): Promise<void> {
    this.#closing ??= this.#close(opts.drainTimeoutMs ?? this.config.drainTimeoutMs);
    return this.#closing;
  }

  async #close(drainTimeoutMs: number): Promise<void> {
    this.#draining = true;
    const servers = [this.#public, ...(this.#admin !== undefined ? [this.#admin] : [])].filter((s) => s.listening);
    await drain({ servers, conns: this.#conns, slots: this.#slots, logger: this.logger }, drainTimeoutMs);
    this.#unscrape();
  }
}
