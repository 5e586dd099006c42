/**
 * A TCP relay on loopback (OS-chosen port) in front of a local port that
 * keeps every byte a client sent through it, and reads them back as the
 * HTTP/1.1 requests they were: what an engine behind the relay received,
 * byte for byte, as the wire carried it (a test of what a gateway sends,
 * with the real engine still answering).
 */
import { startTcpProxy } from './tcp-proxy.js';

export interface RelayedRequest {
  readonly method: string;
  readonly path: string;
  /** Header names lower-cased; a repeated header keeps its last value. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body as sent (Content-Length framing). */
  readonly body: Buffer;
}

export interface RecordingRelay {
  readonly port: number;
  /** Every complete request sent through the relay so far, per connection in order. */
  requests(): RelayedRequest[];
  close(): Promise<void>;
}

/** The complete requests in the bytes a client sent on one connection. */
function parseRequests(bytes: Buffer): RelayedRequest[] {
  const out: RelayedRequest[] = [];
  let at = 0;
  for (;;) {
    const headEnd = bytes.indexOf('\r\n\r\n', at);
    if (headEnd < 0) return out;
    const [line, ...fields] = bytes.subarray(at, headEnd).toString('latin1').split('\r\n');
    const [method, path] = line!.split(' ');
    const headers: Record<string, string> = {};
    for (const f of fields) {
      const colon = f.indexOf(':');
      headers[f.slice(0, colon).trim().toLowerCase()] = f.slice(colon + 1).trim();
    }
    if (headers['transfer-encoding'] !== undefined) throw new Error('the relay reads Content-Length bodies only');
    const length = Number(headers['content-length'] ?? 0);
    const bodyStart = headEnd + 4;
    if (bytes.length < bodyStart + length) return out;
    out.push({ method: method!, path: path!, headers, body: bytes.subarray(bodyStart, bodyStart + length) });
    at = bodyStart + length;
  }
}

export async function startRecordingRelay(targetPort: number): Promise<RecordingRelay> {
  const sent: Buffer[][] = [];
  const proxy = await startTcpProxy(targetPort, (connection, chunk) => (sent[connection] ??= []).push(chunk));
  return {
    port: proxy.port,
    requests: () => sent.flatMap((chunks) => parseRequests(Buffer.concat(chunks))),
    close: () => proxy.close(),
  };
}
