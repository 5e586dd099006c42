/** kvgate's errors in Anthropic's shape on `/v1/messages`: the `error.type` Anthropic documents for each status. */
import { describe, expect, it } from 'vitest';
import { KvgateError, type KvgateErrorCode } from '../../src/errors/index.js';
import { anthropicErrorFrame, anthropicRefusal } from '../../src/frontend/anthropic-error.js';

function typeOf(code: KvgateErrorCode): unknown {
  const frame = anthropicErrorFrame(new KvgateError(code, 'x'), 'req-1').toString();
  return (JSON.parse(/^data: (.*)$/m.exec(frame)![1]!) as { error: { type: string } }).error.type;
}

describe("Anthropic's error types", () => {
  it('maps each status to its documented type: 504 is timeout_error', () => {
    expect(typeOf('KVG_ERR_INVALID_REQUEST')).toBe('invalid_request_error');
    expect(typeOf('KVG_ERR_TOO_MANY_REQUESTS')).toBe('rate_limit_error');
    expect(typeOf('KVG_ERR_OVERLOADED')).toBe('overloaded_error');
    expect(typeOf('KVG_ERR_REQUEST_TIMEOUT')).toBe('timeout_error');
    expect(typeOf('KVG_ERR_ENGINE_FAILED')).toBe('api_error');
  });
});

const TOO_LONG = /^prompt is too long: (\d+) tokens > (\d+) maximum \(/;

/** An engine's refusal as routing writes it (kvgate's error object with the engine's message), in Anthropic's shape. */
function refused(message: string): { message: string; code: unknown } {
  const own = JSON.stringify({
    error: { message, type: 'invalid_request_error', param: null, code: 'KVG_ERR_ENGINE_REJECTED' },
  });
  const body = JSON.parse(Buffer.from(anthropicRefusal(400, own, 'req-1')).toString('utf8')) as {
    error: { message: string; code: unknown };
  };
  return body.error;
}

describe("a prompt over the limit in Anthropic's words (coding agents match them to offer compaction)", () => {
  it("kvgate's own refusal: the prompt's tokens as counted and the limit, then kvgate's message", () => {
    const counted = new KvgateError('KVG_ERR_PROMPT_TOO_LONG', 'the prompt has 5000 tokens; the limit is 4096', {
      promptTokens: 5000,
      maxPromptTokens: 4096,
    });
    const frame = anthropicErrorFrame(counted, 'req-1').toString();
    const error = (JSON.parse(/^data: (.*)$/m.exec(frame)![1]!) as { error: Record<string, unknown> }).error;
    expect(error).toMatchObject({ type: 'invalid_request_error', code: 'KVG_ERR_PROMPT_TOO_LONG' });
    expect(error.message).toBe(
      'prompt is too long: 5000 tokens > 4096 maximum (the prompt has 5000 tokens; the limit is 4096)',
    );
  });

  it.each([
    [
      "This model's maximum context length is 2048 tokens. However, your request has 3000 input tokens. Please reduce the length of the input messages.",
      3000,
      2048,
    ],
    [
      "This model's maximum context length is 2048 tokens. However, you requested 3016 tokens (3000 in the messages, 16 in the completion). Please reduce the length of the messages or completion.",
      3000,
      2048,
    ],
    [
      "This model's maximum context length is 2048 tokens. However, your messages resulted in 3000 tokens. Please reduce the length of the messages.",
      3000,
      2048,
    ],
    [
      'The decoder prompt (length 3000) is longer than the maximum model length of 2048. Make sure that `max_model_len` is no smaller than the number of text tokens.',
      3000,
      2048,
    ],
    [
      "You passed 3000 input tokens and requested 16 output tokens. However, the model's context length is only 2048 tokens, resulting in a maximum input length of 2032 tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=3000)",
      3000,
      2048,
    ],
    ["The input (3000 tokens) is longer than the model's context length (2048 tokens).", 3000, 2048],
    [
      "This model's maximum context length is 2048 tokens. However, you requested 0 output tokens and your prompt contains at least 3000 input tokens, for a total of at least 3000 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=3000)",
      3000,
      2048,
    ],
    ["Input length (3000) exceeds model's maximum context length (2048).", 3000, 2048],
    [
      'The prompt (total length 3000) is too long to fit into the model (context length 2048). Make sure that `max_model_len` is no smaller than the number of text tokens plus multimodal tokens.',
      3000,
      2048,
    ],
    [
      "This model's maximum context length is 2048 tokens. However, you requested 3000 tokens in the messages, Please reduce the length of the messages.",
      3000,
      2048,
    ],
    [
      "Requested token count exceeds the model's maximum context length of 2048 tokens. You requested a total of 3016 tokens: 3000 tokens from the input messages and 16 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
      3000,
      2048,
    ],
  ])("an engine's context-length refusal, with the engine's numbers: %s", (said, prompt, max) => {
    const error = refused(said);
    expect(error.code).toBe('KVG_ERR_ENGINE_REJECTED');
    expect(error.message).toBe(`prompt is too long: ${prompt} tokens > ${max} maximum (${said})`);
    expect(TOO_LONG.exec(error.message)?.slice(1)).toEqual([String(prompt), String(max)]);
  });

  it('leaves other refusals in their own words: numbers that say no overflow, or none to read, a bad field', () => {
    for (const said of [
      // SGLang refuses a sum equal to the context, which `A + B > C` would misstate.
      "Requested token count exceeds the model's maximum context length of 2048 tokens. You requested a total of 2048 tokens: 2000 tokens from the input messages and 48 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
      "You passed 90000 input characters and requested 1000 output tokens. However, the model's context length is only 2048 tokens, resulting in a maximum input length of 1048 tokens (at most 8384 characters). Please reduce the length of the input prompt. (parameter=input_text, value=90000)",
      'max_tokens must be at least 1, got -563072.',
      'temperature must be non-negative',
    ]) {
      expect(refused(said).message).toBe(said);
    }
    const other = new KvgateError('KVG_ERR_INVALID_REQUEST', 'max_tokens is required', { param: 'max_tokens' });
    expect(anthropicErrorFrame(other, 'req-1').toString()).toContain('"message":"max_tokens is required"');
  });
});

const NO_ROOM =
  /^input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+), decrease input length or `max_tokens` and try again \(/;

describe("a prompt that fits but leaves no room for max_tokens, in Anthropic's words (coding agents retry with less)", () => {
  it.each([
    // vLLM's renderer (current).
    "You passed 2000 input tokens and requested 1000 output tokens. However, the model's context length is only 2048 tokens, resulting in a maximum input length of 1048 tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=2000)",
    // vLLM's front end before its renderer, with and without the parameter its validation error appends.
    "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 2048 tokens and your request has 2000 input tokens (1000 > 2048 - 2000). (parameter=max_tokens, value=1000)",
    "'max_tokens' or 'max_completion_tokens' is too large: 1000. This model's maximum context length is 2048 tokens and your request has 2000 input tokens (1000 > 2048 - 2000).",
    // Older vLLM (the mocker's until it took the current words).
    "This model's maximum context length is 2048 tokens. However, you requested 3000 tokens (2000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    // vLLM's front end counting the prompt only up to where it passed the context.
    "This model's maximum context length is 2048 tokens. However, you requested 1000 output tokens and your prompt contains at least 2000 input tokens, for a total of at least 3000 tokens. Please reduce the length of the input prompt or the number of requested output tokens. (parameter=input_tokens, value=2000)",
    // SGLang.
    "Requested token count exceeds the model's maximum context length of 2048 tokens. You requested a total of 3000 tokens: 2000 tokens from the input messages and 1000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
  ])("the engine's numbers, then its words: %s", (said) => {
    const error = refused(said);
    expect(error.code).toBe('KVG_ERR_ENGINE_REJECTED');
    expect(error.message).toBe(
      `input length and \`max_tokens\` exceed context limit: 2000 + 1000 > 2048, decrease input length or \`max_tokens\` and try again (${said})`,
    );
    expect(NO_ROOM.exec(error.message)?.slice(1)).toEqual(['2000', '1000', '2048']);
  });
});
