/**
 * `kvgate serve`'s span export (cli/tracing.ts's `startTracing`) against a collector that is slow, gone or fine,
 * through an OTLP/HTTP (JSON) receiver run by this test (test/helpers/otlp-receiver.ts, a double that speaks the
 * protocol) and a black hole that takes connections and never answers:
 * - spans ended while the collector does not answer are buffered up to a bound, the rest dropped (nothing grows
 *   without limit, and ending a span never waits on the network);
 * - shutdown exports what is buffered (a span ended just before it reaches the collector), and with the collector
 *   hung or down it still ends, within the exporter's timeout (10 s).
 */
import { createServer, type Server, type Socket } from 'node:net';
import { context, propagation, trace } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { startTracing } from '../../src/cli/tracing.js';
import { inSpan } from '../../src/common/tracing.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { until } from '../helpers/until.js';

const CONFIG = { sampleRatio: 1 };

let cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
  trace.disable();
  propagation.disable();
  context.disable();
});

/** A TCP server that accepts every connection and never answers (a collector that hangs). */
async function blackHole(): Promise<{ url: string; sockets: Socket[]; server: Server }> {
  const sockets: Socket[] = [];
  const server = createServer((s) => {
    sockets.push(s);
    s.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => server.close(r));
  });
  const port = (server.address() as { port: number }).port;
  return { url: `http://127.0.0.1:${port}`, sockets, server };
}

async function receiver(): Promise<OtlpReceiver> {
  const r = await startOtlpReceiver();
  cleanup.push(() => r.close());
  return r;
}

describe('span export over OTLP/HTTP', () => {
  it('shutdown exports the spans ended just before it', async () => {
    const otlp = await receiver();
    const tracing = startTracing({ ...CONFIG, otlpEndpoint: otlp.url }, {})!;
    await inSpan('kvgate.test.last', async () => undefined);
    // The batch delay (1 s) has not passed: only shutdown's flush can have sent it.
    expect(otlp.spans).toEqual([]);
    await tracing.shutdown();
    expect(otlp.spans.map((s) => s.name)).toEqual(['kvgate.test.last']);
  });

  it('a collector that never answers: ending spans does not wait, the buffer is bounded, shutdown ends', async () => {
    const hole = await blackHole();
    const tracing = startTracing({ ...CONFIG, otlpEndpoint: hole.url }, {})!;
    const started = performance.now();
    for (let i = 0; i < 20_000; i++) await inSpan('kvgate.test.lost', async () => undefined);
    expect(performance.now() - started).toBeLessThan(5_000);
    await until(() => hole.sockets.length > 0, 'an export attempt', 5_000);
    const heap = process.memoryUsage().heapUsed;
    for (let i = 0; i < 100_000; i++) await inSpan('kvgate.test.lost', async () => undefined);
    // 100 000 more spans kept would take over 100 MB (an unbounded queue: 56 MB for 50 000); past the bound, none.
    expect(process.memoryUsage().heapUsed - heap).toBeLessThan(40 * 1024 * 1024);
    // The export in flight fails at the exporter's timeout (10 s): shutdown reports it (serve logs a warning) and ends.
    const shutdownAt = performance.now();
    await expect(tracing.shutdown()).rejects.toThrow(/timed out/);
    expect(performance.now() - shutdownAt).toBeLessThan(15_000);
  }, 40_000);

  it('a collector that is down (connection refused): shutdown ends within the exporter timeout', async () => {
    const hole = await blackHole();
    const url = hole.url;
    await new Promise((r) => hole.server.close(r));
    const tracing = startTracing({ ...CONFIG, otlpEndpoint: url }, {})!;
    for (let i = 0; i < 20_000; i++) await inSpan('kvgate.test.lost', async () => undefined);
    const shutdownAt = performance.now();
    // The exporter retries a refused connection with backoff until its timeout (10 s, OTLP's default).
    await tracing.shutdown().catch(() => undefined);
    expect(performance.now() - shutdownAt).toBeLessThan(12_000);
  }, 40_000);
});
