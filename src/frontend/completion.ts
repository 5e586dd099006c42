/**
 * The completion pipeline, from a body that has arrived (the request holds a
 * concurrency slot) to its answer: JSON -> schema -> model (or LoRA adapter)
 * -> routing hints -> preprocessing -> `ModelRouterPort.query` (query-only,
 * `/v1/route`) or `.route` -> the answer (query-response.ts, respond.ts).
 * server.ts owns everything before: the edge checks, the body, the slot.
 */
import { inSpan, rememberJsonText, type WorkerRank } from '../common/index.js';
import { parseBodyObject, withoutNvext } from './body.js';
import { parseRoutingHints } from './hints.js';
import { resolveModel, type ModelTarget } from './model-lookup.js';
import type { Preprocessor } from './preprocess/preprocessor.js';
import { promptTask } from './prompt-task.js';
import { pipeRouted, sendQueryAnswer, workerHeaders, type RelayEnv, type RequestContext } from './respond.js';
import type { EndpointKind, PreparedRequest } from './router-port.js';
import { validateBody } from './schemas.js';

/** What the pipeline reads of the server; `relay` and `draining` are read per request (a reload, a shutdown). */
export interface CompletionEnv {
  /** Each model's port and config, by model name. */
  readonly served: ReadonlyMap<string, Omit<ModelTarget, 'loraName'>>;
  readonly preprocessor: Preprocessor;
  /** The `created` of query-only answers: when the server started, in seconds. */
  readonly createdSec: number;
  relay(): RelayEnv;
  draining(): boolean;
}

/** The answer's worker headers, with `Connection: close` while draining. */
function answerHeaders(env: CompletionEnv, worker: WorkerRank, prefill: WorkerRank | undefined): Record<string, string> {
  const headers = workerHeaders(worker, prefill);
  if (env.draining()) headers.connection = 'close';
  return headers;
}

function noteWorkers(ctx: RequestContext, worker: WorkerRank, prefill: WorkerRank | undefined): void {
  ctx.log.worker = worker.workerId;
  if (prefill !== undefined) ctx.log.prefillWorker = prefill.workerId;
}

/**
 * Serves one completion (`kind` chat or completion) or query-only routing (`route`) from its body text.
 * @throws KvgateError for the client's errors (JSON, schema, model, hints, prompt) and the port's.
 */
export async function serveCompletion(env: CompletionEnv, ctx: RequestContext, text: string, kind: EndpointKind | 'route'): Promise<void> {
  const body = parseBodyObject(text);
  const endpoint: EndpointKind = kind === 'route' ? (body.messages !== undefined ? 'chat' : 'completion') : kind;
  validateBody(endpoint, body);
  ctx.log.model = body.model as string;
  // `model` may name a LoRA adapter: the request then runs on its base model under that adapter
  // (`nvext.lora_name` is schema-checked to be a string when present).
  const loraHint = (body.nvext as { lora_name?: string } | undefined)?.lora_name;
  const { port, model, loraName } = resolveModel(env.served, body.model as string, loraHint);
  const modelName = model.name;
  // Pins are checked against the configured workers of the model the request resolved to.
  const parsed = parseRoutingHints(body.nvext, ctx.req.headers, model.workers);
  const { queryOnly, tokenData } = parsed;
  const hints = loraName === parsed.hints.loraName ? parsed.hints : { ...parsed.hints, loraName };
  const unavailable = port.unavailable();
  if (unavailable !== undefined) throw unavailable;
  const task = promptTask({ endpoint, body, model: modelName, maxPromptTokens: model.maxPromptTokens, tokenData, loraName });
  const pre = await inSpan('kvgate.preprocess', () => env.preprocessor.run(task), () => ({ 'kvgate.model': modelName }));
  ctx.signal.throwIfAborted();
  ctx.log.promptTokens = pre.tokenIds.length;
  if (pre.stats.cachedTokens > 0) ctx.log.segmentCachedTokens = pre.stats.cachedTokens;
  const forward = withoutNvext(body);
  if (forward === body) rememberJsonText(body, text); // unchanged, it reaches its engine as the client's own text
  const prepared: PreparedRequest = {
    requestId: ctx.requestId,
    model: modelName,
    endpoint,
    body: forward,
    stream: body.stream === true,
    tokenIds: pre.tokenIds,
    blockHashes: pre.blockHashes,
    sequenceHashes: pre.sequenceHashes,
    hashingMs: pre.stats.hashUs / 1000,
    approximate: pre.approximate,
    hints,
    queryOnly: queryOnly || kind === 'route',
    signal: ctx.signal,
    receivedAt: ctx.startedAt,
  };
  if (prepared.queryOnly) {
    const q = await port.query(prepared);
    ctx.signal.throwIfAborted();
    noteWorkers(ctx, q.worker, q.prefillWorker);
    sendQueryAnswer(ctx, kind, prepared, q, model, answerHeaders(env, q.worker, q.prefillWorker), env.createdSec);
    return;
  }
  const routed = await port.route(prepared);
  noteWorkers(ctx, routed.worker, routed.prefillWorker);
  await pipeRouted(ctx, routed, answerHeaders(env, routed.worker, routed.prefillWorker), env.relay());
}
