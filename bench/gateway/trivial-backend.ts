/**
 * A trivial OpenAI-shaped engine for the gateway bench, run as its own
 * process: it answers at once and does no tokenization, so whatever sits in
 * front of it (nginx, kvgate) is the bottleneck, not the engine.
 *
 * - `POST /v1/chat/completions`, `/v1/completions`: a fixed completion; with
 *   `"stream": true` an SSE stream of `max_tokens` chunks (at least 1), all
 *   written in one go, then a usage chunk and `[DONE]`.
 * - `GET /health`, `GET /v1/models` (so kvgate's health and model checks pass).
 * - A ZMQ PUB socket (vLLM's KV-event transport) that publishes nothing, so
 *   kvgate in KV-event mode runs its real subscription against it.
 *
 * Prints one JSON line `{"url":..., "kv_events":...}` on stdout when ready.
 * Usage: node trivial-backend.js <model>
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { Publisher } from 'zeromq';

const model = process.argv[2] ?? 'bench-model';

/** Cheap field reads on the raw body: this engine must not cost more than the proxies it measures. */
function fieldOf(body: string, re: RegExp): string | undefined {
  return re.exec(body)?.[1];
}

function completion(created: number): string {
  return JSON.stringify({
    id: 'cmpl-bench',
    object: 'chat.completion',
    created,
    model,
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'length' }],
    usage: { prompt_tokens: 9, completion_tokens: 1, total_tokens: 10 },
  });
}

/** The whole SSE answer for `chunks` tokens, built once per distinct count. */
const streams = new Map<number, Buffer>();
function streamBytes(chunks: number, created: number): Buffer {
  let bytes = streams.get(chunks);
  if (bytes !== undefined) return bytes;
  let s = '';
  for (let i = 0; i < chunks; i++) {
    const chunk = {
      id: 'cmpl-bench',
      object: 'chat.completion.chunk',
      created,
      model,
      choices: [
        {
          index: 0,
          delta: i === 0 ? { role: 'assistant', content: 'x' } : { content: 'x' },
          finish_reason: i === chunks - 1 ? 'length' : null,
        },
      ],
    };
    s += `data: ${JSON.stringify(chunk)}\n\n`;
  }
  s += `data: ${JSON.stringify({ id: 'cmpl-bench', object: 'chat.completion.chunk', created, model, choices: [], usage: { prompt_tokens: 9, completion_tokens: chunks, total_tokens: 9 + chunks } })}\n\n`;
  s += 'data: [DONE]\n\n';
  bytes = Buffer.from(s);
  streams.set(chunks, bytes);
  return bytes;
}

const created = Math.floor(Date.now() / 1000);
const json = Buffer.from(completion(created));
const models = Buffer.from(
  JSON.stringify({ object: 'list', data: [{ id: model, object: 'model', created, owned_by: 'bench', parent: null }] }),
);

function answer(req: IncomingMessage, res: ServerResponse, body: string): void {
  if (req.method === 'GET') {
    const out = req.url === '/v1/models' ? models : Buffer.from('{"status":"ok"}');
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': out.length });
    res.end(out);
    return;
  }
  if (fieldOf(body, /"stream"\s*:\s*(true)/) === 'true') {
    const n = Math.max(1, Number(fieldOf(body, /"max_tokens"\s*:\s*(\d+)/) ?? '16'));
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    res.end(streamBytes(n, created));
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json', 'content-length': json.length });
  res.end(json);
}

async function main(): Promise<void> {
  const pub = new Publisher();
  await pub.bind('tcp://127.0.0.1:*');
  const server = createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => answer(req, res, body));
  });
  server.listen(0, '127.0.0.1', () => {
    const addr = server.address() as { port: number };
    process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${addr.port}`, kv_events: pub.lastEndpoint })}\n`);
  });
  const stop = (): void => {
    server.close();
    server.closeAllConnections();
    pub.close();
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

main().catch((err: unknown) => {
  process.stderr.write(`trivial backend failed: ${String(err)}\n`);
  process.exitCode = 1;
});
