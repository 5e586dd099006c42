/**
 * `kvgate serve` losing spans while it runs, to a collector that refuses its exports (an OTLP/HTTP receiver answering
 * 500, test/helpers/otlp-receiver.ts): the spans are counted in `kvgate_tracing_spans_dropped_total{reason}` and the
 * episode is one warn line however many batches fail; once the collector takes exports again, one info line says so
 * and the spans arrive. Before, the SDK's report of each failed export reached nobody: no line, no count. A collector
 * that answers a partial success: the spans it rejected are counted as `rejected`, the episode one warn line with
 * the collector's message. Before, each partial success was an SDK warning line, and nothing counted them.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startOtlpReceiver } from '../../helpers/otlp-receiver.js';
import { jsonLines, type ServedGateway } from '../../helpers/serve-process.js';
import { traceId, tracedGateway } from '../../helpers/traced-gateway.js';
import { until } from '../../helpers/until.js';

/** The gateway's span-loss counter by reason (scrapes are not traced: reading it adds no span), and its log lines. */
function readers(gw: ServedGateway): {
  dropped(reason: string): Promise<number>;
  lines(msg: string): Record<string, unknown>[];
} {
  return {
    dropped: async (reason) => {
      const text = await (await fetch(`${gw.url}/metrics`)).text();
      const line = new RegExp(`^kvgate_tracing_spans_dropped_total\\{reason="${reason}"\\} (\\S+)$`, 'm').exec(text);
      return line === null ? NaN : Number(line[1]);
    },
    lines: (msg) => jsonLines(gw.proc).filter((l) => String(l.msg).startsWith(msg)),
  };
}

describe('kvgate serve: spans lost to a collector that refuses exports', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('are counted by reason, the episode is one warn line, and its end an info line once exports succeed', async () => {
    const otlp = await startOtlpReceiver();
    cleanups.push(() => otlp.close());
    otlp.refuse(500);
    const { gw, probe } = await tracedGateway(otlp.url, cleanups);
    const { dropped, lines } = readers(gw);

    // Both reasons are there at zero from the start.
    expect(await dropped('export_failed')).toBe(0);
    expect(await dropped('queue_full')).toBe(0);
    expect(await dropped('rejected')).toBe(0);

    // Two batches refused, one after the other (the batch delay is 1 s): each one's span counted.
    await probe(1);
    await until(async () => (await dropped('export_failed')) === 1, 'the first batch counted', 10_000);
    await probe(2);
    await until(async () => (await dropped('export_failed')) === 2, 'the second batch counted', 10_000);
    expect(otlp.posts()).toBe(2);
    expect(await dropped('queue_full')).toBe(0);
    // One warn line for the episode, not one per batch.
    const lost = lines('tracing: spans are being lost');
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatchObject({ level: 40, reason: 'export_failed', lostSpans: 1 });
    expect(lines('tracing: spans are exported again')).toEqual([]);

    // The collector takes exports again: the next batch arrives and ends the episode with an info line.
    otlp.refuse(undefined);
    await probe(3);
    await until(() => lines('tracing: spans are exported again').length === 1, 'the recovery line', 10_000);
    expect(lines('tracing: spans are exported again')[0]).toMatchObject({ level: 30, lostSpans: 2 });
    expect(otlp.spans.map((s) => s.traceId)).toEqual([traceId(3)]);
    expect(await dropped('export_failed')).toBe(2);
    expect(lines('tracing: spans are being lost')).toHaveLength(1);
  }, 60_000);

  it("a partial success: the rejected spans counted as rejected, one warn line with the collector's message", async () => {
    const otlp = await startOtlpReceiver();
    cleanups.push(() => otlp.close());
    otlp.partialSuccess(1, 'span rejected by policy');
    const { gw, probe } = await tracedGateway(otlp.url, cleanups);
    const { dropped, lines } = readers(gw);
    expect(await dropped('rejected')).toBe(0);

    await probe(1);
    await until(async () => (await dropped('rejected')) === 1, 'the first rejection counted', 10_000);
    await probe(2);
    await until(async () => (await dropped('rejected')) === 2, 'the second rejection counted', 10_000);
    expect(await dropped('export_failed')).toBe(0);
    const lost = lines('tracing: spans are being lost');
    expect(lost).toHaveLength(1);
    expect(lost[0]).toMatchObject({
      level: 40,
      reason: 'rejected',
      lostSpans: 1,
      collectorMessage: 'span rejected by policy',
    });
    // The SDK's own report of each partial success is no line of its own.
    expect(lines('tracing: the OpenTelemetry SDK')).toEqual([]);
  }, 60_000);
});
