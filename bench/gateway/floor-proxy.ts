/**
 * The floor of the gateway bench: the least a Node proxy of the same build
 * as kvgate (node:http in front, one undici keep-alive Pool behind) does per
 * request, with none of kvgate's logic: no validation, tokenization, routing,
 * accounting, metrics or logs. It reads the client's body, sends it as is to
 * the backend through `Pool.dispatch`, and writes the backend's status,
 * content type and body chunks back as they come. What kvgate costs above
 * this row is kvgate's own; what this row costs above nginx is Node's.
 *
 * Prints one JSON line `{"url":...}` on stdout when ready.
 * Usage: node floor-proxy.js <backend url>
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Pool, type Dispatcher } from 'undici';

const backend = process.argv[2];
if (backend === undefined) {
  process.stderr.write('usage: floor-proxy <backend url>\n');
  process.exit(2);
}
const pool = new Pool(backend, { connections: 256, pipelining: 1, keepAliveTimeout: 4_000 });

/** Writes the backend's answer through as it arrives: the head with the first chunk, the end with the last. */
class PassThroughHandler implements Dispatcher.DispatchHandler {
  readonly #res: ServerResponse;

  constructor(res: ServerResponse) {
    this.#res = res;
  }

  onRequestStart(): void {
    // nothing to track: the floor keeps no state about the request
  }

  onResponseStart(
    _c: Dispatcher.DispatchController,
    status: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    const out: Record<string, string | string[]> = {};
    for (const name of ['content-type', 'content-length']) {
      const value = headers[name];
      if (value !== undefined) out[name] = value;
    }
    this.#res.writeHead(status, out);
  }

  onResponseData(_c: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#res.write(chunk);
  }

  onResponseEnd(): void {
    this.#res.end();
  }

  onResponseError(_c: Dispatcher.DispatchController | undefined, err: Error): void {
    if (!this.#res.headersSent) this.#res.writeHead(502);
    this.#res.end(String(err));
  }
}

function forward(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
  pool.dispatch(
    {
      path: req.url ?? '/',
      method: req.method ?? 'GET',
      headers: { 'content-type': req.headers['content-type'] ?? 'application/json' },
      body: req.method === 'GET' ? null : body,
    },
    new PassThroughHandler(res),
  );
}

const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => forward(req, res, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
});
server.listen(0, '127.0.0.1', () => {
  const addr = server.address() as { port: number };
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${addr.port}` })}\n`);
});
const stop = (): void => {
  server.close();
  server.closeAllConnections();
  void pool.close();
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
