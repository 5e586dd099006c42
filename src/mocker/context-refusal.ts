/**
 * A request over the context length, refused in the words and the body of the engine the mocker imitates, so that
 * what reads an engine's refusal (the gateway's Anthropic errors, src/frontend/anthropic-error.ts) is exercised
 * against each engine's current answer:
 *
 * - vLLM (its renderer's token length check, since vllm#36197): one message for a prompt over the context and for
 *   one that leaves less room than `max_tokens`; a validation error on `input_tokens`, whose name and value its
 *   message ends with, answered `{"error": {"message", "type": "BadRequestError", "param": "input_tokens",
 *   "code": 400}}`.
 * - SGLang (its tokenizer manager's request validation): a prompt of the context length or more, then one whose
 *   tokens and `max_tokens` reach it (`>=` both, where vLLM's is `>`), each a ValueError its OpenAI server answers
 *   flat, `{"object": "error", "message", "type": "BadRequestError", "param": null, "code": 400}`, streamed or not.
 *
 * Stated simplification, as the rest of the mocker's validation: a request without `max_tokens` is checked with the
 * mocker's default (`defaultMaxTokens`), where vLLM fills the context and SGLang checks the prompt alone.
 */
import type { EngineDialect } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

/** A refusal answered with `body`, the engine's own error body, at the error's status. */
export class ContextRefusal extends KvgateError {
  readonly body: Readonly<Record<string, unknown>>;

  constructor(message: string, param: string | null, body: Readonly<Record<string, unknown>>) {
    super('KVG_ERR_PROMPT_TOO_LONG', message, { param });
    this.name = 'ContextRefusal';
    this.body = body;
  }
}

/** The refusal of a prompt of `prompt` tokens asking `maxTokens` more, by `engine`; undefined when it fits. */
export function contextRefusal(
  engine: EngineDialect,
  prompt: number,
  maxTokens: number,
  maxModelLen: number,
): ContextRefusal | undefined {
  return engine === 'sglang'
    ? sglangRefusal(prompt, maxTokens, maxModelLen)
    : vllmRefusal(prompt, maxTokens, maxModelLen);
}

function vllmRefusal(prompt: number, maxTokens: number, context: number): ContextRefusal | undefined {
  if (prompt + maxTokens <= context) return undefined;
  const message =
    `You passed ${prompt} input tokens and requested ${maxTokens} output tokens. ` +
    `However, the model's context length is only ${context} tokens, resulting in a maximum input ` +
    `length of ${context - maxTokens} tokens. Please reduce the length of the input prompt. ` +
    `(parameter=input_tokens, value=${prompt})`;
  return new ContextRefusal(message, 'input_tokens', {
    error: { message, type: 'BadRequestError', param: 'input_tokens', code: 400 },
  });
}

function sglangRefusal(prompt: number, maxTokens: number, context: number): ContextRefusal | undefined {
  let message: string;
  if (prompt >= context) {
    message = `The input (${prompt} tokens) is longer than the model's context length (${context} tokens).`;
  } else if (prompt + maxTokens >= context) {
    message =
      `Requested token count exceeds the model's maximum context length of ${context} tokens. ` +
      `You requested a total of ${prompt + maxTokens} tokens: ${prompt} tokens from the input messages and ` +
      `${maxTokens} tokens for the completion. Please reduce the number of tokens in the input messages or the ` +
      'completion to fit within the limit.';
  } else {
    return undefined;
  }
  return new ContextRefusal(message, null, {
    object: 'error',
    message,
    type: 'BadRequestError',
    param: null,
    code: 400,
  });
}
