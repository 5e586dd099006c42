/**
 * Checks at the HTTP edge that need nothing but the request line and headers:
 * an HTTP/1.0 request's framing, headers that must not repeat (`Host`,
 * `Authorization`), the model id in a path, and the raw answer to a request
 * Node could not parse or that came too slowly.
 */
import { maxHeaderSize, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Counter } from 'prom-client';
import { errorBody } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { discardBody, DISCARD_MS } from './body.js';

/**
 * Refuses an HTTP/1.0 request that carries Transfer-Encoding. RFC 9112, section 6.1: such a message's framing is
 * faulty (HTTP/1.0 has no transfer codings, so whoever sent it and any proxy on the way may disagree on where it
 * ends), and the connection must close after the answer. Node parses it as chunked all the same; kvgate reads
 * nothing of it but discards what arrives for a moment (as every closing answer does: unread bytes at close would
 * reset the connection before the client read the 400), then refuses it.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST with `detail.closeConnection` (error-answer.ts closes the connection).
 */
export async function refuseFaultyFraming(req: IncomingMessage, maxBodyBytes: number): Promise<void> {
  if (req.httpVersionMajor !== 1 || req.httpVersionMinor !== 0 || req.headers['transfer-encoding'] === undefined)
    return;
  await discardBody(req, DISCARD_MS, maxBodyBytes);
  throw new KvgateError(
    'KVG_ERR_INVALID_REQUEST',
    'an HTTP/1.0 request may not carry Transfer-Encoding: its framing is faulty (RFC 9112, section 6.1)',
    { param: 'transfer-encoding', closeConnection: true },
  );
}

/**
 * Headers a request may carry once only:
 * - `Host`: HTTP/1.1 (RFC 9112, section 3.2) requires a 400 for more than one; Node keeps the first, and a proxy in
 *   front might have routed on another.
 * - `Authorization` on routes that check it: Node keeps the first and drops the rest silently, so `valid, invalid`
 *   would pass as `valid`.
 * Counted on the raw headers in one pass: `headersDistinct` would build an array per header.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST naming the header.
 */
export function checkEdgeHeaders(req: IncomingMessage, authRoute: boolean): void {
  const countAuth = authRoute && req.headers.authorization !== undefined;
  let hosts = 0;
  let auths = 0;
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
    else if (countAuth && name.length === 13 && name.toLowerCase() === 'authorization') auths++;
  }
  if (hosts > 1) {
    throw new KvgateError(
      'KVG_ERR_INVALID_REQUEST',
      'the request has more than one Host header; HTTP/1.1 allows one (RFC 9112, section 3.2)',
      { param: 'host' },
    );
  }
  if (auths > 1) {
    throw new KvgateError('KVG_ERR_INVALID_REQUEST', 'the Authorization header must be given once', {
      param: 'authorization',
    });
  }
}

/**
 * A percent-encoded model id from a path.
 * @throws KvgateError KVG_ERR_INVALID_REQUEST when it is not valid percent-encoding (`%ZZ`).
 */
export function decodedModelId(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw new KvgateError(
      'KVG_ERR_INVALID_REQUEST',
      `the model id in the path is not valid percent-encoding: ${JSON.stringify(raw.slice(0, 80))}`,
      { param: 'model' },
    );
  }
}

/** The reason phrases of the statuses `clientErrorResponse` answers with. */
const REASONS: Record<number, string> = {
  400: 'Bad Request',
  408: 'Request Timeout',
  431: 'Request Header Fields Too Large',
};

/** The error a request Node gave up on is answered with: it came too slowly, its head is too large, or it is not HTTP/1.1. */
function clientError(err: NodeJS.ErrnoException, headerTimeoutMs: number): KvgateError {
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
    return new KvgateError(
      'KVG_ERR_CLIENT_TIMEOUT',
      `the request did not arrive in time (its headers are due within ${headerTimeoutMs} ms)`,
      { param: null },
    );
  }
  if (err.code === 'HPE_HEADER_OVERFLOW') {
    return new KvgateError(
      'KVG_ERR_HEADERS_TOO_LARGE',
      `the request line and headers are larger than the limit of ${maxHeaderSize} bytes`,
      { param: null, limit: maxHeaderSize },
    );
  }
  // llhttp's reason ("Invalid header value char", "Content-Length can't be present with Transfer-Encoding", ...).
  const raw = (err as { reason?: unknown }).reason;
  const reason = typeof raw === 'string' ? raw : '';
  return new KvgateError(
    'KVG_ERR_INVALID_REQUEST',
    `the request is not valid HTTP/1.1${reason !== '' ? `: ${reason.slice(0, 120)}` : ''} (${String(err.code ?? 'unknown')})`,
    { param: null },
  );
}

/**
 * The raw HTTP answer to a request Node gave up on (`clientError`'s error as an error object); it closes the
 * connection: after a framing error the rest of the bytes cannot be trusted to start a request.
 */
function clientErrorResponse(err: KvgateError): string {
  const body = JSON.stringify(errorBody(err));
  const status = err.statusCode;
  return (
    `HTTP/1.1 ${status} ${REASONS[status] ?? 'Bad Request'}\r\nConnection: close\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}

/**
 * Answers a request Node gave up on (the server's 'clientError'), counted by its code in `rejections`; a reset or a
 * closed socket has no one to answer and is destroyed.
 */
export function answerClientError(
  err: NodeJS.ErrnoException,
  socket: Socket,
  headerTimeoutMs: number,
  rejections: Pick<Counter<'code'>, 'inc'>,
): void {
  if (!socket.writable || err.code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  const answer = clientError(err, headerTimeoutMs);
  rejections.inc({ code: answer.code });
  socket.end(clientErrorResponse(answer));
}
