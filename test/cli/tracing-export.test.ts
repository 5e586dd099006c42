/**
 * `kvgate serve`'s span export (cli/tracing.ts's `startTracing`) against a collector that is slow, gone or fine,
 * through an OTLP/HTTP (JSON) receiver run by this test (test/helpers/otlp-receiver.ts, a double that speaks the
 * protocol) and a black hole that takes connections and never answers:
 * - spans ended while the collector does not answer are buffered up to a bound, the rest dropped (nothing grows
 *   without limit, and ending a span never waits on the network);
 * - shutdown exports what is buffered (a span ended just before it reaches the collector), and with the collector
 *   hung or down it still ends, within the export bound (`tracing.export_timeout_ms`, 2 s by default; it waited
 *   for OTLP's default exporter timeout, 10 s, before), its warn line naming the spans given up.
 */
import { context, propagation, trace } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { startTracing } from '../../src/cli/tracing.js';
import { GATEWAY_DEFAULTS } from '../../src/config/index.js';
import { silentLogger } from '../../src/common/index.js';
import { inSpan } from '../../src/common/tracing.js';
import { startBlackHole, type BlackHole } from '../helpers/black-hole.js';
import { captureWarnings } from '../helpers/capture-log.js';
import { retainedBytes } from '../helpers/retained-bytes.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { until } from '../helpers/until.js';

const CONFIG = { sampleRatio: 1, exportTimeoutMs: GATEWAY_DEFAULTS.tracingExportTimeoutMs };
/** The bound, and room for the exporter's own steps around it on a loaded machine. */
const WITHIN_BOUND_MS = GATEWAY_DEFAULTS.tracingExportTimeoutMs + 1000;

let cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
  trace.disable();
  propagation.disable();
  context.disable();
});

async function blackHole(): Promise<BlackHole> {
  const hole = await startBlackHole();
  cleanup.push(() => hole.close());
  return hole;
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
    const warned: Record<string, unknown>[] = [];
    await tracing.shutdown(captureWarnings(warned));
    expect(otlp.spans.map((s) => s.name)).toEqual(['kvgate.test.last']);
    expect(warned).toEqual([]);
  });

  it('a collector that never answers: ending spans does not wait, the buffer is bounded, shutdown ends', async () => {
    const hole = await blackHole();
    const tracing = startTracing({ ...CONFIG, otlpEndpoint: hole.url }, {})!;
    const started = performance.now();
    for (let i = 0; i < 20_000; i++) await inSpan('kvgate.test.lost', async () => undefined);
    expect(performance.now() - started).toBeLessThan(5_000);
    await until(() => hole.sockets.length > 0, 'an export attempt', 5_000);
    const before = retainedBytes();
    for (let i = 0; i < 100_000; i++) await inSpan('kvgate.test.lost', async () => undefined);
    // 100 000 more spans kept would take over 100 MB (an unbounded queue: 56 MB for 50 000); past the bound, none.
    // Read after full collections: the garbage of 100 000 spans not yet collected once read 44 MB.
    expect(retainedBytes() - before).toBeLessThan(20 * 1024 * 1024);
    // The last flush is given up at the export bound, with a warn line, and shutdown ends.
    const warned: Record<string, unknown>[] = [];
    const shutdownAt = performance.now();
    await tracing.shutdown(captureWarnings(warned));
    expect(performance.now() - shutdownAt).toBeLessThan(WITHIN_BOUND_MS);
    expect(warned).toEqual([
      {
        err: expect.objectContaining({ message: expect.stringMatching(/time/i) }),
        exportTimeoutMs: 2000,
        lostSpans: expect.any(Number),
        byReason: { export_failed: expect.any(Number) },
      },
    ]);
    // The queue was full (2,048) as shutdown began; with the export in flight then, if it had not failed yet.
    expect(warned[0]!.lostSpans).toBeGreaterThanOrEqual(2_048);
  }, 40_000);

  it('a collector that is down (connection refused): shutdown ends within the export bound', async () => {
    const hole = await blackHole();
    const url = hole.url;
    await new Promise((r) => hole.server.close(r));
    const tracing = startTracing({ ...CONFIG, otlpEndpoint: url }, {})!;
    for (let i = 0; i < 20_000; i++) await inSpan('kvgate.test.lost', async () => undefined);
    const shutdownAt = performance.now();
    // The exporter retries a refused connection with backoff until the bound (the exporter's timeout, 2 s).
    const warned: Record<string, unknown>[] = [];
    await tracing.shutdown(captureWarnings(warned));
    expect(performance.now() - shutdownAt).toBeLessThan(WITHIN_BOUND_MS);
    expect(warned).toEqual([expect.objectContaining({ exportTimeoutMs: 2000 })]);
  }, 40_000);

  it("the export bound: the config's, or OTLP's timeout variables when the config names no endpoint", () => {
    const bound = (config: { otlpEndpoint?: string }, env: Record<string, string>): number | undefined => {
      const tracing = startTracing({ ...CONFIG, otlpEndpoint: undefined, ...config }, env);
      cleanup.push(() => tracing!.shutdown(silentLogger));
      return tracing?.exportTimeoutMs;
    };
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:1' };
    expect(bound({}, base)).toBe(2000);
    expect(bound({}, { ...base, OTEL_EXPORTER_OTLP_TIMEOUT: '500' })).toBe(500);
    expect(bound({}, { ...base, OTEL_EXPORTER_OTLP_TIMEOUT: '500', OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '700' })).toBe(
      700,
    );
    expect(bound({}, { ...base, OTEL_EXPORTER_OTLP_TIMEOUT: 'soon' })).toBe(2000);
    // The config names the endpoint: its bound (2 s by default) wins.
    expect(bound({ otlpEndpoint: 'http://127.0.0.1:1' }, { OTEL_EXPORTER_OTLP_TIMEOUT: '500' })).toBe(2000);
  });
});
