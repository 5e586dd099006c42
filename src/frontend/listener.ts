/**
 * One listener's node:http server (public or admin), before any request is dispatched: Node's header and request
 * timeouts, the request's server span (probes and scrapes untraced), the connection bounds (`limits.max_connections`
 * on the public listener, the per-client bound), and the answers Node would otherwise give itself (an `Expect` other
 * than 100-continue, a malformed or too slow request), and what its 404 says of an admin path. What a request then
 * goes through is server.ts's dispatch.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import { inRequestSpan } from '../common/index.js';
import type { GatewayConfig } from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import type { ClientConnections } from './connections.js';
import type { ConnectionCap } from './connection-cap.js';
import { answerClientError } from './edge.js';
import { asKvgateError, sendError } from './http-io.js';
import type { Listener } from './route-spec.js';

/** Probes and scrapes: no server span unless the caller sends a `traceparent` (a sampler would trace thousands an hour). */
const UNTRACED_PATHS: ReadonlySet<string> = new Set(['/health', '/ready', '/metrics']);

/** A request target's path, without its query. */
export function pathOf(url: string | undefined): string {
  return (url ?? '/').split('?', 1)[0]!;
}

/** What a 404 says: an admin path names why it is not served here (off, or on the admin listener). */
export function notFound(listener: Listener, path: string, config: GatewayConfig): string {
  if (listener === 'admin' || !(path === '/admin' || path.startsWith('/admin/'))) return `no endpoint ${path}`;
  return config.admin.enabled
    ? `no endpoint ${path} on this listener: the admin endpoints are served on the admin listener (admin.listen)`
    : `no endpoint ${path}: the admin endpoints are off (admin.enabled: true, or --admin, turns them on)`;
}

/** What a listener reads of its gateway server. */
export interface ListenerOptions {
  /** The limits in force: the header timeout read once, at creation; the retry-after at each answer (a reload may change it). */
  readonly limits: () => GatewayConfig['limits'];
  readonly logger: Logger;
  readonly metrics: KvgateMetrics;
  readonly cap: ConnectionCap;
  readonly conns: ClientConnections;
  /** Handles one request (the server's dispatch); a rejection is logged and answered as a 500, or the socket destroyed. */
  readonly dispatch: (req: IncomingMessage, res: ServerResponse) => Promise<void>;
}

export function createListener(listener: Listener, opts: ListenerOptions): Server {
  const { headerTimeoutMs } = opts.limits();
  const server = createServer(
    {
      keepAliveTimeout: 65_000,
      headersTimeout: headerTimeoutMs,
      // Node's cap on receiving a whole request stays (at least its default); the body's own bound is the pause between chunks.
      requestTimeout: Math.max(300_000, headerTimeoutMs),
      // Node checks both timeouts on this period: often enough for the header timeout to be honoured within a quarter of it.
      connectionsCheckingInterval: Math.max(50, Math.min(30_000, Math.floor(headerTimeoutMs / 4))),
    },
    (req, res) => {
      // The request's server span (continuing the client's traceparent) is the active span of everything it runs.
      // Probes and scrapes come many times a minute from every prober: traced only when the caller sends a trace.
      const dispatch = (): Promise<void> => opts.dispatch(req, res);
      const traced = req.headers.traceparent !== undefined || !UNTRACED_PATHS.has(pathOf(req.url));
      (traced ? inRequestSpan(req, res, dispatch) : dispatch()).catch((err: unknown) => {
        opts.logger.error({ err }, 'unhandled error in request dispatch');
        if (!res.headersSent) sendError(res, asKvgateError(err, 'unknown'), opts.limits().retryAfterSeconds);
        else res.destroy();
      });
    },
  );
  server.on('connection', (socket: Socket) => {
    if (listener === 'public' && !opts.cap.accepted(socket)) return;
    if (opts.conns.accepted(socket)) return;
    opts.metrics.httpRejections.inc({ code: 'KVG_ERR_TOO_MANY_CONNECTIONS' });
    opts.metrics.httpConnectionsRefused.inc({ limit: 'max_connections_per_client' });
  });
  // An Expect other than 100-continue: Node would answer a bare 417; kvgate answers with its error object.
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    opts.metrics.httpRejections.inc({ code: 'KVG_ERR_EXPECTATION_FAILED' });
    sendError(
      res,
      new KvgateError(
        'KVG_ERR_EXPECTATION_FAILED',
        `Expect: ${String(req.headers.expect).slice(0, 40)} is not supported (only 100-continue)`,
        { param: 'expect' },
      ),
      undefined,
      { connection: 'close' },
    );
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    opts.logger.debug({ err: err.message, code: err.code }, 'malformed or too slow HTTP request');
    answerClientError(err, socket, headerTimeoutMs, opts.metrics.httpRejections);
  });
  return server;
}
