/**
 * Anthropic's conventions on `/v1/messages`: the API key may come as `x-api-key` (what Anthropic's clients send
 * from ANTHROPIC_API_KEY) instead of `Authorization: Bearer`; errors are in Anthropic's shape,
 * `{"type":"error","error":{"type","message"},"request_id"}` with the `error.type` Anthropic uses for the HTTP
 * status, so Anthropic's clients (Claude Code, the SDKs) read them. The
 * kvgate code and the field are kept alongside (`error.code`, `error.param`), as on the OpenAI endpoints; the
 * message is the same public one (no engine address or engine text), except that a prompt over the limit
 * (kvgate's `max_prompt_tokens`, or an engine's context length in the engine's refusal) is told in Anthropic's
 * words first, `prompt is too long: N tokens > M maximum`, which coding agents match to offer compaction, and so is
 * an engine's refusal of a prompt that fits but leaves no room for `max_tokens`: `input length and \`max_tokens\`
 * exceed context limit: A + B > C, ...`, which they match to retry with a smaller `max_tokens`.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { KvgateError } from '../errors/index.js';
import { RETRY_AFTER_STATUSES, sendJson } from './http-io.js';

/** The messages route, whose errors take Anthropic's shape. */
export const MESSAGES_ROUTE = '/v1/messages';
/** Anthropic's token counting route, answered by kvgate (tokenize.ts), with the same conventions. */
export const COUNT_TOKENS_ROUTE = '/v1/messages/count_tokens';

/** Whether `route` speaks Anthropic's conventions (its key header, its error shape). */
export function isAnthropicRoute(route: string): boolean {
  return route === MESSAGES_ROUTE || route === COUNT_TOKENS_ROUTE;
}

const TYPES: Readonly<Record<number, string>> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  503: 'overloaded_error',
  504: 'timeout_error',
  529: 'overloaded_error',
};

/** Anthropic's error type for an HTTP status. */
function anthropicErrorType(status: number): string {
  return TYPES[status] ?? (status < 500 ? 'invalid_request_error' : 'api_error');
}

interface OpenAiError {
  readonly message: string;
  readonly param: string | null;
  readonly code: string | null;
}

function bodyOf(status: number, e: OpenAiError, requestId: string, counts?: TokenCounts): Record<string, unknown> {
  const over = counts ?? (e.code === 'KVG_ERR_ENGINE_REJECTED' ? engineContextRefusal(e.message) : undefined);
  // Anthropic's own words, which coding agents match (Claude Code offers to compact the conversation, or retries
  // with a smaller max_tokens), then what kvgate or the engine said.
  const message = over === undefined ? e.message : `${anthropicWords(over)} (${e.message})`;
  return {
    type: 'error',
    error: { type: anthropicErrorType(status), message, code: e.code, param: e.param },
    request_id: requestId,
  };
}

/** A prompt's tokens and the limit it is over. */
interface TokenCounts {
  readonly prompt: number;
  readonly max: number;
}

/** A prompt that fits the context but leaves less room than the completion asked (`max_tokens`). */
interface NoRoom {
  readonly input: number;
  readonly maxTokens: number;
  readonly context: number;
}

/** Anthropic's message for each: its 400 for a prompt too long, and for input plus max_tokens over the context. */
function anthropicWords(over: TokenCounts | NoRoom): string {
  if ('prompt' in over) return `prompt is too long: ${over.prompt} tokens > ${over.max} maximum`;
  return (
    `input length and \`max_tokens\` exceed context limit: ${over.input} + ${over.maxTokens} > ${over.context}, ` +
    'decrease input length or `max_tokens` and try again'
  );
}

/**
 * An engine's wording as a pattern: the text as the engine writes it, `{input}` the prompt's tokens, `{context}` the
 * context length, `{output}` the completion asked (named groups), `{n}` a number not read.
 */
function wording(...parts: string[]): RegExp {
  const literal = parts.join('').replace(/[.*+?^$()|[\]\\]/g, '\\$&');
  return new RegExp(
    literal.replace(/\{(input|output|context|n)\}/g, (_, name: string) => (name === 'n' ? '\\d+' : `(?<${name}>\\d+)`)),
  );
}

/**
 * Engines' wordings of a request over the context. vLLM's front end, newest first: its renderer's (both cases; the
 * mocker's), then "... your request has A input tokens" (a prompt too long) and "'max_tokens' or
 * 'max_completion_tokens' is too large: B ..." (no room), before those "... your messages resulted in A tokens", "...
 * you requested A tokens in the messages" and "... you requested T tokens (A in the messages, B in the completion)"
 * (both cases), "... you requested B output tokens and your prompt contains at least A input tokens" (both cases)
 * and "Input length (A) exceeds model's maximum context length (C)"; vLLM's engine's two; SGLang's two.
 */
const CONTEXT_REFUSALS: readonly RegExp[] = [
  wording(
    'You passed {input} input tokens and requested {output} output tokens. ',
    "However, the model's context length is only {context} tokens",
  ),
  wording("This model's maximum context length is {context} tokens. However, your request has {input} input tokens"),
  // The prompt's tokens counted up to where they passed the context ("at least A"), with the completion asked.
  wording(
    "This model's maximum context length is {context} tokens. ",
    'However, you requested {output} output tokens and your prompt contains at least {input} input tokens',
  ),
  wording("Input length ({input}) exceeds model's maximum context length ({context})"),
  wording(
    "'max_tokens' or 'max_completion_tokens' is too large: {output}. ",
    "This model's maximum context length is {context} tokens and your request has {input} input tokens",
  ),
  wording("This model's maximum context length is {context} tokens. However, your messages resulted in {input} tokens"),
  wording("This model's maximum context length is {context} tokens. However, your prompt resulted in {input} tokens"),
  wording(
    "This model's maximum context length is {context} tokens. However, you requested {input} tokens in the messages",
  ),
  wording(
    "This model's maximum context length is {context} tokens. ",
    'However, you requested {n} tokens ({input} in the messages, {output} in the completion)',
  ),
  wording('The decoder prompt (length {input}) is longer than the maximum model length of {context}'),
  // Its engine's, for a multimodal prompt (text and image tokens together).
  wording('The prompt (total length {input}) is too long to fit into the model (context length {context})'),
  wording("The input ({input} tokens) is longer than the model's context length ({context} tokens)"),
  wording(
    "Requested token count exceeds the model's maximum context length of {context} tokens. ",
    'You requested a total of {n} tokens: {input} tokens from the input messages and {output} tokens for the completion',
  ),
];

/**
 * An engine's refusal of a request over its context, read from its message: a prompt longer than the context, or
 * one that fits but whose tokens and completion asked add up to more; undefined for any other refusal, and where
 * the numbers say neither (SGLang refuses a sum equal to the context, which Anthropic's `A + B > C` would misstate).
 */
function engineContextRefusal(message: string): TokenCounts | NoRoom | undefined {
  for (const pattern of CONTEXT_REFUSALS) {
    const said = pattern.exec(message)?.groups;
    if (said === undefined) continue;
    const input = Number(said.input);
    const context = Number(said.context);
    if (input > context) return { prompt: input, max: context };
    const maxTokens = said.output === undefined ? undefined : Number(said.output);
    return maxTokens !== undefined && input + maxTokens > context ? { input, maxTokens, context } : undefined;
  }
  return undefined;
}

/** A kvgate error as Anthropic's error body. */
function anthropicErrorBody(err: KvgateError, requestId: string): Record<string, unknown> {
  const param = typeof err.detail?.param === 'string' ? err.detail.param : null;
  const { promptTokens, maxPromptTokens } = err.detail ?? {};
  const counts =
    err.code === 'KVG_ERR_PROMPT_TOO_LONG' && typeof promptTokens === 'number' && typeof maxPromptTokens === 'number'
      ? { prompt: promptTokens, max: maxPromptTokens }
      : undefined;
  return bodyOf(err.statusCode, { message: err.message, param, code: err.code }, requestId, counts);
}

/** Sends `err` in Anthropic's shape (with `Retry-After` on 429, 503 and 529, as `sendError` does). */
export function sendAnthropicError(
  res: ServerResponse,
  err: KvgateError,
  requestId: string,
  retryAfterSeconds: number,
  headers: Record<string, string>,
): void {
  const h = { ...headers };
  if (RETRY_AFTER_STATUSES.has(err.statusCode)) h['retry-after'] = String(retryAfterSeconds);
  sendJson(res, err.statusCode, anthropicErrorBody(err, requestId), h);
}

/** The event that ends an Anthropic stream with an error. */
export function anthropicErrorFrame(err: KvgateError, requestId: string): Buffer {
  return Buffer.from(`event: error\ndata: ${JSON.stringify(anthropicErrorBody(err, requestId))}\n\n`);
}

/**
 * An engine's refusal (a 4xx whose body routing wrote as kvgate's OpenAI error object) in Anthropic's shape; the
 * bytes unchanged when they are not such an object.
 */
export function anthropicRefusal(status: number, bytes: Uint8Array | string, requestId: string): Uint8Array | string {
  let parsed: unknown;
  try {
    parsed = JSON.parse(typeof bytes === 'string' ? bytes : Buffer.from(bytes).toString('utf8'));
  } catch {
    return bytes;
  }
  const e = (parsed as { error?: unknown } | null)?.error as Partial<OpenAiError> | undefined;
  if (typeof e !== 'object' || e === null || typeof e.message !== 'string') return bytes;
  const error = { message: e.message, param: e.param ?? null, code: e.code ?? null };
  return Buffer.from(JSON.stringify(bodyOf(status, error, requestId)));
}

/** The credential to check: the Authorization header, or on Anthropic's routes without one, `x-api-key` as a bearer token. */
export function credentialOf(route: string, headers: IncomingHttpHeaders): string | undefined {
  if (headers.authorization !== undefined || !isAnthropicRoute(route)) return headers.authorization;
  const key = headers['x-api-key'];
  return typeof key === 'string' ? `Bearer ${key}` : undefined;
}
