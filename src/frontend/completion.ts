/**
 * The completion pipeline, from a body that has arrived (the request holds a
 * concurrency slot) to its answer: the request prepared (prepare.ts: JSON ->
 * schema -> model (or LoRA adapter) -> routing hints -> preprocessing, on a
 * pool thread for a large body) -> `ModelRouterPort.query` (query-only,
 * `/v1/route`) or `.route` -> the answer (query-response.ts, respond.ts).
 * server.ts owns everything before: the edge checks, the body, the slot.
 */
import type { WorkerRank } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { prepareRequest, type PrepareOptions } from './prepare.js';
import { pipeRouted, sendQueryAnswer, workerHeaders, type RelayOptions, type RequestContext } from './respond.js';
import type { EndpointKind, PreparedRequest } from './router-port.js';
import type { TenantDirectory } from './tenants.js';

/** What the pipeline reads of the server; `relay`, `draining` and `maxMessages` are read per request (a reload, a shutdown). */
export interface CompletionOptions extends PrepareOptions {
  /** The `created` of query-only answers: when the server started, in seconds. */
  readonly createdSec: number;
  relay(): RelayOptions;
  draining(): boolean;
  /** The tenants in force: rate limits at admission, the shed count. */
  readonly tenants: TenantDirectory;
}

/** The answer's worker headers and the disaggregation decision, with `Connection: close` while draining. */
function answerHeaders(
  env: CompletionOptions,
  worker: WorkerRank,
  prefill: WorkerRank | undefined,
  disagg?: string,
): Record<string, string> {
  const headers = workerHeaders(worker, prefill);
  if (disagg !== undefined) headers['x-kvgate-disagg'] = disagg;
  if (env.draining()) headers.connection = 'close';
  return headers;
}

function noteWorkers(ctx: RequestContext, worker: WorkerRank, prefill: WorkerRank | undefined): void {
  ctx.logFields.worker = worker.workerId;
  if (prefill !== undefined) ctx.logFields.prefillWorker = prefill.workerId;
}

/**
 * Routes `prepared` as its tenant's: the tenant's token rate first (its prompt's tokens), then the router with
 * the tenant's class on the request (the router queue's share) and the client's priorities bounded by that class
 * (client-priority.ts), a shed counted against the tenant.
 * @throws KvgateError KVG_ERR_RATE_LIMITED (429), KVG_ERR_INVALID_REQUEST (a `priority` the class forwards that is
 *   not an integer), and the router's errors (KVG_ERR_QUEUE_SHED: 529).
 */
async function routeAsTenant<R>(
  env: CompletionOptions,
  ctx: RequestContext,
  prepared: PreparedRequest,
  route: (p: PreparedRequest) => Promise<R>,
): Promise<R> {
  const tenant = ctx.tenant;
  if (tenant === undefined) return route(prepared);
  env.tenants.admit(tenant, prepared.promptTokens);
  try {
    return await route(env.tenants.bound(tenant, prepared));
  } catch (err) {
    env.tenants.noteFailure(tenant, err);
    throw err;
  }
}

/**
 * Serves one completion (`kind` chat or completion) or query-only routing (`route`) from its body bytes.
 * @throws KvgateError for the client's errors (JSON, schema, model, hints, prompt) and the port's.
 */
export async function serveCompletion(
  env: CompletionOptions,
  ctx: RequestContext,
  bytes: Uint8Array,
  kind: EndpointKind | 'route',
): Promise<void> {
  const tenant = ctx.tenant;
  if (tenant !== undefined) {
    ctx.logFields.tenant = tenant.hint.tenant;
    // The request rate is spent before the body is parsed or tokenized: a tenant over it costs no preprocessing.
    // Query-only routing on /v1/route is not charged.
    if (kind !== 'route') env.tenants.arrive(tenant);
  }
  const { prepared, target } = await prepareRequest(env, ctx, bytes, kind);
  const { port, model } = target;
  if (prepared.queryOnly) {
    if (kind === 'messages' || kind === 'responses' || kind === 'embeddings') {
      throw new KvgateError(
        'KVG_ERR_INVALID_REQUEST',
        `query-only routing is not served on the ${kind} API; use /v1/route`,
        {
          param: 'nvext.annotations',
        },
      );
    }
    const q = await port.query(prepared);
    ctx.signal.throwIfAborted();
    noteWorkers(ctx, q.worker, q.prefillWorker);
    sendQueryAnswer(ctx, kind, prepared, q, model, answerHeaders(env, q.worker, q.prefillWorker), env.createdSec);
    return;
  }
  const routed = await routeAsTenant(env, ctx, prepared, port.route.bind(port));
  noteWorkers(ctx, routed.worker, routed.prefillWorker);
  await pipeRouted(ctx, routed, answerHeaders(env, routed.worker, routed.prefillWorker, routed.disagg), env.relay());
}
