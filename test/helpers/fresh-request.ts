/**
 * One HTTP request on its own connection (no keep-alive), for `kvgate serve --processes N`: which process
 * accepts a connection is the kernel's and the primary's choice, so each request may reach either, and the
 * `x-kvgate-process` header says which one answered.
 */
import { request } from 'node:http';

export interface FreshAnswer {
  status: number;
  /** The `x-kvgate-process` header: the process that answered (1..N). */
  process: string;
  body: string;
}

/** GET `path` (POST `body` as JSON when given) on a fresh connection. */
export function fresh(
  url: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<FreshAnswer> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}${path}`,
      {
        agent: false,
        method: body === undefined ? 'GET' : 'POST',
        headers: { connection: 'close', 'content-type': 'application/json', ...headers },
      },
      (res) => {
        let text = '';
        res
          .setEncoding('utf8')
          .on('data', (c: string) => (text += c))
          .on('end', () =>
            resolve({ status: res.statusCode!, process: String(res.headers['x-kvgate-process']), body: text }),
          );
      },
    );
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}
