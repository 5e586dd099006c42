/**
 * Anthropic's conventions on `/v1/messages`: the API key may come as `x-api-key` (what Anthropic's clients send
 * from ANTHROPIC_API_KEY) instead of `Authorization: Bearer`; errors are in Anthropic's shape,
 * `{"type":"error","error":{"type","message"},"request_id"}` with the `error.type` Anthropic uses for the HTTP
 * status, so Anthropic's clients (Claude Code, the SDKs) read them. The
 * kvgate code and the field are kept alongside (`error.code`, `error.param`), as on the OpenAI endpoints; the
 * message is the same public one (no engine address or engine text), except that a prompt over the limit
 * (kvgate's `max_prompt_tokens`, or an engine's context length in the engine's refusal) is told in Anthropic's
 * words first, `prompt is too long: N tokens > M maximum`, which coding agents match to offer compaction.
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
  // Anthropic's own words for a prompt over the limit, which coding agents match (Claude Code offers to compact the
  // conversation), then what kvgate or the engine said.
  const message =
    over === undefined ? e.message : `prompt is too long: ${over.prompt} tokens > ${over.max} maximum (${e.message})`;
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

/**
 * vLLM's wordings of a prompt longer than its context, each with the groups of the prompt's tokens and of the
 * context length: its front end's ("This model's maximum context length is M tokens. However, your request has N
 * input tokens", before 0.9 "... your messages resulted in N tokens" or "... you requested T tokens (N in the
 * messages, C in the completion)", the mocker's) and its engine's ("The decoder prompt (length N) is longer than the
 * maximum model length of M").
 */
const CONTEXT_REFUSALS: readonly (readonly [RegExp, number, number])[] = [
  [/maximum context length is (\d+) tokens\. However, your request has (\d+) input tokens/, 2, 1],
  [/maximum context length is (\d+) tokens\. However, your (?:messages|prompt) resulted in (\d+) tokens/, 2, 1],
  [/maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) in the/, 2, 1],
  [/decoder prompt \(length (\d+)\) is longer than the maximum model length of (\d+)/, 1, 2],
];

/**
 * An engine's refusal of a prompt longer than its context, read from its message; undefined for any other refusal,
 * and for a prompt that fits but leaves no room for the completion asked (not a prompt too long in Anthropic's sense).
 */
function engineContextRefusal(message: string): TokenCounts | undefined {
  for (const [pattern, promptGroup, maxGroup] of CONTEXT_REFUSALS) {
    const m = pattern.exec(message);
    if (m === null) continue;
    const prompt = Number(m[promptGroup]);
    const max = Number(m[maxGroup]);
    return prompt > max ? { prompt, max } : undefined;
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
