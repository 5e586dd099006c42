/**
 * A scripted HTTP "engine" for transport tests: a node:http server on an
 * OS-chosen port whose route function decides, per request, what to send
 * (SSE events, JSON, errors, nothing at all, a reset mid-stream). It records
 * every request (headers, raw body, parsed JSON, whether the client closed it
 * before the response finished) and every socket, so tests can assert what
 * the engine received and that no connection is left open.
 *
 * Sequencing is explicit: a route awaits a `Deferred` that the test resolves,
 * never a sleep. This is not the mocker (src/mocker): it simulates no model,
 * only wire behaviour.
 */
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { until as pollUntil } from './until.js';

export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** `until` in the argument order the engine tests use: (condition, timeout, description). */
export function until(cond: () => boolean, timeoutMs = 5_000, what = 'condition'): Promise<void> {
  return pollUntil(cond, what, timeoutMs);
}

export interface RecordedRequest {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  /** Raw request body as received. */
  rawBody: string;
  /** Parsed body (undefined when empty or not JSON). */
  json: unknown;
  /** True once the response was fully written. */
  finished: boolean;
  /** True when the connection closed before the response was finished (client abort or reset). */
  clientClosed: boolean;
  /** Resolves when the response (or its connection) closes, for any reason. */
  closed: Promise<void>;
}

export type EngineRoute = (req: RecordedRequest, res: ServerResponse) => void | Promise<void>;

export interface HttpEngine {
  url: string;
  port: number;
  server: Server;
  requests: RecordedRequest[];
  /** Sockets currently open on the server side. */
  openSockets(): number;
  /** Sockets ever accepted. */
  totalConnections(): number;
  /** Destroys every connection and closes the server. */
  close(): Promise<void>;
}

export async function startHttpEngine(route: EngineRoute): Promise<HttpEngine> {
  const sockets = new Set<Socket>();
  let total = 0;
  const requests: RecordedRequest[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const rawBody = Buffer.concat(chunks).toString('utf8');
      let json: unknown;
      try {
        json = rawBody === '' ? undefined : JSON.parse(rawBody);
      } catch {
        json = undefined;
      }
      const closed = deferred();
      const rec: RecordedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        rawBody,
        json,
        finished: false,
        clientClosed: false,
        closed: closed.promise,
      };
      res.on('finish', () => {
        rec.finished = true;
      });
      const socket = req.socket;
      res.on('close', () => {
        if (!rec.finished) {
          rec.clientClosed = true;
          // Like a real engine noticing the disconnect: drop the half-open socket instead of idling on it.
          socket.destroy();
        }
        closed.resolve();
      });
      requests.push(rec);
      Promise.resolve(route(rec, res)).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500);
        res.end(String(err));
      });
    });
  });
  server.on('connection', (socket: Socket) => {
    total++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    server,
    requests,
    openSockets: () => sockets.size,
    totalConnections: () => total,
    close: async () => {
      for (const s of sockets) s.destroy();
      server.close();
      await once(server, 'close');
    },
  };
}

/** Writes SSE response headers. */
export function sseHead(res: ServerResponse, headers: Record<string, string> = {}): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', ...headers });
  res.flushHeaders();
}

/** The SSE bytes of one `data:` event. */
export function sseEvent(data: unknown): string {
  return `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
}

/** Sends a JSON response. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** A minimal OpenAI completion chunk with one piece of text. */
export function completionChunk(text: string, finishReason: string | null = null): Record<string, unknown> {
  return { id: 'cmpl-test', object: 'text_completion', choices: [{ index: 0, text, finish_reason: finishReason }] };
}

/**
 * Answers what kvgate asks an engine outside a request (GET `/v1/models` naming `model`, GET `/health`; any other
 * GET a 404). Returns false for a request that is not a GET, which the route answers itself.
 */
export function answerEngineProbe(req: RecordedRequest, res: ServerResponse, model: string): boolean {
  if (req.method !== 'GET') return false;
  if (req.url === '/v1/models') sendJson(res, 200, { object: 'list', data: [{ id: model, object: 'model' }] });
  else if (req.url === '/health') res.end('ok');
  else res.writeHead(404).end();
  return true;
}
