/**
 * The frontend's HTTP primitives on node:http: the shared helpers from
 * common, plus what only the gateway does: SSE framing of routed events,
 * API-key checking and request ids.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { errorBody, sseDataFrame, sseJsonFrame } from '../common/index.js';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { SseEvent } from './router-port.js';

/**
 * The generic node:http helpers (body reading, JSON, errors, SSE framing,
 * backpressure) live in common, shared with the mocker; they are re-exported
 * here so the frontend has one module for its HTTP primitives.
 */
export { RETRY_AFTER_STATUSES, sendBytes, sendError, sendJson, whenFinished, whenWritable } from '../common/index.js';

/**
 * Any thrown value as the KvgateError a client is answered with: unexpected ones become KVG_ERR_INTERNAL with a fixed
 * sentence, their message and stack left to the log (the returned error's cause); so does a KvgateError that is
 * itself KVG_ERR_INTERNAL, whose message is for the log too (a preprocessing thread's carries its failure as cause).
 */
export function asKvgateError(err: unknown, requestId: string): KvgateError {
  if (isKvgateError(err) && err.code !== 'KVG_ERR_INTERNAL') return err;
  return new KvgateError(
    'KVG_ERR_INTERNAL',
    `internal error; the gateway log has the details under request id ${requestId}`,
    {},
    { cause: err },
  );
}

/** The bytes to write for one SSE event. */
export function sseFrame(ev: SseEvent): Buffer {
  if (ev.raw !== undefined)
    return Buffer.isBuffer(ev.raw) ? ev.raw : Buffer.from(ev.raw.buffer, ev.raw.byteOffset, ev.raw.byteLength);
  return sseDataFrame(ev.data);
}

export function sseErrorFrame(err: KvgateError): Buffer {
  return Buffer.from(sseJsonFrame(errorBody(err)));
}

/** OpenAI's Responses route, whose streams end with the API's own `error` event. */
export const RESPONSES_ROUTE = '/v1/responses';

/**
 * The event that ends a Responses stream with an error: the API's `error` event (`event: error`, data `type`,
 * `code`, `message`, `param`, `sequence_number`), which its clients (Codex, the SDKs) dispatch on by `type`. A
 * chat-style `{"error": ...}` line has no `type`: they saw the stream end without `response.completed`, and lost
 * the code. `sequenceNumber` is the event's place in the stream: the events relayed before it (the engine numbers
 * them from 0, one each).
 */
export function responsesErrorFrame(err: KvgateError, sequenceNumber: number): Buffer {
  const { message, param, code } = errorBody(err).error;
  const event = { type: 'error', code, message, param, sequence_number: sequenceNumber };
  return Buffer.from(`event: error\ndata: ${JSON.stringify(event)}\n\n`);
}

/** Constant-time API key check against SHA-256 digests of the accepted keys. */
export class ApiKeys {
  readonly #digests: Buffer[];

  constructor(keys: readonly string[]) {
    this.#digests = keys.map((k) => createHash('sha256').update(k).digest());
  }

  get enabled(): boolean {
    return this.#digests.length > 0;
  }

  /** True when no keys are configured, or the Authorization header is `Bearer <an accepted key>`. */
  accepts(authorization: string | undefined): boolean {
    if (this.#digests.length === 0) return true;
    const m = authorization !== undefined ? /^Bearer\s+(\S+)\s*$/i.exec(authorization) : null;
    if (m === null) return false;
    const digest = createHash('sha256').update(m[1]!).digest();
    let ok = false;
    // Compare against every key so the time does not depend on which one matched.
    for (const d of this.#digests) ok = timingSafeEqual(d, digest) || ok;
    return ok;
  }
}

const REQUEST_ID = /^[\x21-\x7e]{1,128}$/;

/** The client's x-request-id when it is 1-128 visible ASCII characters, else a fresh UUID. */
export function pickRequestId(header: string | string[] | undefined, fresh: () => string): string {
  return typeof header === 'string' && REQUEST_ID.test(header) ? header : fresh();
}
