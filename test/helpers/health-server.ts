/** An engine's GET /health and nothing else, answering `status.code` (changeable while it runs). */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Starts it on an OS-chosen port and adds it to `servers` (the caller closes them); resolves with its base URL. */
export async function healthServer(status: { code: number }, servers: Server[]): Promise<string> {
  const s = createServer((req, res) => {
    res.statusCode = req.url === '/health' ? status.code : 404;
    res.end();
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}
