/**
 * The engine's HTTP surface: which path goes where. vLLM's OpenAI server
 * (/v1/models, completions, chat, /v1/embeddings, /tokenize, /detokenize, /health,
 * /metrics, /reset_prefix_cache), SGLang's /server_info when imitating SGLang,
 * the vLLM P/D pull side channel, and /admin/*. A hung engine (fault) answers
 * only /admin; a crashed one drops the connection.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { sendError, sendJson } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { serveAdmin } from './admin.js';
import { ContextRefusal } from './context-refusal.js';
import { serveEmbeddings } from './embeddings.js';
import type { EngineMetrics } from './engine-metrics.js';
import type { FaultController } from './faults.js';
import { readJsonBody, type Generation } from './generation.js';
import type { MockerHandle } from './handle.js';
import { KV_PULL_PATH } from './pd-vllm.js';

/** Paths that exist (a wrong method on them is a 405, not a 404). */
const KNOWN_PATHS = [
  '/health',
  '/v1/models',
  '/metrics',
  '/v1/completions',
  '/v1/chat/completions',
  '/v1/messages',
  '/v1/responses',
  '/v1/embeddings',
  '/tokenize',
  '/detokenize',
  '/reset_prefix_cache',
  KV_PULL_PATH,
];

export interface RoutesOptions {
  readonly worker: MockerHandle;
  readonly faults: FaultController;
  readonly metrics: EngineMetrics;
  readonly generation: Generation;
  /** False once crashed: requests that got past a hang are dropped. */
  isUp(): boolean;
  /** An inference request (generation or embeddings) carried a W3C `traceparent` (recorded for /admin/state). */
  noteTraceparent(path: string, traceparent: string, tracestate: string | undefined): void;
  /** P's answer to D's KV pull (vLLM P/D). */
  kvPull(body: unknown): { status: number; body: unknown };
}

/**
 * Answers an error as vLLM does: the OpenAI error object, or the imitated engine's own body where the mocker has one
 * (a request over the context); anything not raised on purpose (a bug) as a 500 in the OpenAI shape.
 */
function sendEngineError(res: ServerResponse, err: unknown): void {
  if (err instanceof ContextRefusal) return sendJson(res, err.statusCode, err.body);
  if (err instanceof KvgateError) return sendError(res, err);
  sendJson(res, 500, {
    error: {
      message: `internal error: ${err instanceof Error ? err.message : String(err)}`,
      type: 'server_error',
      param: null,
      code: 'internal_error',
    },
  });
}

/** The inference routes whose W3C trace context is recorded, as vLLM continues it on each of them. */
const TRACED_PATHS: ReadonlySet<string> = new Set([
  '/v1/completions',
  '/v1/chat/completions',
  '/v1/messages',
  '/v1/responses',
  '/v1/embeddings',
]);

/** Serves one request; never rejects (errors become responses, or a destroyed socket once streaming started). */
export async function serveRequest(d: RoutesOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = (req.url ?? '/').split('?')[0]!;
  const method = req.method ?? 'GET';
  try {
    if (path.startsWith('/admin/')) return await serveAdmin(d.worker, method, path, req, res);
    await d.faults.whenNotHung();
    if (!d.isUp()) return void res.destroy();
    const { traceparent, tracestate } = req.headers;
    if (typeof traceparent === 'string' && method === 'POST' && TRACED_PATHS.has(path))
      d.noteTraceparent(path, traceparent, typeof tracestate === 'string' ? tracestate : undefined);
    if (await serveEngine(d, `${method} ${path}`, req, res)) return;
    if (KNOWN_PATHS.includes(path))
      throw new KvgateError('KVG_ERR_METHOD_NOT_ALLOWED', `${method} is not allowed on ${path}`, {});
    throw new KvgateError('KVG_ERR_NOT_FOUND', `no route ${method} ${path}`, {});
  } catch (err) {
    if (!res.headersSent) sendEngineError(res, err);
    else res.destroy();
  }
}

/** The engine's own routes; false when `route` is none of them. */
async function serveEngine(
  d: RoutesOptions,
  route: string,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<boolean> {
  switch (route) {
    case 'GET /health':
      res.writeHead(200, { 'content-length': '0' });
      res.end();
      return true;
    case 'GET /v1/models':
      sendJson(res, 200, models(d.worker));
      return true;
    case 'GET /metrics': {
      const text = await d.metrics.render();
      res.writeHead(200, { 'content-type': d.metrics.contentType });
      res.end(text);
      return true;
    }
    case 'POST /v1/completions':
      await d.generation.generate('completion', req, res);
      return true;
    case 'POST /v1/chat/completions':
      await d.generation.generate('chat', req, res);
      return true;
    case 'POST /v1/messages':
      await d.generation.generate('messages', req, res);
      return true;
    case 'POST /v1/responses':
      await d.generation.generate('responses', req, res);
      return true;
    case 'POST /v1/embeddings':
      await serveEmbeddings(d.worker, req, res);
      return true;
    case 'POST /tokenize':
      await d.generation.tokenize(req, res);
      return true;
    case 'POST /detokenize':
      await d.generation.detokenize(req, res);
      return true;
    case 'POST /reset_prefix_cache':
      sendJson(res, 200, { success: d.worker.resetPrefixCache() });
      return true;
    case `POST ${KV_PULL_PATH}`: {
      const answer = d.kvPull((await readJsonBody(req)).body);
      sendJson(res, answer.status, answer.body);
      return true;
    }
    case 'GET /server_info':
    case 'GET /get_server_info':
      if (d.worker.options.engine !== 'sglang') return false;
      sendJson(res, 200, serverInfo(d.worker));
      return true;
  }
  return false;
}

/** vLLM's /v1/models: the model, then each LoRA adapter as its child. */
function models(w: MockerHandle): Record<string, unknown> {
  const o = w.options;
  const created = Math.floor(Date.now() / 1000);
  const entry = (id: string, parent: string | null): Record<string, unknown> => ({
    id,
    object: 'model',
    created,
    owned_by: o.engine,
    root: parent ?? id,
    parent,
    max_model_len: o.maxModelLen,
    permission: [],
  });
  return { object: 'list', data: [entry(o.model, null), ...o.loraNames.map((n) => entry(n, o.model))] };
}

/** SGLang's /server_info, with where its KV events are published. */
function serverInfo(w: MockerHandle): Record<string, unknown> {
  const o = w.options;
  return {
    model_path: o.model,
    served_model_name: o.model,
    page_size: o.blockSize,
    dp_size: o.dpSize,
    disaggregation_mode: o.mode === 'aggregated' ? 'null' : o.mode,
    disaggregation_bootstrap_port: w.bootstrapPort ?? null,
    kv_events: o.kvEvents
      ? {
          publisher: 'zmq',
          endpoint_host: w.host,
          port_base: w.kvEventsPorts[0] ?? null,
          ports: w.kvEventsPorts,
          topic: o.kvEventsTopic,
          block_size: o.blockSize,
          dp_size: o.dpSize,
        }
      : null,
  };
}
