/**
 * The gateway's route table: the paths a listener serves, each with its
 * handlers by method, whether it needs an API key and whether it reads a body
 * under a concurrency slot (route-spec.ts); and the answers of the routes that
 * are not completions: health, readiness, metrics, the model list and the
 * admin views. Completions go to the pipeline (completion.ts).
 *
 * The public listener serves the API (`/ready`, `/v1/*`, `/tokenize`, `/detokenize`) and, when the admin
 * has no listener of its own, the admin routes; the admin listener serves the
 * admin routes. `/health` and `/metrics` are on both and need no API key
 * (probes and scrapers).
 */
import type { GatewayConfig } from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import type { FleetStatus } from '../fleet/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import { canForceGc, gcAndMeasure } from './admin-gc.js';
import { COUNT_TOKENS_ROUTE, MESSAGES_ROUTE } from './anthropic-error.js';
import { modelsStatus, redactedConfig } from './admin-status.js';
import { serveCompletion, type CompletionOptions } from './completion.js';
import { decodedModelId } from './edge.js';
import { sendBytes, sendJson } from './http-io.js';
import { modelEntries } from './model-lookup.js';
import type { RequestContext } from './respond.js';
import type { RouteSpec } from './route-spec.js';
import { serveCountTokens, serveDetokenize, serveTokenize } from './tokenize.js';
import type { EndpointKind, ModelRouterPort } from './router-port.js';

/** What the routes read of the server; `config`, `inflight` and the completion options' `draining` per request. */
export interface RouteTableOptions {
  /** The configuration in force (a reload replaces it). */
  config(): GatewayConfig;
  /** One port per model, by model name. */
  readonly ports: ReadonlyMap<string, ModelRouterPort>;
  readonly metrics: KvgateMetrics;
  /** The completion pipeline's view of the server (its preprocessor, start time and draining flag). */
  readonly completion: CompletionOptions;
  /** Requests holding a concurrency slot now. */
  inflight(): number;
  /** `POST /admin/reload`, served when given. */
  readonly reload?: (() => Promise<ReloadOutcomeView>) | undefined;
  readonly fleet?: FleetStatus | undefined;
}

/**
 * What a reload did, as `POST /admin/reload` answers it (the CLI's `ReloadOutcome`). Under `--processes N` the
 * reload is every process's: `processes` says how each came out, and each worker that did not join (or leave) names
 * its process.
 */
export interface ReloadOutcomeView {
  readonly changes: readonly unknown[];
  readonly notJoined: readonly ReloadWorkerView[];
  /** Workers the file removes whose leave threw and that are still registered (they stay configured). */
  readonly notLeft?: readonly ReloadWorkerView[];
  readonly processes?: readonly { readonly process: number; readonly status: 'reloaded' | 'partial' }[];
  /** Fields the file changed that a command-line flag sets: the flag's value stays (absent: none). */
  readonly hiddenByFlags?: readonly { readonly path: string; readonly flag: string }[];
}

interface ReloadWorkerView {
  readonly workerId: number;
  readonly model: string;
  readonly reason: string;
  readonly process?: number;
}

/**
 * `POST /admin/reload`'s answer: `partial` when a worker the file adds could not join (`not_joined`) or one it removes
 * could not leave (`not_left`), each named; `hidden_by_flags` names what the file changed that a flag keeps.
 */
function reloadAnswer(r: ReloadOutcomeView): Record<string, unknown> {
  const more = {
    ...(r.hiddenByFlags === undefined ? {} : { hidden_by_flags: r.hiddenByFlags }),
    ...(r.processes === undefined ? {} : { processes: r.processes }),
  };
  const notLeft = r.notLeft ?? [];
  if (r.notJoined.length + notLeft.length === 0) return { status: 'reloaded', changes: r.changes, ...more };
  const named = (l: readonly ReloadWorkerView[]): unknown[] =>
    l.map((n) => ({
      worker_id: n.workerId,
      model: n.model,
      reason: n.reason,
      ...(n.process === undefined ? {} : { process: n.process }),
    }));
  return {
    status: 'partial',
    changes: r.changes,
    ...(r.notJoined.length === 0 ? {} : { not_joined: named(r.notJoined) }),
    ...(notLeft.length === 0 ? {} : { not_left: named(notLeft) }),
    ...more,
  };
}

type Routes = Map<string, RouteSpec>;
type AddRoute = (path: string, spec: Omit<RouteSpec, 'name'>) => void;

/** The routes of one listener: the API's (`withApi`, the public one) and the admin's (`withAdmin`). */
export function routeTable(o: RouteTableOptions, withAdmin: boolean, withApi: boolean): Routes {
  const t: Routes = new Map();
  const add: AddRoute = (path, spec) => {
    t.set(path, { name: path, ...spec });
  };
  add('/health', { methods: { GET: (c) => sendJson(c.res, 200, { status: 'ok' }) }, auth: false, limited: false });
  add('/metrics', { methods: { GET: (c) => sendMetrics(o.metrics, c) }, auth: false, limited: false });
  if (withApi) addApiRoutes(o, add);
  if (withAdmin) addAdminRoutes(o, add);
  return t;
}

/** The route serving `path` (a request's path, query removed): its own entry, or `/v1/models/*` for one model. */
export function matchRoute(routes: Routes, path: string): RouteSpec | undefined {
  return routes.get(path) ?? (path.startsWith('/v1/models/') ? routes.get('/v1/models/*') : undefined);
}

function addApiRoutes(o: RouteTableOptions, add: AddRoute): void {
  add('/ready', { methods: { GET: (c) => sendReady(o, c) }, auth: false, limited: false });
  add('/v1/models', {
    methods: { GET: (c) => sendJson(c.res, 200, { object: 'list', data: modelList(o) }) },
    auth: true,
    limited: false,
  });
  add('/v1/models/*', { methods: { GET: (c) => sendModel(o, c) }, auth: true, limited: false });
  const complete = (kind: EndpointKind | 'route'): RouteSpec['methods'] => ({
    POST: (c, body) => serveCompletion(o.completion, c, body, kind),
  });
  add('/v1/chat/completions', { methods: complete('chat'), auth: true, limited: true });
  add('/v1/completions', { methods: complete('completion'), auth: true, limited: true });
  add('/v1/route', { methods: complete('route'), auth: true, limited: true });
  add(MESSAGES_ROUTE, { methods: complete('messages'), auth: true, limited: true });
  add('/v1/responses', { methods: complete('responses'), auth: true, limited: true });
  add('/v1/embeddings', { methods: complete('embeddings'), auth: true, limited: true });
  // Answered by kvgate with the model's tokenizer, no engine asked (tokenize.ts).
  const env = o.completion;
  add('/tokenize', { methods: { POST: (c, body) => serveTokenize(env, c, body) }, auth: true, limited: true });
  add('/detokenize', { methods: { POST: (c, body) => serveDetokenize(env, c, body) }, auth: true, limited: true });
  add(COUNT_TOKENS_ROUTE, {
    methods: { POST: (c, body) => serveCountTokens(env, c, body) },
    auth: true,
    limited: true,
  });
}

function addAdminRoutes(o: RouteTableOptions, add: AddRoute): void {
  add('/admin/config', {
    methods: { GET: (c) => sendJson(c.res, 200, redactedConfig(o.config())) },
    auth: true,
    limited: false,
  });
  add('/admin/models', { methods: { GET: (c) => sendJson(c.res, 200, adminModels(o)) }, auth: true, limited: false });
  const reload = o.reload;
  if (reload !== undefined)
    add('/admin/reload', {
      methods: { POST: async (c) => sendJson(c.res, 200, reloadAnswer(await reload())) },
      auth: true,
      limited: false,
    });
  if (canForceGc())
    add('/admin/gc', {
      methods: { POST: (c) => sendJson(c.res, 200, gcAndMeasure()) },
      auth: true,
      limited: false,
    });
}

/** `GET /admin/models`: each model's routing setup, the gateway's own state and the fleet's workers. */
function adminModels(o: RouteTableOptions): unknown {
  const { preprocessor } = o.completion;
  return modelsStatus(
    o.config(),
    o.ports,
    {
      preprocess: { mode: preprocessor.mode, threads: preprocessor.threads },
      inflight: o.inflight(),
      draining: o.completion.draining(),
    },
    o.fleet,
  );
}

function sendMetrics(metrics: KvgateMetrics, ctx: RequestContext): Promise<void> {
  return metrics.text().then((text) => sendBytes(ctx.res, 200, text, metrics.contentType));
}

function servable(o: RouteTableOptions): ModelRouterPort[] {
  return [...o.ports.values()].filter((p) => p.canServe());
}

/** `GET /ready`: 200 while not draining and some model can serve, else 503 with the reason. */
function sendReady(o: RouteTableOptions, ctx: RequestContext): void {
  const models = servable(o).map((p) => p.model);
  const draining = o.completion.draining();
  const ready = !draining && models.length > 0;
  sendJson(ctx.res, ready ? 200 : 503, {
    status: ready ? 'ready' : draining ? 'draining' : 'no_servable_model',
    models,
  });
}

/** The servable models, each followed by the LoRA adapters it serves now (`parent`: the model). */
function modelList(o: RouteTableOptions): Record<string, unknown>[] {
  return servable(o).flatMap((p) => modelEntries(p, o.completion.createdSec));
}

/** `GET /v1/models/{id}`: one entry of the model list. @throws KvgateError KVG_ERR_MODEL_NOT_FOUND */
function sendModel(o: RouteTableOptions, ctx: RequestContext): void {
  const id = decodedModelId((ctx.req.url ?? '').split('?', 1)[0]!.slice('/v1/models/'.length));
  const entry = modelList(o).find((e) => e.id === id);
  if (entry === undefined) {
    throw new KvgateError(
      'KVG_ERR_MODEL_NOT_FOUND',
      `model ${JSON.stringify(id)} is not served here; GET /v1/models lists the models`,
      { param: 'model' },
    );
  }
  sendJson(ctx.res, 200, entry);
}
