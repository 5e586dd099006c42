/**
 * What a tokenizer endpoint's body asks (`POST /tokenize`, `POST /detokenize`, `POST /v1/messages/count_tokens`):
 * the model whose tokenizer answers, and the task to run, a prompt to ids or ids back to text. The same steps, in
 * the same order, run on the main thread for a small body (tokenize.ts) and on a preprocessing thread for one the
 * preprocessor offloads (preprocess/tokenizer-task.ts), over the served models or the snapshot sent along, so both
 * answer the same errors.
 *
 * Contracts: the ids are the model's own or none. A model configured without its tokenizer is refused
 * (KVG_ERR_TOKENIZER_UNAVAILABLE: the fallback's ids are not the model's). No prompt limit applies (vLLM's
 * `/tokenize` has none: a client measures a prompt before sending it); the body's size limit does.
 */
import type { ServedModelConfig } from './inline-system-modes.js';
import { KvgateError } from '../errors/index.js';
import { agentChatTask, checkAgentBody } from './agent-task.js';
import { resolveModel, type Served } from './model-lookup.js';
import type { DecodeTask, PreprocessTask } from './preprocess/protocol.js';
import { promptTask } from './prompt-task.js';
import { validateBody } from './schemas.js';

/** The endpoints kvgate answers with a model's tokenizer, no engine asked. */
export type TokenizerEndpoint = 'tokenize' | 'detokenize' | 'count_tokens';

/** What a tokenizer endpoint's body asks: a prompt's ids (`tokenize`, `count_tokens`) or ids' text (`detokenize`). */
export type TokenizerJob =
  | { readonly kind: 'ids'; readonly model: string; readonly task: PreprocessTask }
  | { readonly kind: 'text'; readonly model: string; readonly task: DecodeTask };

export interface TokenizerJobOptions {
  readonly maxMessages: number;
  /** Whether a configured model has its own tokenizer (`tokenizer` other than `none`). */
  hasTokenizer(model: string): boolean;
  /** Told the model the body names as soon as it is read (the access log's `model`, also for a refused request). */
  noteModel(name: string): void;
  /** The body's UTF-8 JSON: a count_tokens body's tool_use inputs keep their number literals (agent-task.ts). */
  readonly source?: Uint8Array | undefined;
}

/** The prompt limit of a task that only counts: none (module comment). */
const UNBOUNDED = Number.MAX_SAFE_INTEGER;

function invalid(param: string, message: string): KvgateError {
  return new KvgateError('KVG_ERR_INVALID_REQUEST', `${param} ${message}`, { param });
}

/**
 * The model a body names (vLLM's `model` is optional: with one model served, that one), with its own tokenizer.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_MODEL_NOT_FOUND, KVG_ERR_TOKENIZER_UNAVAILABLE.
 */
function tokenizerTarget<S extends Served>(
  served: ReadonlyMap<string, S>,
  o: TokenizerJobOptions,
  named: unknown,
): S & { loraName: string | undefined } {
  let name = named;
  if (name === undefined || name === null) {
    if (served.size !== 1) throw invalid('model', 'is required: kvgate serves several models');
    name = [...served.keys()][0];
  }
  if (typeof name !== 'string' || name === '') throw invalid('model', 'must be a model name (a string)');
  o.noteModel(name);
  const target = resolveModel(served, name, undefined);
  if (!o.hasTokenizer(target.model.name)) {
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
 * (`prompt`, a string), checked as the chat or completion it stands for; `source`, the body's JSON, gives its tools'
 * number literals (common's `pythonToolsJson`).
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_TOO_MANY_MESSAGES, KVG_ERR_UNSUPPORTED_CONTENT.
 */
function tokenizeTask(
  body: Record<string, unknown>,
  target: { readonly model: { readonly name: string }; readonly loraName: string | undefined },
  maxMessages: number,
  source: Uint8Array | undefined,
): PreprocessTask {
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
  return promptTask({
    endpoint,
    body: shaped,
    model,
    maxPromptTokens: UNBOUNDED,
    tokenData: undefined,
    loraName,
    source,
  });
}

/**
 * What the parsed `body` of `endpoint` asks of which model's tokenizer.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST, KVG_ERR_TOO_MANY_MESSAGES, KVG_ERR_MODEL_NOT_FOUND,
 *   KVG_ERR_TOKENIZER_UNAVAILABLE, and the agent conversion's errors (count_tokens).
 */
export function tokenizerJob(
  endpoint: TokenizerEndpoint,
  body: Record<string, unknown>,
  served: ReadonlyMap<string, Served & { readonly model: Pick<ServedModelConfig, 'anthropicInlineSystem'> }>,
  o: TokenizerJobOptions,
): TokenizerJob {
  if (endpoint === 'tokenize') {
    const target = tokenizerTarget(served, o, body.model);
    return { kind: 'ids', model: target.model.name, task: tokenizeTask(body, target, o.maxMessages, o.source) };
  }
  if (endpoint === 'detokenize') {
    const target = tokenizerTarget(served, o, body.model);
    const tokens = body.tokens;
    if (!Array.isArray(tokens)) throw invalid('tokens', 'is required (a list of token ids)');
    const bad = tokens.findIndex((t) => typeof t !== 'number' || !Number.isInteger(t) || t < 0);
    if (bad >= 0) throw invalid(`tokens[${bad}]`, 'must be a token id (an integer of at least 0)');
    const model = target.model.name;
    return { kind: 'text', model, task: { kind: 'decode', model, tokenIds: tokens as number[] } };
  }
  // count_tokens: the prompt of the Messages request the body would be, rendered as `/v1/messages` renders it.
  checkAgentBody('messages', body, o);
  const target = tokenizerTarget(served, o, body.model);
  // A count takes no `max_tokens` (Anthropic's count_tokens has none), which the conversion requires of a request,
  // and no `output_config`: vLLM's count request has none, so its effort neither reaches the template nor is checked.
  const counted = { ...body, max_tokens: 1, stream: undefined, output_config: undefined };
  const task = agentChatTask({
    api: 'messages',
    body: counted,
    model: target.model.name,
    maxPromptTokens: UNBOUNDED,
    loraName: target.loraName,
    inlineSystem: target.model.anthropicInlineSystem,
    source: o.source,
  });
  return { kind: 'ids', model: target.model.name, task };
}
