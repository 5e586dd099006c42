/**
 * Maps transport failures to KvgateError codes by the phase the request had
 * reached, because the phase decides what a caller may do next:
 *
 *   queued ──(handed to a socket)──> sent ──(status line + headers)──> body ──> done
 *
 * - anything failing while `queued` never wrote a byte: KVG_ERR_ENGINE_UNREACHABLE,
 *   retryable (refused, DNS, connect timeout, pool shut down);
 * - `sent` failures may have started work on the engine: not retryable
 *   (KVG_ERR_ENGINE_DISCONNECTED, KVG_ERR_ENGINE_HEADERS_TIMEOUT);
 * - `body` failures broke a response mid-way (KVG_ERR_ENGINE_STREAM_BROKEN,
 *   KVG_ERR_ENGINE_BODY_TIMEOUT);
 * - all of these are migratable: kvgate may resume the leg on another worker
 *   (`isMigratable`; the `retryable` and `migratable` columns of ERROR_CODES);
 * - the caller's AbortSignal always maps to KVG_ERR_CLIENT_ABORTED.
 *
 * Upstream HTTP errors are `EngineHttpError`s: a 4xx keeps the engine's status
 * (the client sent something the engine refused), a 5xx becomes 502.
 *
 * A 2xx that is not the answer asked for is KVG_ERR_ENGINE_BAD_RESPONSE with a
 * `detail.violation` naming the breach (`ProtocolViolation`), and a stream cut
 * inside an event is KVG_ERR_ENGINE_STREAM_BROKEN with `violation:
 * 'truncated_event'`; routing counts both by that name.
 *
 * Messages name no engine URL (it is in `detail.worker`, for the log); the
 * gateway shows clients none of these messages (src/frontend/public-error.ts),
 * and of an engine's 4xx only its message, bounded and without addresses
 * (refusal.ts).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { ERROR_CODES, KvgateError, isKvgateError } from '../errors/index.js';
import { EngineStreamError, messageOf, type EngineRefusal } from './refusal.js';

/** How far a request got before it failed. */
export type DispatchPhase = 'queued' | 'sent' | 'body';

export interface ErrorContext {
  worker: string;
  path: string;
}

const CONNECT_ERROR_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENETDOWN',
  'EADDRNOTAVAIL',
  'UND_ERR_CONNECT_TIMEOUT',
]);

function errorCode(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** Converts whatever undici or the socket raised into a KvgateError (KvgateErrors pass through unchanged). */
export function transportError(err: unknown, phase: DispatchPhase, ctx: ErrorContext): KvgateError {
  if (isKvgateError(err)) return err;
  const code = errorCode(err);
  const message = err instanceof Error ? err.message : String(err);
  const detail = { worker: ctx.worker, path: ctx.path, phase, cause: code ?? message };
  const options = { cause: err };
  if (phase === 'queued') {
    const what = code !== undefined && CONNECT_ERROR_CODES.has(code) ? 'cannot connect to' : 'could not send to';
    return new KvgateError(
      'KVG_ERR_ENGINE_UNREACHABLE',
      `${what} the engine (${code ?? 'send failed'})`,
      detail,
      options,
    );
  }
  if (code === 'UND_ERR_HEADERS_TIMEOUT') {
    return new KvgateError(
      'KVG_ERR_ENGINE_HEADERS_TIMEOUT',
      `the engine sent no response headers in time (${ctx.path})`,
      detail,
      options,
    );
  }
  if (code === 'UND_ERR_BODY_TIMEOUT') {
    return new KvgateError(
      'KVG_ERR_ENGINE_BODY_TIMEOUT',
      `the engine stalled mid-response (${ctx.path})`,
      detail,
      options,
    );
  }
  if (code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') {
    return new KvgateError(
      'KVG_ERR_ENGINE_BAD_RESPONSE',
      `the engine's response is too large (${ctx.path})`,
      { ...detail, violation: 'too_large' },
      options,
    );
  }
  if (phase === 'sent') {
    return new KvgateError(
      'KVG_ERR_ENGINE_DISCONNECTED',
      `the engine dropped the connection before responding (${code ?? 'closed'})`,
      detail,
      options,
    );
  }
  return new KvgateError(
    'KVG_ERR_ENGINE_STREAM_BROKEN',
    `the engine's response broke mid-way (${code ?? 'closed'})`,
    detail,
    options,
  );
}

export function clientAbortedError(ctx: ErrorContext, reason: unknown): KvgateError {
  return new KvgateError(
    'KVG_ERR_CLIENT_ABORTED',
    'the request to the engine was aborted by the client',
    { worker: ctx.worker, path: ctx.path },
    { cause: reason },
  );
}

/**
 * How an engine broke the protocol (`detail.violation` of KVG_ERR_ENGINE_BAD_RESPONSE, and of the
 * KVG_ERR_ENGINE_STREAM_BROKEN of a stream cut inside an event or, for the agent APIs, before its final event);
 * routing counts them by this name.
 */
export type ProtocolViolation =
  | 'content_type'
  | 'content_encoding'
  | 'redirect'
  | 'not_json'
  | 'too_large'
  | 'event_too_large'
  | 'no_final_status'
  | 'truncated_event'
  | 'unfinished';

export function badResponseError(
  ctx: ErrorContext,
  violation: ProtocolViolation,
  why: string,
  extra: Record<string, unknown> = {},
): KvgateError {
  return new KvgateError('KVG_ERR_ENGINE_BAD_RESPONSE', `the engine broke the protocol on ${ctx.path}: ${why}`, {
    worker: ctx.worker,
    path: ctx.path,
    violation,
    ...extra,
  });
}

/** The media type of a Content-Type header: lower-cased, without parameters; '' when there is none. */
function mediaType(header: string | string[] | undefined): string {
  const value = Array.isArray(header) ? header[0] : header;
  if (value === undefined) return '';
  const semi = value.indexOf(';');
  return (semi === -1 ? value : value.slice(0, semi)).trim().toLowerCase();
}

/**
 * A 2xx whose content type is not the one asked for, or undefined when it is: a stream must be
 * `text/event-stream` (as EventSource requires), a JSON answer `application/json` or a `+json` type. An
 * HTML page from a proxy or load balancer in front of the engine is the usual culprit, so nothing of the
 * body is read and the failure is migratable (`detail.migratable`): no byte reached the client, and
 * another worker may answer; it counts against the worker like a 502.
 */
export function contentTypeError(
  ctx: ErrorContext,
  stream: boolean,
  header: string | string[] | undefined,
): KvgateError | undefined {
  const type = mediaType(header);
  if (stream ? type === 'text/event-stream' : type === 'application/json' || type.endsWith('+json')) return undefined;
  const asked = stream ? 'an SSE stream (text/event-stream)' : 'JSON';
  const got = type === '' ? 'no content type' : type;
  return badResponseError(ctx, 'content_type', `${asked} was requested but the engine answered 2xx with ${got}`, {
    contentType: type,
    migratable: true,
  });
}

/**
 * A 2xx whose body is compressed (a content coding other than identity), or undefined when it is not. kvgate asks
 * for identity (`accept-encoding`), but an engine or a proxy in front of it that compresses anyway sends bytes that
 * are neither SSE nor JSON: refused at the headers as `contentTypeError` refuses a wrong type (nothing read, no byte
 * to the client, migratable, counted against the worker) instead of failing later as a cut stream or not-JSON.
 */
export function contentEncodingError(
  ctx: ErrorContext,
  header: string | string[] | undefined,
): KvgateError | undefined {
  const value = (Array.isArray(header) ? header.join(',') : (header ?? '')).trim().toLowerCase();
  if (value.split(',').every((c) => c.trim() === '' || c.trim() === 'identity')) return undefined;
  return badResponseError(ctx, 'content_encoding', `the engine answered with a compressed body (${value})`, {
    contentEncoding: value,
    migratable: true,
  });
}

const VIOLATIONS: ReadonlySet<string> = new Set<ProtocolViolation>([
  'content_type',
  'content_encoding',
  'redirect',
  'not_json',
  'too_large',
  'event_too_large',
  'no_final_status',
  'truncated_event',
  'unfinished',
]);

/** How the engine broke the protocol, when `err` says it did (its `detail.violation`); undefined for any other failure. */
export function protocolViolationOf(err: unknown): ProtocolViolation | undefined {
  if (!isKvgateError(err, 'KVG_ERR_ENGINE_BAD_RESPONSE') && !isKvgateError(err, 'KVG_ERR_ENGINE_STREAM_BROKEN'))
    return undefined;
  const v = err.detail?.['violation'];
  return typeof v === 'string' && VIOLATIONS.has(v) ? (v as ProtocolViolation) : undefined;
}

/** The body ended inside an event, before `[DONE]`: the partial event was dropped, and the stream is broken. */
export function cutEventError(ctx: ErrorContext, discardedBytes: number): KvgateError {
  return new KvgateError(
    'KVG_ERR_ENGINE_STREAM_BROKEN',
    `the engine's stream ended inside an event, before [DONE] (${discardedBytes} bytes of it dropped)`,
    { worker: ctx.worker, path: ctx.path, phase: 'body', violation: 'truncated_event', discardedBytes },
  );
}

/**
 * An agent API's stream (Anthropic Messages, OpenAI Responses) whose body ended cleanly before the event that ends
 * its answer (`message_stop`, `response.completed`): the end of the answer was lost, as a chat stream's without
 * `[DONE]` is, so the client must be told rather than see a complete-looking answer. `last` is the last event's type.
 */
export function unfinishedStreamError(worker: string, path: string, last: string | undefined): KvgateError {
  return new KvgateError(
    'KVG_ERR_ENGINE_STREAM_BROKEN',
    `the engine's stream ended before its final event (the last was ${last ?? 'none'})`,
    { worker, path, phase: 'body', violation: 'unfinished', lastEvent: last ?? null },
  );
}

/**
 * An event of the engine's stream whose data is neither JSON nor `[DONE]` (a broken engine, or a proxy's page inside
 * the stream): not passed on, since a client cannot read it and it may name the engine's internals. Migratable: the
 * leg goes on elsewhere from the events before it. `data`'s start is kept for the log.
 */
export function malformedEventError(worker: string, path: string, data: string): KvgateError {
  return new KvgateError(
    'KVG_ERR_ENGINE_BAD_RESPONSE',
    `the engine's stream sent an event that is not JSON (${path})`,
    {
      worker,
      path,
      phase: 'body',
      violation: 'not_json',
      dataPrefix: data.slice(0, 200),
      migratable: true,
    },
  );
}

/**
 * The engine answered with an HTTP error. `statusCode` is the engine's own
 * status for a 4xx and 502 for a 5xx. `upstreamJson` is the parsed body when
 * it was JSON. A client never sees this error's message nor the engine's body
 * as it came: a 4xx reaches it as `refusalBody(err.refusal, ...)` (refusal.ts),
 * a 5xx as kvgate's fixed sentence (src/frontend/public-error.ts).
 */
export class EngineHttpError extends KvgateError {
  override readonly statusCode: number;
  readonly upstreamStatus: number;
  readonly upstreamHeaders: IncomingHttpHeaders;
  /** The error body as received (truncated at the client's `maxErrorBodyBytes`). */
  readonly upstreamBody: Uint8Array;
  readonly upstreamJson: unknown;
  readonly #text: string;
  readonly #worker: string;

  constructor(ctx: ErrorContext, status: number, headers: IncomingHttpHeaders, body: Uint8Array, truncated: boolean) {
    const code = status < 500 ? 'KVG_ERR_ENGINE_REJECTED' : 'KVG_ERR_ENGINE_FAILED';
    const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
    let json: unknown;
    if (!truncated) {
      try {
        json = JSON.parse(text);
      } catch {
        json = undefined;
      }
    }
    // No engine URL here; the engine's own text is kept for the log.
    super(code, `the engine answered ${status} on ${ctx.path}: ${messageOf(json) ?? text.slice(0, 200)}`, {
      worker: ctx.worker,
      path: ctx.path,
      upstreamStatus: status,
      upstreamError: json ?? text.slice(0, 2000),
      truncated,
    });
    this.name = 'EngineHttpError';
    this.statusCode = status < 500 ? status : 502;
    this.upstreamStatus = status;
    this.upstreamHeaders = headers;
    this.upstreamBody = body;
    this.upstreamJson = json;
    this.#text = text;
    this.#worker = ctx.worker;
  }

  /** What the engine said, for `refusalBody`: its status, its JSON, its text when the body was plain text. */
  get refusal(): EngineRefusal {
    const type = String(this.upstreamHeaders['content-type'] ?? '').toLowerCase();
    const text = type.startsWith('text/plain') ? this.#text : undefined;
    return { status: this.upstreamStatus, json: this.upstreamJson, text, worker: this.#worker };
  }
}

/**
 * Engine statuses that say "not me, not now": an internal error (vLLM answers 500 when its engine loop died or a step
 * failed), a proxy in front of it failed, or it is shutting down or overloaded upstream. Envoy's `retry_on: 5xx` retries
 * the same; a request that makes every engine fail costs at most the retry budget.
 */
const MIGRATABLE_STATUSES = new Set([500, 502, 503, 504]);

/**
 * Whether a failed leg may be resumed on another worker (request migration,
 * Dynamo's CannotConnect / Disconnected / ConnectionTimeout / EngineShutdown):
 * the connection was refused or reset, the response broke mid-way, the engine
 * made no progress in time (first-byte and stream-idle timeouts carry
 * `detail.migratable: true`), or it answered 500, 502, 503 (shutting down) or
 * 504, as a status or as the code of an error event in a stream it had begun
 * (vLLM sends code 500 there when its engine loop dies). Never a client abort,
 * an engine 4xx (the request itself is at fault), any other 5xx (501 and 505
 * say the engine will never serve the request), or kvgate's own backpressure.
 */
export function isMigratable(err: unknown): err is KvgateError {
  if (!isKvgateError(err)) return false;
  if (err.detail?.['migratable'] === true) return true;
  if (err instanceof EngineHttpError) return MIGRATABLE_STATUSES.has(err.upstreamStatus);
  if (err instanceof EngineStreamError) {
    const code = err.detail?.['upstreamCode'];
    return typeof code === 'number' && MIGRATABLE_STATUSES.has(code);
  }
  // The codes that say the engine (or the way to it) failed, not the request: the error table's `migratable` column.
  return ERROR_CODES[err.code].migratable;
}
