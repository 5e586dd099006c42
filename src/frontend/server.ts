/**
 * The gateway's HTTP server (node:http, no framework): the OpenAI-compatible
 * API, query-only routing, health, readiness, metrics and admin endpoints.
 *
 * A completion request goes: request id -> auth -> concurrency slot -> body
 * (size-limited) -> JSON -> schema -> model -> routing hints -> preprocess
 * (pool) -> `ModelRouterPort.route` or `.query` -> response (JSON or SSE
 * passthrough). Every failure before the response starts is an OpenAI-style
 * error object with a stable kvgate code; a failure mid-stream ends the
 * stream with an error event. Each request has an AbortSignal that fires on
 * client disconnect, on the request timeout and on forced shutdown.
 *
 * Shutdown (`close`): stop accepting, answer new requests on open connections
 * with 503 + `Connection: close`, let in-flight requests finish until the
 * drain deadline, then abort the rest and close every connection.
 *
 * Listeners: the public one always; admin endpoints (`/admin/config`,
 * `/admin/models`) only when `admin.enabled`, on a separate listener when
 * `admin.listen` is set, else on the public one. `/health`, `/ready` and
 * `/metrics` need no API key (probes and scrapers); `/v1/*` and `/admin/*` do
 * when keys are configured.
 */
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { WorkerRank } from '../common/index.js';
import type { GatewayConfig, ModelConfig } from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import { KvgateMetrics } from '../metrics/index.js';
import { parseRoutingHints } from './hints.js';
import {
  ApiKeys, asKvgateError, parseJsonObject, pickRequestId, readBody, sendBytes, sendError, sendJson,
} from './http-io.js';
import type { Preprocessor } from './preprocess/preprocessor.js';
import { promptTask } from './prompt-task.js';
import { pipeRouted, sendQueryAnswer, workerHeaders, type RequestContext } from './respond.js';
import type { EndpointKind, ModelRouterPort, PreparedRequest, QueryResult, RoutedResponse } from './router-port.js';
import { validateBody } from './schemas.js';

export interface GatewayServerOptions {
  config: GatewayConfig;
  /** One port per configured model (matched by `model`). */
  routers: Iterable<ModelRouterPort>;
  preprocessor: Preprocessor;
  /** The process's logger, owned by the caller (the CLI creates it); access and error lines go here. */
  logger: Logger;
  /** Serves /metrics from its registry and counts HTTP outcomes. Default: a fresh KvgateMetrics. */
  metrics?: KvgateMetrics;
}

export interface GatewayAddresses {
  public: { host: string; port: number };
  admin: { host: string; port: number } | undefined;
}

type Listener = 'public' | 'admin';
type Handler = (ctx: RequestContext) => Promise<void> | void;

interface RouteSpec {
  /** Label for metrics and logs. */
  name: string;
  methods: Partial<Record<string, Handler>>;
  /** Needs an API key when keys are configured. */
  auth: boolean;
  /** Takes a concurrency slot (limit: max_concurrent_requests). */
  limited: boolean;
}

export class GatewayServer {
  readonly config: GatewayConfig;
  readonly logger: Logger;
  readonly metrics: KvgateMetrics;
  readonly #ports = new Map<string, ModelRouterPort>();
  readonly #models = new Map<string, ModelConfig>();
  readonly #preprocessor: Preprocessor;
  readonly #keys: ApiKeys;
  readonly #public: Server;
  readonly #admin: Server | undefined;
  readonly #createdSec = Math.floor(Date.now() / 1000);
  /** Abort controllers of requests holding a concurrency slot. */
  readonly #active = new Set<AbortController>();
  #draining = false;
  #closing: Promise<void> | undefined;
  #idleWaiters: (() => void)[] = [];

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG when a port's model or block size disagrees with the config. */
  constructor(opts: GatewayServerOptions) {
    this.config = opts.config;
    this.logger = opts.logger;
    this.metrics = opts.metrics ?? new KvgateMetrics();
    this.#preprocessor = opts.preprocessor;
    this.#keys = new ApiKeys(opts.config.apiKeys);
    for (const m of opts.config.models) this.#models.set(m.name, m);
    for (const port of opts.routers) {
      const model = this.#models.get(port.model);
      if (model === undefined) throw new KvgateError('KVG_ERR_INVALID_CONFIG', `a router was given for model ${port.model}, which is not configured`);
      if (port.blockSize !== model.blockSize) {
        throw new KvgateError('KVG_ERR_INVALID_CONFIG', `the router of model ${port.model} uses block size ${port.blockSize}, the config says ${model.blockSize}`);
      }
      this.#ports.set(port.model, port);
    }
    for (const m of opts.config.models) {
      if (!this.#ports.has(m.name)) throw new KvgateError('KVG_ERR_INVALID_CONFIG', `no router was given for model ${m.name}`);
    }
    const adminSeparate = opts.config.admin.enabled && opts.config.admin.listen !== undefined;
    this.#public = this.#createServer('public', this.#routeTable(!adminSeparate && opts.config.admin.enabled, true));
    this.#admin = adminSeparate ? this.#createServer('admin', this.#routeTable(true, false)) : undefined;
  }

  #createServer(listener: Listener, routes: Map<string, RouteSpec>): Server {
    const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
      this.#dispatch(listener, routes, req, res).catch((err: unknown) => {
        this.logger.error({ err }, 'unhandled error in request dispatch');
        if (!res.headersSent) sendError(res, asKvgateError(err, 'unknown'), this.config.limits.retryAfterSeconds);
        else res.destroy();
      });
    });
    server.on('clientError', (err, socket) => {
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      else socket.destroy();
      this.logger.debug({ err: (err as Error).message }, 'malformed HTTP request');
    });
    return server;
  }

  #routeTable(withAdmin: boolean, withApi: boolean): Map<string, RouteSpec> {
    const t = new Map<string, RouteSpec>();
    const add = (path: string, spec: Omit<RouteSpec, 'name'>): void => {
      t.set(path, { name: path, ...spec });
    };
    add('/health', { methods: { GET: (c) => sendJson(c.res, 200, { status: 'ok' }) }, auth: false, limited: false });
    add('/metrics', { methods: { GET: (c) => this.#metricsText(c) }, auth: false, limited: false });
    if (withApi) {
      add('/ready', { methods: { GET: (c) => this.#ready(c) }, auth: false, limited: false });
      add('/v1/models', { methods: { GET: (c) => this.#listModels(c) }, auth: true, limited: false });
      add('/v1/models/*', { methods: { GET: (c) => this.#getModel(c) }, auth: true, limited: false });
      add('/v1/chat/completions', { methods: { POST: (c) => this.#completion(c, 'chat') }, auth: true, limited: true });
      add('/v1/completions', { methods: { POST: (c) => this.#completion(c, 'completion') }, auth: true, limited: true });
      add('/v1/route', { methods: { POST: (c) => this.#completion(c, 'route') }, auth: true, limited: true });
    }
    if (withAdmin) {
      add('/admin/config', { methods: { GET: (c) => sendJson(c.res, 200, this.#redactedConfig()) }, auth: true, limited: false });
      add('/admin/models', { methods: { GET: (c) => sendJson(c.res, 200, this.#modelsStatus()) }, auth: true, limited: false });
    }
    return t;
  }

  /** Starts listening; resolves with the bound addresses (port 0 becomes the OS-chosen port). */
  async listen(): Promise<GatewayAddresses> {
    const bind = async (server: Server, host: string, port: number): Promise<{ host: string; port: number }> => {
      server.listen(port, host);
      await once(server, 'listening');
      const a = server.address() as AddressInfo;
      return { host: a.address, port: a.port };
    };
    const pub = await bind(this.#public, this.config.listen.host, this.config.listen.port);
    const admin = this.#admin !== undefined ? await bind(this.#admin, this.config.admin.listen!.host, this.config.admin.listen!.port) : undefined;
    return { public: pub, admin };
  }

  /** Requests holding a concurrency slot right now. */
  get inflight(): number {
    return this.#active.size;
  }

  get draining(): boolean {
    return this.#draining;
  }

  async #dispatch(listener: Listener, routes: Map<string, RouteSpec>, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const startedAt = performance.now();
    const requestId = pickRequestId(req.headers['x-request-id'], randomUUID);
    res.setHeader('x-request-id', requestId);
    const path = (req.url ?? '/').split('?', 1)[0]!;
    const spec = routes.get(path) ?? (path.startsWith('/v1/models/') ? routes.get('/v1/models/*') : undefined);
    const controller = new AbortController();
    const ctx: RequestContext = { req, res, requestId, route: spec?.name ?? 'unmatched', startedAt, signal: controller.signal, log: {} };
    const retryAfter = this.config.limits.retryAfterSeconds;
    let slot = false;
    res.once('close', () => {
      if (!res.writableFinished) {
        controller.abort(new KvgateError('KVG_ERR_CLIENT_ABORTED', 'the client closed the connection'));
        ctx.log.clientAborted = true;
      }
      if (slot) this.#releaseSlot(controller);
      this.#logDone(ctx, listener);
    });
    try {
      if (spec === undefined) throw new KvgateError('KVG_ERR_NOT_FOUND', `no endpoint ${path}`, { param: null });
      const handler = spec.methods[req.method ?? ''];
      if (handler === undefined) {
        res.setHeader('allow', Object.keys(spec.methods).join(', '));
        throw new KvgateError('KVG_ERR_METHOD_NOT_ALLOWED', `${req.method} is not allowed on ${path}`);
      }
      if (spec.auth && !this.#keys.accepts(req.headers.authorization)) {
        res.setHeader('www-authenticate', 'Bearer');
        throw new KvgateError('KVG_ERR_UNAUTHORIZED', 'a valid API key is required: Authorization: Bearer <key>');
      }
      if (spec.limited) {
        if (this.#draining) {
          res.setHeader('connection', 'close');
          throw new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the gateway is shutting down');
        }
        if (this.#active.size >= this.config.limits.maxConcurrentRequests) {
          throw new KvgateError('KVG_ERR_TOO_MANY_REQUESTS', `${this.config.limits.maxConcurrentRequests} requests are in flight, the limit; retry later`);
        }
        slot = true;
        this.#active.add(controller);
        this.metrics.inflight.set(this.#active.size);
        const timer = setTimeout(() => controller.abort(new KvgateError('KVG_ERR_REQUEST_TIMEOUT',
          `the request did not complete within ${this.config.limits.requestTimeoutMs} ms`)), this.config.limits.requestTimeoutMs);
        timer.unref();
        res.once('close', () => clearTimeout(timer));
      }
      await handler(ctx);
    } catch (err) {
      this.#fail(ctx, err, retryAfter);
    }
  }

  #fail(ctx: RequestContext, err: unknown, retryAfter: number): void {
    const { res } = ctx;
    // A fired signal explains the failure better than whatever it interrupted.
    const reason = ctx.signal.aborted ? ctx.signal.reason : err;
    const e = asKvgateError(reason, ctx.requestId);
    ctx.log.code = e.code;
    if (e.code === 'KVG_ERR_INTERNAL') this.logger.error({ reqId: ctx.requestId, err: reason }, 'internal error');
    this.metrics.httpRejections.inc({ code: e.code });
    if (res.destroyed) return;
    if (res.headersSent) {
      res.end();
      return;
    }
    const headers: Record<string, string> = {};
    if (e.code === 'KVG_ERR_BODY_TOO_LARGE' || this.#draining) headers.connection = 'close';
    sendError(res, e, retryAfter, headers);
  }

  #releaseSlot(controller: AbortController): void {
    this.#active.delete(controller);
    this.metrics.inflight.set(this.#active.size);
    if (this.#active.size === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  #logDone(ctx: RequestContext, listener: Listener): void {
    const status = ctx.res.statusCode;
    this.metrics.httpRequests.inc({ route: ctx.route, status: String(status) });
    const level = status >= 500 ? 'warn' : 'info';
    if (!this.logger.isLevelEnabled(level)) return;
    this.logger[level]({
      reqId: ctx.requestId, method: ctx.req.method, route: ctx.route, status,
      ms: Math.round((performance.now() - ctx.startedAt) * 100) / 100, ...(listener === 'admin' ? { listener } : {}), ...ctx.log,
    }, 'request');
  }

  async #completion(ctx: RequestContext, kind: EndpointKind | 'route'): Promise<void> {
    const body = parseJsonObject(await readBody(ctx.req, this.config.limits.maxBodyBytes, ctx.signal));
    const endpoint: EndpointKind = kind === 'route' ? (body.messages !== undefined ? 'chat' : 'completion') : kind;
    validateBody(endpoint, body);
    const modelName = body.model as string;
    ctx.log.model = modelName;
    const port = this.#ports.get(modelName);
    const model = this.#models.get(modelName);
    if (port === undefined || model === undefined) {
      throw new KvgateError('KVG_ERR_MODEL_NOT_FOUND', `model ${JSON.stringify(modelName)} is not served here; GET /v1/models lists the models`, { param: 'model' });
    }
    if (!port.canServe()) {
      throw new KvgateError('KVG_ERR_MODEL_UNAVAILABLE', port.unavailableReason?.() ?? `model ${modelName} has no worker available right now`, { param: 'model' });
    }
    const { hints, queryOnly, tokenData } = parseRoutingHints(body.nvext, ctx.req.headers);
    const task = promptTask({ endpoint, body, model: modelName, maxPromptTokens: model.maxPromptTokens, tokenData, loraName: hints.loraName });
    const pre = await this.#preprocessor.run(task);
    ctx.signal.throwIfAborted();
    ctx.log.promptTokens = pre.tokenIds.length;
    if (pre.stats.cachedTokens > 0) ctx.log.segmentCachedTokens = pre.stats.cachedTokens;
    const { nvext: _nvext, ...forward } = body;
    const prepared: PreparedRequest = {
      requestId: ctx.requestId,
      model: modelName,
      endpoint,
      body: forward,
      stream: body.stream === true,
      tokenIds: pre.tokenIds,
      blockHashes: pre.blockHashes,
      sequenceHashes: pre.sequenceHashes,
      approximate: pre.approximate,
      hints,
      queryOnly: queryOnly || kind === 'route',
      signal: ctx.signal,
      receivedAt: ctx.startedAt,
    };
    if (prepared.queryOnly) {
      const q = await port.query(prepared);
      ctx.signal.throwIfAborted();
      this.#noteWorkers(ctx, q.worker, q.prefillWorker);
      this.#sendQuery(ctx, kind, prepared, q, model);
      return;
    }
    const routed = await port.route(prepared);
    this.#noteWorkers(ctx, routed.worker, routed.prefillWorker);
    await this.#sendRouted(ctx, routed);
  }

  #noteWorkers(ctx: RequestContext, worker: WorkerRank, prefill: WorkerRank | undefined): void {
    ctx.log.worker = worker.workerId;
    if (prefill !== undefined) ctx.log.prefillWorker = prefill.workerId;
  }

  #sendQuery(ctx: RequestContext, kind: EndpointKind | 'route', req: PreparedRequest, q: QueryResult, model: ModelConfig): void {
    const headers = workerHeaders(q.worker, q.prefillWorker);
    if (this.#draining) headers.connection = 'close';
    sendQueryAnswer(ctx, kind, req, q, model, headers, this.#createdSec);
  }

  #sendRouted(ctx: RequestContext, routed: RoutedResponse): Promise<void> {
    const headers = workerHeaders(routed.worker, routed.prefillWorker);
    if (this.#draining) headers.connection = 'close';
    return pipeRouted(ctx, routed, headers, this.logger);
  }

  #metricsText(ctx: RequestContext): Promise<void> {
    return this.metrics.text().then((text) => sendBytes(ctx.res, 200, text, this.metrics.contentType));
  }

  #servable(): string[] {
    return [...this.#ports.values()].filter((p) => p.canServe()).map((p) => p.model);
  }

  #ready(ctx: RequestContext): void {
    const models = this.#servable();
    const ready = !this.#draining && models.length > 0;
    sendJson(ctx.res, ready ? 200 : 503, { status: ready ? 'ready' : this.#draining ? 'draining' : 'no_servable_model', models });
  }

  #listModels(ctx: RequestContext): void {
    sendJson(ctx.res, 200, {
      object: 'list',
      data: this.#servable().map((id) => ({ id, object: 'model', created: this.#createdSec, owned_by: 'kvgate' })),
    });
  }

  #getModel(ctx: RequestContext): void {
    const id = decodeURIComponent((ctx.req.url ?? '').split('?', 1)[0]!.slice('/v1/models/'.length));
    if (!this.#servable().includes(id)) {
      throw new KvgateError('KVG_ERR_MODEL_NOT_FOUND', `model ${JSON.stringify(id)} is not served here; GET /v1/models lists the models`, { param: 'model' });
    }
    sendJson(ctx.res, 200, { id, object: 'model', created: this.#createdSec, owned_by: 'kvgate' });
  }

  #redactedConfig(): unknown {
    return { ...this.config, apiKeys: `${this.config.apiKeys.length} configured (not shown)` };
  }

  #modelsStatus(): unknown {
    return {
      preprocess: { mode: this.#preprocessor.mode, threads: this.#preprocessor.threads },
      inflight: this.#active.size,
      draining: this.#draining,
      models: this.config.models.map((m) => ({
        name: m.name,
        routerMode: m.routerMode,
        blockSize: m.blockSize,
        canServe: this.#ports.get(m.name)!.canServe(),
        tokenizer: m.tokenizer.kind,
        workers: m.workers.map((w) => ({ id: w.id, url: w.url, role: w.role, engine: w.dialect, dpSize: w.dpSize, kvEvents: w.kvEvents?.endpoint })),
      })),
    };
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
    const closed = Promise.all(servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    for (const s of servers) s.closeIdleConnections();
    const drainedInTime = await this.#waitIdle(drainTimeoutMs);
    if (!drainedInTime) {
      this.logger.warn({ inflight: this.#active.size, drainTimeoutMs }, 'drain deadline reached; aborting in-flight requests');
      for (const c of this.#active) c.abort(new KvgateError('KVG_ERR_SHUTTING_DOWN', 'the gateway is shutting down; the request was cut at the drain deadline'));
      // Aborted handlers write their final error event, then release their slot.
      await this.#waitIdle(1000);
    }
    for (const s of servers) s.closeAllConnections();
    await closed;
  }

  #waitIdle(timeoutMs: number): Promise<boolean> {
    if (this.#active.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#idleWaiters = this.#idleWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      this.#idleWaiters.push(done);
    });
  }
}

