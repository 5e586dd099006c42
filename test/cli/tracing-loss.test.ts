/**
 * Spans lost while tracing runs (cli/tracing-loss.ts through `startTracing`, the real SDK and OTLP exporter), at a
 * collector that never answers (test/helpers/black-hole.ts): each timed-out export's spans are counted as
 * `export_failed`, the spans the batch processor drops at its full queue as `queue_full`, and the whole episode is
 * one warn line. Before, both went to the SDK's diagnostic logger and error handler, which nothing read.
 */
import { context, diag, propagation, trace } from '@opentelemetry/api';
import { afterEach, describe, expect, it } from 'vitest';
import { startTracing, type Tracing } from '../../src/cli/tracing.js';
import { silentLogger, type Logger } from '../../src/common/index.js';
import { GATEWAY_DEFAULTS } from '../../src/config/index.js';
import { inSpan } from '../../src/common/tracing.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { startBlackHole } from '../helpers/black-hole.js';
import { startOtlpReceiver } from '../helpers/otlp-receiver.js';
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
    expect(await droppedBy(metrics)).toEqual({ export_failed: 0, queue_full: 0 });

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
    trace.getTracer('test').startSpan('kvgate.test.late').setAttribute('', 2).end();
    expect(lines).toHaveLength(2);
    // Shutdown gives the SDK's diagnostic logger back: nothing of this tracing hears it any more.
    await tracing.shutdown(silentLogger);
    diag.warn('after shutdown');
    expect(lines).toHaveLength(2);
  });
});
