/**
 * `kernelSendQueue` reads a socket's kernel send queue from Linux's tables:
 * over real sockets, IPv4 and an IPv4 client of a dual-stack listener (the
 * IPv6 table), it is large while the reader is paused, shrinks as the reader
 * takes bytes, and is undefined for a socket the tables do not list.
 */
import { once } from 'node:events';
import { createServer, Socket, connect, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { kernelSendQueue } from '../../src/common/send-queue.js';

/** A server socket writing to a paused client until its kernel send queue holds no more. */
async function filled(host: string | undefined): Promise<{ server: Server; sent: Socket; client: Socket }> {
  const server = createServer();
  server.listen(0, host);
  await once(server, 'listening');
  const accepted = once(server, 'connection');
  const port = (server.address() as { port: number }).port;
  const client = connect(port, '127.0.0.1');
  client.pause();
  const [sent] = (await accepted) as [Socket];
  const chunk = Buffer.alloc(1 << 20, 97);
  for (let i = 0; i < 64 && sent.write(chunk); i++);
  // Wait until the kernel holds what it will: the queue stops growing.
  let last = -1;
  for (let i = 0; i < 50; i++) {
    await new Promise((r) => setTimeout(r, 20));
    const q = (await kernelSendQueue(sent, 0)) ?? 0;
    if (q > 0 && q === last) break;
    last = q;
  }
  return { server, sent, client };
}

describe.skipIf(process.platform !== 'linux')('kernelSendQueue', () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const c of cleanups.splice(0)) c();
  });

  for (const [label, host] of [
    ['an IPv4 socket', '127.0.0.1'],
    ['an IPv4 client of a dual-stack listener (the IPv6 table)', undefined],
  ] as const) {
    it(`${label}: large while the reader is paused, smaller once it reads`, async () => {
      const { server, sent, client } = await filled(host);
      cleanups.push(() => {
        client.destroy();
        sent.destroy();
        server.close();
      });
      const full = await kernelSendQueue(sent, 0);
      expect(full).toBeGreaterThan(64 * 1024);
      let read = 0;
      client.on('data', (b: Buffer) => {
        read += b.length;
        if (read > 512 * 1024) client.pause();
      });
      client.resume();
      await new Promise((r) => setTimeout(r, 100));
      expect(await kernelSendQueue(sent, 0)).toBeLessThan(full!);
    });
  }

  it('is undefined for a socket that is not connected', async () => {
    expect(await kernelSendQueue(new Socket())).toBeUndefined();
  });
});
