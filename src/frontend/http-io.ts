/**
 * Small HTTP primitives for the frontend on node:http: bounded body reading,
 * JSON and OpenAI-style error responses, SSE framing with backpressure, and
 * API-key checking. No framework: each helper does one thing on the raw
 * request and response objects.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { KvgateError, isKvgateError } from '../errors/index.js';
import type { SseEvent } from './router-port.js';

/** The OpenAI error object, with kvgate's stable code. */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

export function errorBody(err: KvgateError): ErrorBody {
  const param = typeof err.detail?.param === 'string' ? err.detail.param : null;
  return { error: { message: err.message, type: err.type, param, code: err.code } };
}

/** Any thrown value as a KvgateError (unexpected ones become KVG_ERR_INTERNAL, without their message). */
export function asKvgateError(err: unknown, requestId: string): KvgateError {
  if (isKvgateError(err)) return err;
  return new KvgateError('KVG_ERR_INTERNAL', `internal error; the gateway log has the details under request id ${requestId}`, {}, { cause: err });
}

/**
 * Reads the whole body, up to `limit` bytes; rejects with `signal.reason` if the signal fires first.
 * @throws KvgateError KVG_ERR_BODY_TOO_LARGE as soon as the declared or received size exceeds the limit. The rest
 *   of the body is then discarded as it arrives (not buffered), so the client can finish sending and read the 413.
 */
export function readBody(req: IncomingMessage, limit: number, signal?: AbortSignal): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const tooLarge = (size: string): KvgateError =>
      new KvgateError('KVG_ERR_BODY_TOO_LARGE', `the request body (${size}) is larger than the limit of ${limit} bytes`, { limit });
    const chunks: Buffer[] = [];
    let size = 0;
    // Stop collecting and discard the rest as it arrives (not buffered), so the client can finish sending and read the answer.
    const stop = (err: Error): void => {
      req.off('data', onData);
      req.off('end', onEnd);
      signal?.removeEventListener('abort', onAbort);
      chunks.length = 0;
      req.resume();
      reject(err);
    };
    const onData = (chunk: Buffer): void => {
      size += chunk.length;
      if (size > limit) stop(tooLarge(`over ${limit} bytes`));
      else chunks.push(chunk);
    };
    const onEnd = (): void => {
      signal?.removeEventListener('abort', onAbort);
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    };
    // A client that sends its body too slowly is cut by the request timeout like any other.
    const onAbort = (): void => stop(signal!.reason as Error);
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > limit) return stop(tooLarge(`${declared} bytes`));
    if (signal?.aborted === true) return stop(signal.reason as Error);
    signal?.addEventListener('abort', onAbort, { once: true });
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', (err) => stop(err));
  });
}

/**
 * Parses a request body as a JSON object.
 * @throws KvgateError KVG_ERR_INVALID_JSON
 */
export function parseJsonObject(bytes: Buffer): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(bytes.toString('utf8'));
  } catch (err) {
    throw new KvgateError('KVG_ERR_INVALID_JSON', `the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new KvgateError('KVG_ERR_INVALID_JSON', 'the request body must be a JSON object');
  }
  return value as Record<string, unknown>;
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

export function sendBytes(res: ServerResponse, status: number, bytes: Uint8Array | string, contentType: string, headers: Record<string, string> = {}): void {
  res.writeHead(status, { ...headers, 'content-type': contentType, 'content-length': Buffer.byteLength(bytes) });
  res.end(bytes);
}

/** Sends an error response; 429 and 503 carry Retry-After. */
export function sendError(res: ServerResponse, err: KvgateError, retryAfterSeconds: number, headers: Record<string, string> = {}): void {
  const h = { ...headers };
  if (err.statusCode === 429 || err.statusCode === 503) h['retry-after'] = String(retryAfterSeconds);
  sendJson(res, err.statusCode, errorBody(err), h);
}

const DATA_PREFIX = Buffer.from('data: ');
const EVENT_END = Buffer.from('\n\n');

/** The bytes to write for one SSE event. */
export function sseFrame(ev: SseEvent): Buffer {
  if (ev.raw !== undefined) return Buffer.isBuffer(ev.raw) ? ev.raw : Buffer.from(ev.raw.buffer, ev.raw.byteOffset, ev.raw.byteLength);
  const data = typeof ev.data === 'string' ? Buffer.from(ev.data) : ev.data;
  return Buffer.concat([DATA_PREFIX, data, EVENT_END]);
}

export function sseErrorFrame(err: KvgateError): Buffer {
  return Buffer.from(`data: ${JSON.stringify(errorBody(err))}\n\n`);
}

/** Resolves when the response can take more data, or when it closed (then `false`). */
export function drained(res: ServerResponse): Promise<boolean> {
  if (res.destroyed) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (ok: boolean): void => {
      res.off('drain', onDrain);
      res.off('close', onClose);
      resolve(ok);
    };
    const onDrain = (): void => done(true);
    const onClose = (): void => done(false);
    res.on('drain', onDrain);
    res.on('close', onClose);
  });
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
