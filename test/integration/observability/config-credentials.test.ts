/**
 * `GET /admin/config` and the log over a real `kvgate serve`: NATS server URLs (`nats://user:pass@host`,
 * `nats://token@host`) and an OTLP endpoint may carry credentials; neither the admin view of the
 * configuration nor any log line shows them, while the rest of each URL stays readable.
 */
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'cred-model';
const SECRETS = /s3cret|nats-t0ken|hunter2|alice|bob/;

/** A port the OS chose, closed again: nothing listens there, so the gateway's NATS connections are refused. */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as { port: number };
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

describe('kvgate serve never shows the credentials in its NATS and OTLP URLs', () => {
  let suite: MockerSuite;
  let gateway: CliProcess;
  let url: string;
  let port: number;
  let collector: Server;
  let otlpPort: number;

  beforeAll(async () => {
    suite = await startMockerSuite('creds', ['--model', MODEL, '--tokenizer', 'demo'], 1);
    port = await closedPort();
    // An OTLP collector that takes every export: the gateway's last flush at exit then ends at once.
    collector = createHttpServer((req, res) => req.resume().on('end', () => res.end()));
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    otlpPort = (collector.address() as { port: number }).port;
    const nats = [`nats://alice:s3cret@127.0.0.1:${port}`, `nats://nats-t0ken@127.0.0.1:${port}`];
    const file = suite.write(
      'kvgate.yaml',
      serveConfig(
        MODEL,
        ['router_mode: round-robin', 'workers:', `  - ${workerEntry(1, suite.engines[0]!)}`],
        [
          'admin: { enabled: true }',
          'preprocess: { threads: 0 }',
          `replicas: { nats: { servers: ${JSON.stringify(nats)} } }`,
          `tracing: { otlp_endpoint: "http://bob:hunter2@127.0.0.1:${otlpPort}" }`,
        ],
      ),
    );
    const started = await startServeCli(file);
    gateway = started.proc;
    suite.procs.push(gateway);
    url = started.url;
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
    collector?.close();
  });

  it('GET /admin/config shows each URL without its user, password or token', async () => {
    const res = await fetch(`${url}/admin/config`);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).not.toMatch(SECRETS);
    const c = JSON.parse(text) as { replicas: { natsServers: string[] }; tracing: { otlpEndpoint: string } };
    expect(c.replicas.natsServers).toEqual([`nats://***@127.0.0.1:${port}`, `nats://***@127.0.0.1:${port}`]);
    expect(c.tracing.otlpEndpoint).toBe(`http://***@127.0.0.1:${otlpPort}/`);
  });

  it('no log line shows them either', () => {
    expect(gateway.output()).toMatch(/tracing: spans are exported/);
    expect(gateway.output()).not.toMatch(SECRETS);
  });

  it('exits on SIGTERM though its NATS server never came up', async () => {
    // Before: the NATS client's first-connect loop kept the stopped gateway's process alive (killed by SIGKILL).
    const exited = new Promise<number | null>((resolve) => gateway.child.once('exit', (code) => resolve(code)));
    gateway.child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(gateway.output()).not.toMatch(SECRETS);
  }, 20_000);
});
