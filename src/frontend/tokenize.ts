/**
 * The endpoints kvgate answers itself with a model's tokenizer, in the shapes clients know from the engines:
 * `POST /tokenize` and `POST /detokenize` (vLLM's requests and answers) and `POST /v1/messages/count_tokens`
 * (Anthropic's). A prompt is rendered and tokenized by the same task routing builds for it (prompt-task.ts,
 * agent-task.ts), on the preprocessor (its pool, or the main thread), so the ids are those a routed request is
 * booked and hashed with. No engine is asked: these answer while every worker is down.
 *
 * Where the work runs, by the completions' rule (`Preprocessor.offloads`): a small body is parsed and checked here
 * (tokenize-request.ts), its prompt tokenized where the preprocessor puts it; a body the preprocessor offloads is
 * parsed, checked and tokenized wholly on a pool thread (preprocess/tokenizer-task.ts, the same steps), so no
 * request holds the event loop for its size. The answers and errors are the same either way; what the body asks and
 * refuses is tokenize-request.ts's (its contracts: the model's own ids or none, no prompt limit).
 */
import { inSpan } from '../common/index.js';
import { bodyText, parseBodyObject } from './body.js';
import { sendJson } from './http-io.js';
import { modelViews, taskOwner, type PrepareOptions } from './prepare.js';
import type { TokenizerBodyTask, TokenizerOutcome } from './preprocess/protocol.js';
import type { RequestContext } from './respond.js';
import { tokenizerJob, type TokenizerEndpoint } from './tokenize-request.js';

/** A small body, parsed here; its task run where the preprocessor runs it (the pool for a long prompt). */
async function tokenizeHere(
  env: PrepareOptions,
  ctx: RequestContext,
  endpoint: TokenizerEndpoint,
  bytes: Uint8Array,
): Promise<TokenizerOutcome> {
  const body = parseBodyObject(bodyText(bytes));
  let clientModel = '';
  const job = tokenizerJob(endpoint, body, env.served, {
    maxMessages: env.maxMessages,
    source: bytes,
    hasTokenizer: (name) => env.served.get(name)?.model.tokenizer.kind !== 'none',
    noteModel: (name) => {
      clientModel = ctx.logFields.model = name;
    },
  });
  const model = job.model;
  const owner = taskOwner(ctx);
  if (job.kind === 'text')
    return { clientModel, model, text: await env.preprocessor.decode(job.task, ctx.signal, owner) };
  return { clientModel, model, tokenIds: (await env.preprocessor.run(job.task, ctx.signal, owner)).tokenIds };
}

/** What the body asks, answered on the main thread or a pool thread by the completions' rule (module comment). */
function tokenized(
  env: PrepareOptions,
  ctx: RequestContext,
  endpoint: TokenizerEndpoint,
  bytes: Uint8Array,
): Promise<TokenizerOutcome> {
  return inSpan('kvgate.preprocess', async (span) => {
    let out: TokenizerOutcome;
    if (!env.preprocessor.offloads(bytes.length)) out = await tokenizeHere(env, ctx, endpoint, bytes);
    else {
      const models = modelViews(env.served);
      const task: TokenizerBodyTask = { kind: 'tokenizer-body', endpoint, bytes, maxMessages: env.maxMessages, models };
      out = await env.preprocessor.runTokenizerBody(task, ctx.signal, taskOwner(ctx));
      ctx.logFields.model = out.clientModel;
    }
    span.setAttribute('kvgate.model', out.model);
    return out;
  });
}

/** `POST /tokenize`: `{count, max_model_len, tokens}`; `max_model_len` is the model's `max_prompt_tokens`. */
export async function serveTokenize(env: PrepareOptions, ctx: RequestContext, bytes: Uint8Array): Promise<void> {
  const out = await tokenized(env, ctx, 'tokenize', bytes);
  ctx.signal.throwIfAborted();
  const ids = out.tokenIds ?? new Uint32Array(0);
  ctx.logFields.promptTokens = ids.length;
  sendJson(ctx.res, 200, {
    count: ids.length,
    max_model_len: env.served.get(out.model)?.model.maxPromptTokens,
    tokens: Array.from(ids),
    token_strs: null,
  });
}

/** `POST /detokenize`: `tokens` (ids of the model's vocabulary) back to `{prompt}`, special tokens kept. */
export async function serveDetokenize(env: PrepareOptions, ctx: RequestContext, bytes: Uint8Array): Promise<void> {
  const out = await tokenized(env, ctx, 'detokenize', bytes);
  ctx.signal.throwIfAborted();
  sendJson(ctx.res, 200, { prompt: out.text ?? '' });
}

/**
 * `POST /v1/messages/count_tokens`: Anthropic's `{input_tokens}`, the prompt tokens of the Messages request the body
 * would be, rendered as `/v1/messages` renders it (its errors in Anthropic's shape: anthropic-error.ts).
 */
export async function serveCountTokens(env: PrepareOptions, ctx: RequestContext, bytes: Uint8Array): Promise<void> {
  const out = await tokenized(env, ctx, 'count_tokens', bytes);
  ctx.signal.throwIfAborted();
  const count = out.tokenIds?.length ?? 0;
  ctx.logFields.promptTokens = count;
  sendJson(ctx.res, 200, { input_tokens: count });
}
