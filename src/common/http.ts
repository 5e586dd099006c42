/**
 * The node:http primitives both HTTP servers in kvgate share (the gateway's
 * frontend and the mocker's simulated engine): bounded body reading, JSON
 * parsing, JSON and OpenAI-style error responses, SSE framing and
 * backpressure, and binding a listener. No framework: each helper does one
 * thing on the raw request and response objects. Server-specific policy
 * (API keys, request ids, which headers an SSE stream carries) stays with
 * each server.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { KvgateError } from '../errors/index.js';
import type { CancelSignal } from './cancel.js';
import { kernelSendQueue } from './send-queue.js';

/** The OpenAI error object, with kvgate's stable code. */
export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string };
}

export function errorBody(err: KvgateError): ErrorBody {
  const param = typeof err.detail?.param === 'string' ? err.detail.param : null;
  return { error: { message: err.message, type: err.type, param, code: err.code } };
}

/**
 * Reads the whole body, up to `limit` bytes; rejects with `signal.reason` if the signal fires first.
 * @throws KvgateError KVG_ERR_BODY_TOO_LARGE as soon as the declared or received size exceeds the limit. The rest
 *   of the body is then discarded as it arrives (not buffered), so the client can finish sending and read the 413.
 */
export function readBody(req: IncomingMessage, limit: number, signal?: AbortSignal): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const tooLarge = (size: string): KvgateError =>
      new KvgateError(
        'KVG_ERR_BODY_TOO_LARGE',
        `the request body (${size}) is larger than the limit of ${limit} bytes`,
        { limit },
      );
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
 * Parses a request body as JSON, any value.
 * @throws KvgateError KVG_ERR_INVALID_JSON
 */
export function parseJson(bytes: Buffer | string): unknown {
  try {
    return JSON.parse(typeof bytes === 'string' ? bytes : bytes.toString('utf8')) as unknown;
  } catch (err) {
    throw new KvgateError('KVG_ERR_INVALID_JSON', `the request body is not valid JSON: ${(err as Error).message}`);
  }
}

/**
 * Parses a request body as a JSON object.
 * @throws KvgateError KVG_ERR_INVALID_JSON
 */
export function parseJsonObject(bytes: Buffer | string): Record<string, unknown> {
  const value = parseJson(bytes);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new KvgateError('KVG_ERR_INVALID_JSON', 'the request body must be a JSON object');
  }
  return value as Record<string, unknown>;
}

/** Sends `body` as JSON (a string is sent as already-serialized JSON). Does nothing once the response was destroyed. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (res.destroyed) return;
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  res.writeHead(status, { ...headers, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

/** Sends `bytes` with their type and length; `headers` (the caller's own object) is completed and used as it is, not copied. */
export function sendBytes(
  res: ServerResponse,
  status: number,
  bytes: Uint8Array | string,
  contentType: string,
  headers: Record<string, string | number> = {},
): void {
  headers['content-type'] = contentType;
  headers['content-length'] = Buffer.byteLength(bytes);
  res.writeHead(status, headers);
  res.end(bytes);
}

/** The statuses a Retry-After goes with: rate limits (429), unavailability (503), shedding (529). */
export const RETRY_AFTER_STATUSES: ReadonlySet<number> = new Set([429, 503, 529]);

/**
 * Sends `err` as an OpenAI error object with its status. With `retryAfterSeconds`,
 * a 429, 503 or 529 also carries Retry-After (the gateway's load shedding; the mocker gives none).
 */
export function sendError(
  res: ServerResponse,
  err: KvgateError,
  retryAfterSeconds?: number,
  headers: Record<string, string> = {},
): void {
  const h = { ...headers };
  if (retryAfterSeconds !== undefined && RETRY_AFTER_STATUSES.has(err.statusCode))
    h['retry-after'] = String(retryAfterSeconds);
  sendJson(res, err.statusCode, errorBody(err), h);
}

const DATA_PREFIX = Buffer.from('data: ');
const EVENT_END = Buffer.from('\n\n');

/** One SSE `data:` event around a payload already serialized. */
export function sseDataFrame(data: Uint8Array | string): Buffer {
  return Buffer.concat([DATA_PREFIX, typeof data === 'string' ? Buffer.from(data) : data, EVENT_END]);
}

/** One SSE `data:` event carrying `value` as JSON. */
export function sseJsonFrame(value: unknown): string {
  return `data: ${JSON.stringify(value)}\n\n`;
}

/** The event that ends an OpenAI stream. */
export const SSE_DONE = 'data: [DONE]\n\n';

/** Why `whenWritable` or `whenFinished` returned: the response can take more data (or has sent it all), or it never will. */
export type WritableState = 'ready' | 'closed' | 'aborted' | 'stalled';

/**
 * Waits until `res` can take more data. The response's own state decides (`writableNeedDrain`), not what a
 * caller saw at an earlier write: a 'drain' that already came is never waited for, so the wait cannot hang.
 * Resolves 'ready' at once when nothing is waiting to drain; 'closed' when the response closes first; 'aborted'
 * when `signal` fires first; 'stalled' when the client took nothing of what is buffered for `stallMs`
 * (0: no bound; see `watchStall` for what counts as taking). A wait that ends other than 'ready' leaves the
 * response as it is (the caller ends it).
 */
export function whenWritable(res: ServerResponse, signal?: CancelSignal, stallMs = 0): Promise<WritableState> {
  if (!res.writableNeedDrain && !res.destroyed && signal?.aborted !== true) return Promise.resolve('ready');
  return settleOn(res, 'drain', signal, stallMs);
}

/**
 * Waits until an ended `res` has handed all its data to the kernel ('ready', `writableFinished`), with the
 * states and the stall bound of `whenWritable`.
 */
export function whenFinished(res: ServerResponse, signal?: CancelSignal, stallMs = 0): Promise<WritableState> {
  if (res.writableFinished && !res.destroyed && signal?.aborted !== true) return Promise.resolve('ready');
  return settleOn(res, 'finish', signal, stallMs);
}

function settleOn(
  res: ServerResponse,
  ready: 'drain' | 'finish',
  signal: CancelSignal | undefined,
  stallMs: number,
): Promise<WritableState> {
  if (res.destroyed) return Promise.resolve('closed');
  if (signal?.aborted === true) return Promise.resolve('aborted');
  return new Promise((resolve) => {
    let unwatch: (() => void) | undefined;
    const done = (state: WritableState): void => {
      res.off(ready, onReady);
      res.off('close', onClose);
      signal?.removeEventListener('abort', onAbort);
      unwatch?.();
      resolve(state);
    };
    const onReady = (): void => done('ready');
    const onClose = (): void => done('closed');
    const onAbort = (): void => done('aborted');
    res.on(ready, onReady);
    res.on('close', onClose);
    signal?.addEventListener('abort', onAbort);
    if (stallMs > 0) unwatch = watchStall(res, stallMs, () => done('stalled'));
  });
}

/**
 * Calls `onStall` once the client of `res` has taken nothing for `stallMs`, and returns a function that stops
 * the watch. Taking is a 'drain', or the socket's kernel send queue shrinking between two samples, taken every
 * half bound (`kernelSendQueue`): Node reports a drain only after MBs are taken, which a slow but steady
 * reader may need longer than the bound for. So a client that takes something more often than every half
 * bound is never cut, and one that stops is cut at most one and a half bounds after it last took anything;
 * where the queue cannot be read, one bound after the watch began or the last drain, as before the queue
 * was read. Timer-driven, unref'd: it never keeps the process alive.
 */
function watchStall(res: ServerResponse, stallMs: number, onStall: () => void): () => void {
  let lastTaken = performance.now();
  let lastQueue: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const onDrain = (): void => {
    lastTaken = performance.now();
    lastQueue = undefined;
  };
  const stop = (): void => {
    stopped = true;
    res.off('drain', onDrain);
    if (timer !== undefined) clearTimeout(timer);
  };
  const schedule = (ms: number): void => {
    timer = setTimeout(() => void tick(), ms);
    timer.unref();
  };
  const tick = async (): Promise<void> => {
    const socket = res.socket;
    // Samples a quarter bound apart at least: two ticks never read one snapshot of the table.
    const queue = socket === null ? undefined : await kernelSendQueue(socket, stallMs / 4);
    if (stopped) return;
    const now = performance.now();
    if (queue !== undefined && lastQueue !== undefined && queue < lastQueue) lastTaken = now;
    if (queue !== undefined) lastQueue = queue;
    const idle = now - lastTaken;
    if (idle >= stallMs) {
      stop();
      onStall();
    } else schedule(Math.min(stallMs / 2, stallMs - idle));
  };
  res.on('drain', onDrain);
  schedule(stallMs / 2);
  return stop;
}

/** Binds `server`; rejects with the bind error (EADDRINUSE, ...) as Node reports it. */
export function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/** `http://host:port` with an IPv6 host bracketed. */
export function httpOrigin(host: string, port: number): string {
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
