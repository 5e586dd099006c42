/**
 * Typed errors with stable codes. Every error kvgate raises on purpose is a
 * `KvgateError` with a `code` from `ERROR_CODES`; the HTTP edge maps it to an
 * OpenAI-style error object using `statusCode` and `type`.
 *
 * Codes are never reused. `docs/errors.md` lists each one (a test keeps the
 * two in sync).
 *
 * Two columns say what may happen after a failure, for two different actors:
 * - `retryable` is advice to a client: the failure is transient and not the
 *   request's fault, and no engine had started the work when it failed
 *   (nothing reached one, or kvgate's own limits or deadline ended the
 *   request), so the same request sent again may succeed. A client reads it
 *   as `KvgateError.retryable`.
 * - `migratable` is what kvgate does itself: the engine, or the way to it,
 *   failed, not the request, so a leg may resume on another worker (retry
 *   before the first byte, migration after it). `isMigratable`
 *   (src/engines) reads this column; an error may also say so for itself
 *   (`detail.migratable`), and an engine's HTTP status decides for
 *   `EngineHttpError`. A dropped connection or a timeout after the request
 *   was sent is migratable but not retryable: the engine may have started
 *   the work, so a client should not simply resend it, while kvgate resumes
 *   it where it can.
 */

export const ERROR_CODES = {
  KVG_ERR_INVALID_ARGUMENT: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_INVALID_CONFIG: { status: 500, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_RELOAD_REJECTED: { status: 422, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_RELOAD_FAILED: { status: 500, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_INVALID_TOKEN: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_INVALID_BLOCK_SIZE: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_PARENT_BLOCK_NOT_FOUND: { status: 500, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_INVALID_BLOCK_SEQUENCE: { status: 500, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_WASM: { status: 500, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_INDEX_MEMORY: { status: 500, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_DUPLICATE_REQUEST: { status: 409, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_OVERLOADED: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_BACKPRESSURE: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_KV_EVENT_REPLAY: { status: 502, type: 'server_error', retryable: true, migratable: false },
  KVG_ERR_NO_WORKERS: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_MISSING_WORKER_ID: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_UNKNOWN_WORKER: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_NO_TAINTED_WORKER: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_INVALID_DP_RANK: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_WORKER_DOWN: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_INVALID_TRACE: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  // Transport to engines (src/engines): retryable when nothing reached the engine; migratable when the engine or the way to it failed.
  KVG_ERR_ENGINE_NOT_REGISTERED: { status: 503, type: 'service_unavailable', retryable: true, migratable: true },
  KVG_ERR_ENGINE_UNREACHABLE: { status: 502, type: 'server_error', retryable: true, migratable: true },
  KVG_ERR_ENGINE_DISCONNECTED: { status: 502, type: 'server_error', retryable: false, migratable: true },
  KVG_ERR_ENGINE_HEADERS_TIMEOUT: { status: 504, type: 'server_error', retryable: false, migratable: true },
  KVG_ERR_ENGINE_BODY_TIMEOUT: { status: 504, type: 'server_error', retryable: false, migratable: true },
  KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT: { status: 504, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT: { status: 504, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_ENGINE_REJECTED: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_ENGINE_FAILED: { status: 502, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_ENGINE_STREAM_BROKEN: { status: 502, type: 'server_error', retryable: false, migratable: true },
  KVG_ERR_ENGINE_BAD_RESPONSE: { status: 502, type: 'server_error', retryable: false, migratable: false },
  // A stream: false answer assembled from the engine's stream grew past the bound of an unstreamed one (src/routing).
  KVG_ERR_ANSWER_TOO_LARGE: { status: 502, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_CLIENT_ABORTED: { status: 499, type: 'request_aborted', retryable: false, migratable: false },
  KVG_ERR_NO_DISAGGREGATED_PARAMS: { status: 502, type: 'server_error', retryable: false, migratable: false },
  // Disaggregated serving (src/routing).
  KVG_ERR_PREFILL_NOT_ACTIVATED: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_AGENT_API_NOT_DISAGGREGATED: {
    status: 400,
    type: 'invalid_request_error',
    retryable: false,
    migratable: false,
  },
  KVG_ERR_EMBEDDINGS_NOT_DISAGGREGATED: {
    status: 400,
    type: 'invalid_request_error',
    retryable: false,
    migratable: false,
  },
  KVG_ERR_PREFILL_FAILED: { status: 502, type: 'server_error', retryable: false, migratable: false },
  // HTTP edge (src/frontend): request validation, limits and server state.
  KVG_ERR_INVALID_JSON: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_INVALID_REQUEST: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_UNSUPPORTED_CONTENT: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_INVALID_CONTENT_BLOCK: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_PREVIOUS_RESPONSE_UNSUPPORTED: {
    status: 400,
    type: 'invalid_request_error',
    retryable: false,
    migratable: false,
  },
  KVG_ERR_BACKGROUND_UNSUPPORTED: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_PROMPT_TOO_LONG: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_TOO_MANY_MESSAGES: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_TOKEN_DATA_MISMATCH: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_TOKENIZER_UNAVAILABLE: { status: 400, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_UNAUTHORIZED: { status: 401, type: 'authentication_error', retryable: false, migratable: false },
  KVG_ERR_NOT_FOUND: { status: 404, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_MODEL_NOT_FOUND: { status: 404, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_METHOD_NOT_ALLOWED: { status: 405, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_BODY_TOO_LARGE: { status: 413, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_TOO_MANY_REQUESTS: { status: 429, type: 'rate_limit_error', retryable: true, migratable: false },
  KVG_ERR_TOO_MANY_CLIENT_REQUESTS: { status: 429, type: 'rate_limit_error', retryable: true, migratable: false },
  KVG_ERR_RATE_LIMITED: { status: 429, type: 'rate_limit_error', retryable: true, migratable: false },
  KVG_ERR_QUEUE_SHED: { status: 529, type: 'overloaded_error', retryable: true, migratable: false },
  KVG_ERR_TOO_MANY_CONNECTIONS: { status: 429, type: 'rate_limit_error', retryable: true, migratable: false },
  KVG_ERR_CLIENT_TIMEOUT: { status: 408, type: 'invalid_request_error', retryable: true, migratable: false },
  KVG_ERR_HEADERS_TOO_LARGE: { status: 431, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_UNSUPPORTED_ENCODING: { status: 415, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_EXPECTATION_FAILED: { status: 417, type: 'invalid_request_error', retryable: false, migratable: false },
  KVG_ERR_MODEL_UNAVAILABLE: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_SHUTTING_DOWN: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_REQUEST_TIMEOUT: { status: 504, type: 'timeout_error', retryable: true, migratable: false },
  KVG_ERR_CLIENT_STALLED: { status: 408, type: 'timeout_error', retryable: false, migratable: false },
  KVG_ERR_PREPROCESS_TIMEOUT: { status: 500, type: 'server_error', retryable: false, migratable: false },
  KVG_ERR_PREPROCESS_THREAD_LOST: { status: 503, type: 'service_unavailable', retryable: true, migratable: false },
  KVG_ERR_INTERNAL: { status: 500, type: 'server_error', retryable: false, migratable: false },
  // Simulated engine (src/mocker).
  KVG_ERR_KV_TRANSFER_FAILED: { status: 502, type: 'server_error', retryable: true, migratable: false },
} as const;

export type KvgateErrorCode = keyof typeof ERROR_CODES;

const kKvgateError = Symbol.for('kvgate.error');

export class KvgateError extends Error {
  readonly code: KvgateErrorCode;
  readonly statusCode: number;
  readonly type: string;
  /** The client may send the same request again (the `retryable` column of `ERROR_CODES`). */
  readonly retryable: boolean;
  /** Structured detail for logs and error bodies (never secrets). */
  readonly detail: Readonly<Record<string, unknown>> | undefined;

  constructor(code: KvgateErrorCode, message: string, detail?: Record<string, unknown>, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'KvgateError';
    this.code = code;
    const info = ERROR_CODES[code];
    this.statusCode = info.status;
    this.type = info.type;
    this.retryable = info.retryable;
    this.detail = detail;
  }

  /** Brand check that survives duplicate installs of kvgate in one process. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    // Subclasses (e.g. EngineHttpError) keep ordinary prototype checks; only
    // the base class answers by brand, across duplicate installs.
    if (this !== KvgateError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[kKvgateError] === true;
  }

  get [kKvgateError](): boolean {
    return true;
  }
}

export function isKvgateError(value: unknown, code?: KvgateErrorCode): value is KvgateError {
  return value instanceof KvgateError && (code === undefined || value.code === code);
}

/**
 * The WebAssembly module failed an allocation (or trapped) while changing or reading a prefix index: the
 * index was discarded and starts empty (`detail.op`: what it was doing). Its owner rebuilds it (the
 * gateway from the engines' replay buffers); routing is approximate for its model meanwhile.
 */
export class IndexMemoryError extends KvgateError {
  constructor(op: string, options?: { cause?: unknown }) {
    super(
      'KVG_ERR_INDEX_MEMORY',
      `the prefix index could not allocate memory during ${op}: it was discarded and is rebuilt`,
      { op },
      options,
    );
    this.name = 'IndexMemoryError';
  }
}
