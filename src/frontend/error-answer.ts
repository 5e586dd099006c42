/**
 * A failed request's error answer (server.ts's dispatch catches every
 * failure of a request here): what the client is told (public-error.ts: a
 * stable code, a fixed sentence, the worker id), what only the log gets (the
 * engine's URL and text, an internal error's stack), the rejection counted.
 * Once the response has started it just ends; a stream's failures after its
 * head are the relay's (respond.ts: an error event).
 */
import { requestFailed } from '../common/index.js';
import { isAnthropicRoute, sendAnthropicError } from './anthropic-error.js';
import { CLOSING_CODES } from './route-spec.js';
import { asKvgateError, sendError } from './http-io.js';
import type { RelayOptions, RequestContext } from './respond.js';

/** What the answer reads of the server: the log, the public view of errors, `kvgate_http_rejections_total`. */
type ErrorAnswerOptions = Pick<RelayOptions, 'logger' | 'publicErrors' | 'rejections'>;

/**
 * Answers `ctx`'s request with the error `err` (the signal's reason instead when it fired: it explains the
 * failure better than whatever it interrupted). `draining`: the answer closes the connection, as do the
 * `CLOSING_CODES` and an error whose `detail.closeConnection` is true (a request whose framing is faulty);
 * `retryAfter` goes on 429, 503 and 529 (the error's own `detail.retryAfterSeconds` first).
 */
export function answerError(
  ctx: RequestContext,
  err: unknown,
  o: ErrorAnswerOptions,
  draining: boolean,
  retryAfter: number,
): void {
  const { res } = ctx;
  const reason = ctx.signal.aborted ? ctx.signal.reason : err;
  const internal = asKvgateError(reason, ctx.requestId);
  const e = o.publicErrors.of(internal);
  ctx.logFields.code = e.code;
  requestFailed(e.code, e.statusCode);
  if (e.code === 'KVG_ERR_INTERNAL') o.logger.error({ reqId: ctx.requestId, err: reason }, 'internal error');
  // What the client is not told (engine URL, socket error, the engine's own text) goes to the log.
  else if (e !== internal)
    o.logger.warn({ reqId: ctx.requestId, code: e.code, workerId: e.detail?.workerId, err: internal }, 'engine error');
  o.rejections.inc({ code: e.code });
  if (res.destroyed) return;
  if (res.headersSent) {
    res.end();
    return;
  }
  const headers: Record<string, string> = {};
  if (CLOSING_CODES.has(e.code) || draining || e.detail?.['closeConnection'] === true) headers.connection = 'close';
  if (typeof e.detail?.workerId === 'number' && !res.hasHeader('x-kvgate-worker'))
    headers['x-kvgate-worker'] = String(e.detail.workerId);
  // A limit that knows its own wait (a tenant's bucket) says it; the rest say the configured one.
  const wait = typeof e.detail?.retryAfterSeconds === 'number' ? e.detail.retryAfterSeconds : retryAfter;
  // Anthropic's clients read Anthropic's error shape (the SDKs raise their own error classes from it).
  if (isAnthropicRoute(ctx.route)) sendAnthropicError(res, e, ctx.requestId, wait, headers);
  else sendError(res, e, wait, headers);
}
