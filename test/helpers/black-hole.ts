/**
 * A TCP server on loopback that accepts every connection, reads what it is sent and never answers: a collector
 * (or any peer) that hangs, or a network path that black-holes replies.
 */
import { createServer, type Server, type Socket } from 'node:net';

export interface BlackHole {
  /** `http://127.0.0.1:<port>` (an OS-chosen port). */
  readonly url: string;
  /** Every connection accepted so far. */
  readonly sockets: Socket[];
  /** Bytes received so far, over every connection. */
  received(): number;
  readonly server: Server;
  /** Destroys the connections and closes the listener (idempotent). */
  close(): Promise<void>;
}

export async function startBlackHole(): Promise<BlackHole> {
  const sockets: Socket[] = [];
  let bytes = 0;
  const server = createServer((s) => {
    sockets.push(s);
    s.on('data', (chunk: Buffer) => (bytes += chunk.length));
    s.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    sockets,
    received: () => bytes,
    server,
    async close() {
      for (const s of sockets) s.destroy();
      if (server.listening) await new Promise((r) => server.close(r));
    },
  };
}
