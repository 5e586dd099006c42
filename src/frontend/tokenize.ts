/**
 * The endpoints kvgate answers itself with a model's tokenizer, in the shapes clients know from the engines:
 * `POST /tokenize` and `POST /detokenize` (vLLM's requests and answers) and `POST /v1/messages/count_tokens`
 * (Anthropic's). A prompt is rendered and tokenized by the same task routing builds for it (prompt-task.ts,
 * agent-task.ts), on the preprocessor (its pool, or the main thread), so the ids are those a routed request is
 * booked and hashed with. No engine is asked: these answer while every worker is down.
 *
 * Contracts: the ids are the model's own or none. A model configured without its tokenizer answers
 * KVG_ERR_TOKENIZER_UNAVAILABLE (the fallback's ids are not the model's). No prompt limit applies (vLLM's
 * `/tokenize` has none: a client measures a prompt before sending it); the body's size limit does.
 */
import { inSpan } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { agentChatTask, checkAgentBody } from './agent-task.js';
import { bodyText, parseBodyObject } from './body.js';
import { sendJson } from './http-io.js';
import { resolveModel, type ModelTarget } from './model-lookup.js';
import type { PrepareOptions } from './prepare.js';
import type { PreprocessTask } from './preprocess/protocol.js';
import { promptTask } from './prompt-task.js';
import type { RequestContext } from './respond.js';
import { validateBody } from './schemas.js';

/** The prompt limit of a task that only counts: none (module comment). */
const UNBOUNDED = Number.MAX_SAFE_INTEGER;

function invalid(param: string, message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_REQUEST', `${param} ${message}`, { param });
}

/**
 * The model a body names (vLLM's `model` is optional: with one model served, that one), with its own tokenizer.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_MODEL_NOT_FOUND, KVG_ERR_TOKENIZER_UNAVAILABLE.
 */
function tokenizerTarget(env: PrepareOptions, ctx: RequestContext, named: unknown): ModelTarget {
  let name = named;
  if (name === undefined || name === null) {
    if (env.served.size !== 1) throw invalid('model', 'is required: kvgate serves several models');
    name = [...env.served.keys()][0];
  }
  if (typeof name !== 'string' || name === '') throw invalid('model', 'must be a model name (a string)');
  ctx.logFields.model = name;
  const target = resolveModel(env.served, name, undefined);
  if (target.model.tokenizer.kind === 'none') {
    throw new KvgateError(
      'KVG_ERR_TOKENIZER_UNAVAILABLE',
      `model ${target.model.name} is configured without a tokenizer, so kvgate cannot count its tokens; ` +
        "configure the model's tokenizer (tokenizer: a tokenizer.json) or ask its engine",
      { param: 'model', model: target.model.name },
    );
  }
  return target;
}

/** The body's members that are present, in a new object. */
function present(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) out[k] = v;
  return out;
}

/**
 * The task of a `/tokenize` body: vLLM's chat form (`messages`, the template options) or completion form
 * (`prompt`, a string), checked as the chat or completion it stands for.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_TOO_MANY_MESSAGES, KVG_ERR_UNSUPPORTED_CONTENT.
 */
function tokenizeTask(body: Record<string, unknown>, target: ModelTarget, maxMessages: number): PreprocessTask {
  if (body.return_token_strs === true) throw invalid('return_token_strs', 'is not served by kvgate (token ids only)');
  if (body.chat_template !== undefined && body.chat_template !== null) {
    throw invalid('chat_template', "is not taken: kvgate renders with the model's own chat template, as it routes");
  }
  const model = target.model.name;
  const common = { model, add_special_tokens: body.add_special_tokens };
  let endpoint: 'chat' | 'completion';
  let shaped: Record<string, unknown>;
  if (body.messages !== undefined) {
    endpoint = 'chat';
    shaped = present({
      ...common,
      messages: body.messages,
      tools: body.tools ?? undefined,
      chat_template_kwargs: body.chat_template_kwargs ?? undefined,
      add_generation_prompt: body.add_generation_prompt,
      continue_final_message: body.continue_final_message,
    });
  } else {
    if (typeof body.prompt !== 'string') throw invalid('prompt', 'is required (a string), or messages');
    endpoint = 'completion';
    shaped = present({ ...common, prompt: body.prompt });
  }
  validateBody(endpoint, shaped, { maxMessages });
  const loraName = target.loraName;
  return promptTask({ endpoint, body: shaped, model, maxPromptTokens: UNBOUNDED, tokenData: undefined, loraName });
}

function run(env: PrepareOptions, ctx: RequestContext, task: PreprocessTask): Promise<Uint32Array> {
  return inSpan(
    'kvgate.preprocess',
    async () => (await env.preprocessor.run(task, ctx.signal)).tokenIds,
    () => ({
      'kvgate.model': task.model,
    }),
  );
}

/** `POST /tokenize`: `{count, max_model_len, tokens}`; `max_model_len` is the model's `max_prompt_tokens`. */
export async function serveTokenize(env: PrepareOptions, ctx: RequestContext, bytes: Uint8Array): Promise<void> {
  const body = parseBodyObject(bodyText(bytes));
  const target = tokenizerTarget(env, ctx, body.model);
  const ids = await run(env, ctx, tokenizeTask(body, target, env.maxMessages));
  ctx.logFields.promptTokens = ids.length;
  sendJson(ctx.res, 200, {
    count: ids.length,
    max_model_len: target.model.maxPromptTokens,
    tokens: Array.from(ids),
    token_strs: null,
  });
}

/** `POST /detokenize`: `tokens` (ids of the model's vocabulary) back to `{prompt}`, special tokens kept. */
export async function serveDetokenize(env: PrepareOptions, ctx: RequestContext, bytes: Uint8Array): Promise<void> {
  const body = parseBodyObject(bodyText(bytes));
  const target = tokenizerTarget(env, ctx, body.model);
  const tokens = body.tokens;
  if (!Array.isArray(tokens)) throw invalid('tokens', 'is required (a list of token ids)');
  const bad = tokens.findIndex((t) => typeof t !== 'number' || !Number.isInteger(t) || t < 0);
  if (bad >= 0) throw invalid(`tokens[${bad}]`, 'must be a token id (an integer of at least 0)');
  const prompt = await inSpan(
    'kvgate.preprocess',
    () =>
      env.preprocessor.decode({ kind: 'decode', model: target.model.name, tokenIds: tokens as number[] }, ctx.signal),
    () => ({ 'kvgate.model': target.model.name }),
  );
  sendJson(ctx.res, 200, { prompt });
}

/**
 * `POST /v1/messages/count_tokens`: Anthropic's `{input_tokens}`, the prompt tokens of the Messages request the body
 * would be, rendered as `/v1/messages` renders it (its errors in Anthropic's shape: anthropic-error.ts).
 */
export async function serveCountTokens(env: PrepareOptions, ctx: RequestContext, bytes: Uint8Array): Promise<void> {
  const body = parseBodyObject(bodyText(bytes));
  checkAgentBody('messages', body, env);
  const target = tokenizerTarget(env, ctx, body.model);
  // A count takes no `max_tokens` (Anthropic's count_tokens has none), which the conversion requires of a request.
  const counted = { ...body, max_tokens: 1, stream: undefined };
  const task = agentChatTask({
    api: 'messages',
    body: counted,
    model: target.model.name,
    maxPromptTokens: UNBOUNDED,
    loraName: target.loraName,
    inlineSystem: target.model.anthropicInlineSystem,
  });
  const ids = await run(env, ctx, task);
  ctx.logFields.promptTokens = ids.length;
  sendJson(ctx.res, 200, { input_tokens: ids.length });
}
