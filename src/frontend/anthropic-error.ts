/**
 * Anthropic's conventions on `/v1/messages`: the API key may come as `x-api-key` (what Anthropic's clients send
 * from ANTHROPIC_API_KEY) instead of `Authorization: Bearer`; errors are in Anthropic's shape,
 * `{"type":"error","error":{"type","message"},"request_id"}` with the `error.type` Anthropic uses for the HTTP
 * status, so Anthropic's clients (Claude Code, the SDKs) read them. The
 * kvgate code and the field are kept alongside (`error.code`, `error.param`), as on the OpenAI endpoints; the
 * message is the same public one (no engine address or engine text).
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

function bodyOf(status: number, e: OpenAiError, requestId: string): Record<string, unknown> {
  return {
    type: 'error',
    error: { type: anthropicErrorType(status), message: e.message, code: e.code, param: e.param },
    request_id: requestId,
  };
}

/** A kvgate error as Anthropic's error body. */
function anthropicErrorBody(err: KvgateError, requestId: string): Record<string, unknown> {
  const param = typeof err.detail?.param === 'string' ? err.detail.param : null;
  return bodyOf(err.statusCode, { message: err.message, param, code: err.code }, requestId);
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
