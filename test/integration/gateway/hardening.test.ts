/**
 * Issue 13 against `kvgate serve` as an operator runs it (a real process, a
 * config file, engines on loopback): slow clients do not starve it, engine
 * failures never show a client an engine URL, and SIGTERM answers or cleanly
 * refuses connections opened right at it.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { jsonLines, startMockerEngine, startServe, stopServed, type ServedProc } from '../../helpers/serve-process.js';
import {
  sendJson,
  sseEvent,
  sseHead,
  startHttpEngine,
  completionChunk,
  type HttpEngine,
} from '../../helpers/http-engine.js';
import { until } from '../../helpers/until.js';

let dir: string;
const procs: ServedProc[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'kvgate-hardening-'));
});
afterEach(async () => {
  await Promise.all(procs.splice(0).map((p) => stopServed(p)));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let configs = 0;
function configFile(doc: Record<string, unknown>): string {
  const path = join(dir, `kvgate-${configs++}.json`);
  writeFileSync(
    path,
    JSON.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      ...doc,
    }),
  );
  return path;
}

async function mocker(extra: readonly string[] = []): Promise<{ url: string; model: string }> {
  const m = await startMockerEngine(['--no-kv-events', ...extra]);
  procs.push(m.proc);
  return { url: String(m.engine.url), model: String(m.engine.model) };
}

async function serve(doc: Record<string, unknown>): Promise<{ proc: ServedProc; url: string }> {
  const s = await startServe(configFile(doc));
  procs.push(s.proc);
  return s;
}

const completion = (model: string, extra: Record<string, unknown> = {}): string =>
  JSON.stringify({ model, prompt: [1, 2, 3, 4, 5, 6, 7, 8], max_tokens: 2, ...extra });

describe('slow clients (issue 13, what it must show: 2)', () => {
  it('500 slow-body connections on a gateway with max_concurrent_requests 64 do not stop 50 normal requests', async () => {
    const engine = await mocker();
    const { url } = await serve({
      limits: { max_concurrent_requests: 64, body_timeout_ms: 60_000, max_pending_connections_per_client: 1000 },
      models: [{ name: engine.model, router_mode: 'round-robin', workers: [{ id: 1, url: engine.url }] }],
    });
    const { port } = new URL(url);
    // Each sends its headers and one byte of a 1000-byte body, then nothing.
    const slow: Socket[] = [];
    for (let i = 0; i < 500; i++) {
      const s = connect({ host: '127.0.0.1', port: Number(port) });
      s.on('error', () => undefined);
      s.write(
        `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{`,
      );
      slow.push(s);
    }
    await until(() => slow.every((s) => s.bytesWritten > 0), '500 slow connections written');
    const statuses: number[] = [];
    for (let batch = 0; batch < 5; batch++) {
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          fetch(`${url}/v1/completions`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: completion(engine.model),
          }).then(async (r) => {
            await r.arrayBuffer();
            return r.status;
          }),
        ),
      );
      statuses.push(...answers);
    }
    expect(statuses).toEqual(Array(50).fill(200));
    expect(slow.filter((s) => s.destroyed).length).toBe(0); // the slow ones were still open all along
    for (const s of slow) s.destroy();
  }, 60_000);
});

/** A scripted engine: what it does depends on the request id the gateway forwards (x-request-id). */
async function scriptedEngine(): Promise<HttpEngine> {
  return startHttpEngine((req, res) => {
    const kind = String(req.headers['x-request-id']).split('-')[0];
    switch (kind) {
      case 'fail':
        return sendJson(res, 500, {
          error: { message: 'CUDA out of memory at http://10.9.8.7:8000/internal SECRET-UPSTREAM-TEXT' },
        });
      case 'disconnect':
        res.socket?.destroy();
        return;
      case 'badjson':
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('not json, see http://10.9.8.7:8000/debug SECRET-UPSTREAM-TEXT');
        return;
      case 'broken':
        sseHead(res);
        res.write(sseEvent(completionChunk('Hel')));
        setImmediate(() => res.socket?.destroy());
        return;
      default:
        return sendJson(res, 200, {
          id: 'x',
          object: 'text_completion',
          choices: [{ index: 0, text: 'ok', finish_reason: 'length' }],
        });
    }
  });
}

/** A loopback port nothing listens on. */
async function closedPort(): Promise<number> {
  const srv = createNetServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

describe('engine failures reach clients without engine URLs (issue 13 items 10 and 6)', () => {
  let scripted: HttpEngine | undefined;
  afterAll(async () => {
    await scripted?.close();
  });

  it("every failure kind answers with its code and the worker id; the URL and the engine's text go to the log only", async () => {
    scripted = await scriptedEngine();
    const failing = await mocker(['--fault-error-rate', '1']);
    const deadUrl = `http://127.0.0.1:${await closedPort()}`;
    const model = failing.model;
    const { proc, url } = await serve({
      models: [
        {
          name: model,
          router_mode: 'direct',
          workers: [
            { id: 1, url: scripted.url },
            { id: 2, url: deadUrl },
            { id: 3, url: failing.url },
          ],
        },
      ],
    });
    const cases: { id: string; worker: number; stream?: boolean; codes: string[] }[] = [
      { id: 'dead-1', worker: 2, codes: ['KVG_ERR_ENGINE_UNREACHABLE', 'KVG_ERR_NO_WORKERS'] },
      { id: 'fail-1', worker: 1, codes: ['KVG_ERR_ENGINE_FAILED'] },
      { id: 'disconnect-1', worker: 1, codes: ['KVG_ERR_ENGINE_DISCONNECTED'] },
      { id: 'badjson-1', worker: 1, codes: ['KVG_ERR_ENGINE_BAD_RESPONSE'] },
      { id: 'broken-1', worker: 1, stream: true, codes: ['KVG_ERR_ENGINE_STREAM_BROKEN'] },
      { id: 'mocker-1', worker: 3, codes: ['KVG_ERR_ENGINE_FAILED'] },
    ];
    for (const c of cases) {
      const r = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-request-id': c.id, 'x-worker-instance-id': String(c.worker) },
        body: completion(model, c.stream === true ? { stream: true } : {}),
      });
      const text = await r.text();
      expect(text, c.id).not.toContain('http://');
      expect(text, c.id).not.toContain('127.0.0.1');
      expect(text, c.id).not.toContain('SECRET-UPSTREAM-TEXT');
      const errorJson =
        c.stream === true
          ? text
              .split('\n\n')
              .find((e) => e.includes('"error"'))!
              .slice('data: '.length)
          : text;
      const { error } = JSON.parse(errorJson) as { error: { code: string; message: string } };
      expect(c.codes, `${c.id}: ${error.code}`).toContain(error.code);
      if (error.code !== 'KVG_ERR_NO_WORKERS') expect(error.message, c.id).toContain(`worker ${c.worker}`);
      if (c.stream !== true) expect(r.status, c.id).toBeGreaterThanOrEqual(500);
    }
    // The log keeps what the client was not told: the engine URL and the engine's own text, under the request id.
    await until(
      () => jsonLines(proc).some((o) => o.reqId === 'fail-1' && JSON.stringify(o).includes('SECRET-UPSTREAM-TEXT')),
      'the engine text in the log',
    );
    const logged = jsonLines(proc).find((o) => o.reqId === 'fail-1' && o.msg === 'engine error')!;
    expect(JSON.stringify(logged)).toContain(scripted.url);
  }, 60_000);
});

describe('SIGTERM (issue 13 item 17)', () => {
  it('50 connections opened right at SIGTERM each get an answer or a clean refusal, none a reset', async () => {
    const engine = await mocker();
    const { proc, url } = await serve({
      models: [{ name: engine.model, router_mode: 'round-robin', workers: [{ id: 1, url: engine.url }] }],
    });
    const port = Number(new URL(url).port);
    const body = completion(engine.model);
    const head = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`;
    /** One connection; `send` writes its request. Resolves with the status line's code, or the socket error. */
    const open = (): { send: () => void; connected: () => boolean; outcome: Promise<string> } => {
      const s = connect({ host: '127.0.0.1', port });
      let connected = false;
      s.once('connect', () => (connected = true));
      let text = '';
      const outcome = new Promise<string>((resolve) => {
        s.on('data', (d: Buffer) => (text += d.toString('latin1')));
        s.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
        s.on('close', () => resolve(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 'closed without an answer'));
      });
      return { send: () => s.write(`${head}${body}`), connected: () => connected, outcome };
    };
    // Half are connected (accepted) but have not sent their request when SIGTERM arrives; they send it once
    // the gateway has started shutting down. The other half connect right after the signal.
    const early = Array.from({ length: 25 }, open);
    await until(() => early.every((c) => c.connected()), 'the early connections established');
    const exited = new Promise((resolve) => proc.child.once('exit', resolve));
    proc.child.kill('SIGTERM');
    const late = Array.from({ length: 25 }, () => {
      const c = open();
      c.send();
      return c;
    });
    await until(() => jsonLines(proc).some((o) => String(o.msg).startsWith('shutting down')), 'the shutdown line');
    for (const c of early) c.send();
    const outcomes = await Promise.all([...early, ...late].map((c) => c.outcome));
    await exited;
    for (const o of outcomes) expect(['200', '503', 'ECONNREFUSED'], `outcomes: ${outcomes.join(' ')}`).toContain(o);
    expect(outcomes.slice(0, 25).every((o) => o === '503')).toBe(true);
  }, 60_000);
});
