/**
 * Spans lost while tracing runs (cli/tracing-loss.ts through `startTracing`, the real SDK and OTLP exporter), at a
 * collector that never answers (test/helpers/black-hole.ts): each timed-out export's spans are counted as
 * `export_failed`, the spans the batch processor drops at its full queue as `queue_full`, and the whole episode is
 * one warn line. Before, both went to the SDK's diagnostic logger and error handler, which nothing read.
 * At a collector double that answers over HTTP (test/helpers/otlp-receiver.ts): the spans a partial success
 * rejects are counted as `rejected` (before, each was an SDK warning line and no count); an export in flight as
 * shutdown begins that then fails, or is never answered, is counted and named in shutdown's warn line (before,
 * nothing was logged); and an SDK warning repeated per span is one line, its repeats summed up in one more.
 */
import { context, diag, propagation, trace } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { startTracing, type Tracing } from '../../src/cli/tracing.js';
import { silentLogger, type Logger } from '../../src/common/index.js';
import { GATEWAY_DEFAULTS } from '../../src/config/index.js';
import { inSpan } from '../../src/common/tracing.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { startBlackHole } from '../helpers/black-hole.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { until } from '../helpers/until.js';

let cleanup: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
  trace.disable();
  propagation.disable();
  context.disable();
});

interface Line {
  level: 'warn' | 'info';
  fields: Record<string, unknown>;
  msg: string;
}

function capture(lines: Line[]): Logger {
  const log: Logger = {
    ...silentLogger,
    warn: (fields, msg) => lines.push({ level: 'warn', fields, msg }),
    info: (fields, msg) => lines.push({ level: 'info', fields, msg }),
    child: () => log,
  };
  return log;
}

async function droppedBy(metrics: KvgateMetrics): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const v of (await metrics.tracingSpansDropped.get()).values) out[String(v.labels.reason)] = v.value;
  return out;
}

describe('spans lost while tracing runs', () => {
  it('a collector that never answers: timed-out exports and queue drops counted, one warn line', async () => {
    const hole = await startBlackHole();
    cleanup.push(() => hole.close());
    // Each export is given up after the default bound, 2 s: the spans below end well within it.
    const config = { sampleRatio: 1, exportTimeoutMs: GATEWAY_DEFAULTS.tracingExportTimeoutMs, otlpEndpoint: hole.url };
    const tracing: Tracing = startTracing(config, {})!;
    cleanup.push(() => tracing.shutdown(silentLogger));
    const metrics = new KvgateMetrics({ processMetrics: false });
    const lines: Line[] = [];
    tracing.reportLosses(capture(lines), metrics.tracingSpansDropped);
    expect(await droppedBy(metrics)).toEqual({ export_failed: 0, queue_full: 0, rejected: 0 });

    // 512 spans (a batch) are exported at once and hang at the black hole; the queue (2,048) fills behind them.
    for (let i = 0; i < 3_000; i++) await inSpan('kvgate.test.lost', async () => undefined);
    await until(async () => (await droppedBy(metrics)).export_failed! >= 512, 'a timed-out export counted', 10_000);
    // The processor reports its drops as the next span finds room (a batch left for the exporter).
    await until(
      async () => {
        await inSpan('kvgate.test.lost', async () => undefined);
        return (await droppedBy(metrics)).queue_full! > 0;
      },
      'the queue drops counted',
      10_000,
    );
    const counted = await droppedBy(metrics);
    expect(counted.rejected).toBe(0);
    // 3,000 ended while the first batch hung: 512 in it, 2,048 queued, the rest dropped.
    expect(counted.queue_full).toBe(3_000 - 512 - 2_048);
    expect(counted.export_failed! % 512).toBe(0);
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: {
          reason: 'export_failed',
          lostSpans: 512,
          err: expect.objectContaining({ message: expect.any(String) }),
        },
        msg: expect.stringMatching(/^tracing: spans are being lost/),
      },
    ]);
  }, 30_000);

  it("the SDK's other warnings are warn lines, those from before reportLosses as it is called", async () => {
    const otlp = await startOtlpReceiver();
    cleanup.push(() => otlp.close());
    const config = { sampleRatio: 1, exportTimeoutMs: GATEWAY_DEFAULTS.tracingExportTimeoutMs, otlpEndpoint: otlp.url };
    const tracing: Tracing = startTracing(config, {})!;
    cleanup.push(() => tracing.shutdown(silentLogger));
    // An attribute without a key: the SDK drops it with a warning on its diagnostic logger.
    trace.getTracer('test').startSpan('kvgate.test.early').setAttribute('', 1).end();
    const lines: Line[] = [];
    tracing.reportLosses(capture(lines), new KvgateMetrics({ processMetrics: false }).tracingSpansDropped);
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: { sdk: 'Invalid attribute key: ' },
        msg: expect.stringMatching(/^tracing: the OpenTelemetry/),
      },
    ]);
    // The same warning again: counted, not a line of its own...
    trace.getTracer('test').startSpan('kvgate.test.late').setAttribute('', 2).end();
    expect(lines).toHaveLength(1);
    // ... and summed up when tracing stops, which gives the SDK's diagnostic logger back: nothing here hears it after.
    await tracing.shutdown(silentLogger);
    expect(lines[1]).toEqual({
      level: 'warn',
      fields: { sdk: 'Invalid attribute key: ', repeats: 1 },
      msg: 'tracing: the OpenTelemetry SDK warned 1 more time: Invalid attribute key: ',
    });
    diag.warn('after shutdown');
    expect(lines).toHaveLength(2);
  });
});

describe('spans lost at a collector that answers', () => {
  async function traced(): Promise<{ otlp: OtlpReceiver; tracing: Tracing; metrics: KvgateMetrics; lines: Line[] }> {
    const otlp = await startOtlpReceiver();
    cleanup.push(() => otlp.close());
    const config = { sampleRatio: 1, exportTimeoutMs: GATEWAY_DEFAULTS.tracingExportTimeoutMs, otlpEndpoint: otlp.url };
    const tracing = startTracing(config, {})!;
    cleanup.push(() => tracing.shutdown(silentLogger));
    const metrics = new KvgateMetrics({ processMetrics: false });
    const lines: Line[] = [];
    tracing.reportLosses(capture(lines), metrics.tracingSpansDropped);
    return { otlp, tracing, metrics, lines };
  }

  /** A full batch (512 spans): the batch processor exports it at once, without waiting for its 1 s delay. */
  async function batch(): Promise<void> {
    for (let i = 0; i < 512; i++) await inSpan('kvgate.test.batch', async () => undefined);
  }

  it('partial successes: the rejected spans counted as rejected, the episode one warn line and its end one info line', async () => {
    const { otlp, metrics, lines } = await traced();
    otlp.partialSuccess(2, 'span too large');
    await batch();
    await until(async () => (await droppedBy(metrics)).rejected === 2, 'the first rejection counted', 10_000);
    await batch();
    await until(async () => (await droppedBy(metrics)).rejected === 4, 'the second rejection counted', 10_000);
    expect(await droppedBy(metrics)).toEqual({ export_failed: 0, queue_full: 0, rejected: 4 });
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: { reason: 'rejected', lostSpans: 2, collectorMessage: 'span too large' },
        msg: expect.stringMatching(/^tracing: spans are being lost \(the collector rejected spans of an export\)/),
      },
    ]);
    // The collector takes a whole export again: the episode ends.
    otlp.partialSuccess(undefined);
    await batch();
    await until(() => lines.length === 2, 'the recovery line', 10_000);
    expect(lines[1]).toEqual({
      level: 'info',
      fields: { lostSpans: 4 },
      msg: 'tracing: spans are exported again (4 lost)',
    });
    expect(otlp.posts()).toBe(3);
  });

  it('an export in flight as shutdown begins that fails: counted, and one warn line naming its spans', async () => {
    const { otlp, tracing, metrics, lines } = await traced();
    otlp.hold();
    await batch();
    await until(() => otlp.held() === 1, 'the export at the collector', 10_000);
    const stopped = tracing.shutdown(capture(lines));
    // Shutdown has nothing queued to flush; it waits for the export in flight, which the collector now refuses.
    otlp.release(500);
    await stopped;
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: { lostSpans: 512, byReason: { export_failed: 512 }, exportTimeoutMs: 2000 },
        msg: 'tracing: the last spans could not be exported; given up (512 lost at shutdown)',
      },
    ]);
    expect(await droppedBy(metrics)).toEqual({ export_failed: 512, queue_full: 0, rejected: 0 });
  });

  it('an export in flight as shutdown begins that is never answered: given up within the bound, counted, one line', async () => {
    const { otlp, tracing, metrics, lines } = await traced();
    otlp.hold();
    await batch();
    await until(() => otlp.held() === 1, 'the export at the collector', 10_000);
    const started = performance.now();
    await tracing.shutdown(capture(lines));
    // The export bound (2 s), and room for the exporter's own steps around it on a loaded machine.
    expect(performance.now() - started).toBeLessThan(GATEWAY_DEFAULTS.tracingExportTimeoutMs + 1000);
    expect(lines).toEqual([
      {
        level: 'warn',
        fields: { lostSpans: 512, byReason: { export_failed: 512 }, exportTimeoutMs: 2000 },
        msg: 'tracing: the last spans could not be exported; given up (512 lost at shutdown)',
      },
    ]);
    expect(await droppedBy(metrics)).toEqual({ export_failed: 512, queue_full: 0, rejected: 0 });
  }, 15_000);

  it('SDK warnings repeated per span: one line each, their repeats one line each with the count', async () => {
    const { tracing, lines } = await traced();
    // An attribute without a key, on every span: one warning per span.
    for (let i = 0; i < 1_000; i++) trace.getTracer('test').startSpan('kvgate.test.bad').setAttribute('', i).end();
    // A misbehaving component's warnings, each different: 32 are lines, the rest counted together.
    for (let i = 0; i < 100; i++) diag.warn(`warning ${i}`);
    expect(lines).toHaveLength(1 + 31);
    expect(lines[0]).toEqual({
      level: 'warn',
      fields: { sdk: 'Invalid attribute key: ' },
      msg: 'tracing: the OpenTelemetry SDK warns: Invalid attribute key: ',
    });
    expect(lines.at(-1)!.fields).toEqual({ sdk: 'warning 30' });
    // Shutdown sums the repeats up.
    await tracing.shutdown(silentLogger);
    expect(lines.slice(32)).toEqual([
      {
        level: 'warn',
        fields: { sdk: 'Invalid attribute key: ', repeats: 999 },
        msg: 'tracing: the OpenTelemetry SDK warned 999 more times: Invalid attribute key: ',
      },
      {
        level: 'warn',
        fields: { sdk: '(other warnings)', repeats: 69 },
        msg: 'tracing: the OpenTelemetry SDK warned 69 more times: (other warnings)',
      },
    ]);
  });
});
