/**
 * From a completion request's body bytes to the `PreparedRequest` its model's
 * port routes: parsed and checked (request-parse.ts), tokenized and hashed
 * (preprocess/), with the engine's body ready to forward.
 *
 * Where the work runs: a small body on the main thread, its prompt on a pool
 * thread when rendering and tokenizing it costs more than the round trip
 * (preprocessor.ts); a body over `INLINE_MAX_BODY_BYTES` (with a pool) wholly
 * on a pool thread, so no request holds the event loop for its size. Both
 * paths answer the same errors in the same order: the body's own (JSON,
 * schema, limits, model, hints), then the model's availability, then the
 * prompt's (content, template, length, `nvext.token_data`).
 */
import { inSpan, lazyJsonObject, rememberJsonText, withJsonMembers } from '../common/index.js';
import { OTHER_TENANT } from '../config/index.js';
import { bodyText } from './body.js';
import { routingHeadersOf } from './hints.js';
import type { ModelTarget } from './model-lookup.js';
import type { BodyOutcome, ModelView, PreprocessResult } from './preprocess/protocol.js';
import type { Preprocessor } from './preprocess/preprocessor.js';
import { errorOf } from './preprocess/task-handler.js';
import { parseRequestBody, routeRequestBody } from './request-parse.js';
import type { RequestContext } from './respond.js';
import type { EndpointKind, PreparedRequest } from './router-port.js';

export interface PrepareOptions {
  readonly preprocessor: Preprocessor;
  /** Each model's port and config, by model name. */
  readonly served: ReadonlyMap<string, Omit<ModelTarget, 'loraName'>>;
  readonly maxMessages: number;
}

export interface Prepared {
  readonly prepared: PreparedRequest;
  readonly target: ModelTarget;
}

/** The snapshot of the served models a pool thread parses a body against (tokenize.ts sends it too). */
export function modelViews(served: PrepareOptions['served']): ModelView[] {
  return [...served.values()].map(({ model, port }) => ({
    name: model.name,
    loraAdapters: [...model.loraAdapters],
    adapters: [...port.adapters()],
    maxPromptTokens: model.maxPromptTokens,
    anthropicInlineSystem: model.anthropicInlineSystem,
    clientPins: model.clientPins,
    readsTokenIds: port.readsTokenIds !== false,
    workers: model.workers.map((w) => (w.taints !== undefined ? { id: w.id, taints: [...w.taints] } : { id: w.id })),
    ownTokenizer: model.tokenizer.kind !== 'none',
  }));
}

function preprocessSpan<T>(model: string | undefined, run: () => Promise<T>): Promise<T> {
  return inSpan('kvgate.preprocess', run, () => (model !== undefined ? { 'kvgate.model': model } : {}));
}

/** The request as routing takes it, from what either path produced. */
function prepared(
  ctx: RequestContext,
  kind: EndpointKind | 'route',
  endpoint: EndpointKind,
  target: ModelTarget,
  pre: PreprocessResult,
  rest: Pick<PreparedRequest, 'body' | 'stream' | 'hints' | 'queryOnly'>,
): Prepared {
  ctx.logFields.promptTokens = pre.promptTokens;
  if (pre.stats.cachedTokens > 0) ctx.logFields.segmentCachedTokens = pre.stats.cachedTokens;
  if ((pre.stats.reusedTokens ?? 0) > 0) ctx.logFields.conversationReusedTokens = pre.stats.reusedTokens;
  return {
    target,
    prepared: {
      requestId: ctx.requestId,
      model: target.model.name,
      endpoint,
      body: rest.body,
      stream: rest.stream,
      tokenIds: pre.tokenIds,
      promptTokens: pre.promptTokens,
      hashes: pre.hashes,
      hashingMs: pre.stats.hashUs / 1000,
      approximate: pre.approximate,
      hints: rest.hints,
      queryOnly: rest.queryOnly || kind === 'route',
      signal: ctx.signal,
      receivedAt: ctx.startedAt,
    },
  };
}

/**
 * Whose turn a request's preprocessing task takes in its thread's queue (thread-queue.ts): its declared tenant's, else
 * its client's, so the clients of `other` take turns too. The client is the per-client bound's
 * (`limits.client_address`): behind trusted proxies the one their header names, not the proxy, whose requests would
 * otherwise all wait in one line; with that bound off, the connection's address.
 */
export function taskOwner(ctx: RequestContext): string {
  const tenant = ctx.tenant?.hint.tenant;
  return tenant !== undefined && tenant !== OTHER_TENANT
    ? `tenant:${tenant}`
    : `client:${ctx.client ?? ctx.req.socket.remoteAddress}`;
}

/** A small body: parsed on the main thread; its prompt preprocessed where the preprocessor puts it. */
async function prepareHere(
  env: PrepareOptions,
  ctx: RequestContext,
  bytes: Uint8Array,
  kind: EndpointKind | 'route',
): Promise<Prepared> {
  const text = bodyText(bytes);
  const parsed = parseRequestBody(text, kind, env);
  const { body } = parsed;
  ctx.logFields.model = body.model as string;
  const routed = routeRequestBody(parsed, env.served, ctx.req.headers, bytes);
  const unavailable = routed.target.port.unavailable();
  if (unavailable !== undefined) throw unavailable;
  if (!routed.task.ok) throw routed.task.error;
  const task = routed.task.task;
  // The request's signal: its task is dropped while it waits for a thread once the client has left.
  const pre = await preprocessSpan(task.model, () => env.preprocessor.run(task, ctx.signal, taskOwner(ctx)));
  ctx.signal.throwIfAborted();
  let forward = body;
  // Unchanged, it reaches its engine as the client's own text.
  if (routed.forwardFields === undefined) rememberJsonText(body, text);
  else forward = withJsonMembers(body, routed.forwardFields);
  return prepared(ctx, kind, parsed.endpoint, routed.target, pre, {
    body: forward,
    stream: body.stream === true,
    hints: routed.hints,
    queryOnly: routed.queryOnly,
  });
}

/**
 * A large body: everything up to routing on a pool thread, which sends back where its members lie and their outline;
 * the engine's body is written from the client's bytes (common's json-text.ts), never decoded on this thread.
 */
async function prepareOffThread(
  env: PrepareOptions,
  ctx: RequestContext,
  bytes: Uint8Array,
  kind: EndpointKind | 'route',
): Promise<Prepared> {
  const out: BodyOutcome = await preprocessSpan(undefined, () =>
    env.preprocessor.runBody(
      {
        kind: 'body',
        endpoint: kind,
        bytes,
        maxMessages: env.maxMessages,
        headers: routingHeadersOf(ctx.req.headers),
        models: modelViews(env.served),
      },
      ctx.signal,
      taskOwner(ctx),
    ),
  );
  ctx.signal.throwIfAborted();
  ctx.logFields.model = out.clientModel;
  const served = env.served.get(out.model);
  // The snapshot named only served models, and the set of models is fixed for the gateway's life.
  if (served === undefined)
    throw new Error(`a preprocessing thread resolved the request to model ${out.model}, which is not served`);
  const unavailable = served.port.unavailable();
  if (unavailable !== undefined) throw unavailable;
  if (out.result === undefined)
    throw errorOf(out.promptError ?? { code: 'KVG_ERR_INTERNAL', message: 'preprocessing returned no result' });
  const f = out.forward;
  // The client's bytes: moved back by the thread when they were moved to it, else never given away; a query-only
  // request's may stay on the thread (its body is never forwarded), and then its light members are its body.
  const client = f.kept === true ? { ...f.light } : lazyJsonObject(f.bytes ?? bytes, f.members, f.light, f.outlines);
  const body = f.fields === undefined ? client : withJsonMembers(client, f.fields);
  // The allowed workers crossed as an array (body-task.ts); routing reads them as the set hints.ts makes.
  const allowed = out.hints.allowedWorkerIds;
  const hints =
    allowed === undefined || allowed instanceof Set ? out.hints : { ...out.hints, allowedWorkerIds: new Set(allowed) };
  return prepared(ctx, kind, out.endpoint, { ...served, loraName: out.loraName }, out.result, {
    body,
    stream: out.stream,
    hints,
    queryOnly: out.queryOnly,
  });
}

/**
 * The request a body asks for, ready to route.
 * @throws KvgateError: the body's, the model's availability, the prompt's (module comment).
 */
export function prepareRequest(
  env: PrepareOptions,
  ctx: RequestContext,
  bytes: Uint8Array,
  kind: EndpointKind | 'route',
): Promise<Prepared> {
  return env.preprocessor.offloads(bytes.length)
    ? prepareOffThread(env, ctx, bytes, kind)
    : prepareHere(env, ctx, bytes, kind);
}
