/**
 * A TCP relay on loopback (OS-chosen port) to a local port, that a test can
 * cut: every connection through it is destroyed and new ones are refused
 * until it is restored on the same port. What a network partition looks like
 * to a client, while the server behind it (etcd) runs on.
 */
import { connect, createServer, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  /** The relay's port on 127.0.0.1. */
  readonly port: number;
  /** Destroys every relayed connection and stops listening. */
  cut(): Promise<void>;
  /** Listens again on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

const listen = (server: Server, port: number): Promise<number> =>
  new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve((server.address() as { port: number }).port);
    });
  });

/** `onClientData`: each chunk a client sends, with its connection's index (in accept order), before it is relayed. */
export async function startTcpProxy(
  targetPort: number,
  onClientData?: (connection: number, chunk: Buffer) => void,
): Promise<TcpProxy> {
  let connections = 0;
  const sockets = new Set<Socket>();
  const track = (s: Socket): void => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
    s.on('error', () => s.destroy());
  };
  const server = createServer((client) => {
    const upstream = connect(targetPort, '127.0.0.1');
    track(client);
    track(upstream);
    const index = connections++;
    if (onClientData !== undefined) client.on('data', (chunk: Buffer) => onClientData(index, chunk));
    client.pipe(upstream).pipe(client);
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => client.destroy());
  });
  const port = await listen(server, 0);
  const cut = async (): Promise<void> => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const s of sockets) s.destroy();
    await closed;
  };
  return {
    port,
    cut,
    restore: async () => void (await listen(server, port)),
    close: async () => (server.listening ? cut() : undefined),
  };
}
