/**
 * `kvgate serve` losing spans while it runs, to a collector that refuses its exports (an OTLP/HTTP receiver answering
 * 500, test/helpers/otlp-receiver.ts): the spans are counted in `kvgate_tracing_spans_dropped_total{reason}` and the
 * episode is one warn line however many batches fail; once the collector takes exports again, one info line says so
 * and the spans arrive. Before, the SDK's report of each failed export reached nobody: no line, no count.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startOtlpReceiver } from '../../helpers/otlp-receiver.js';
import { jsonLines } from '../../helpers/serve-process.js';
import { traceId, tracedGateway } from '../../helpers/traced-gateway.js';
import { until } from '../../helpers/until.js';

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
    // Scrapes are not traced: reading the counter adds no span.
    const dropped = async (reason: string): Promise<number> => {
      const text = await (await fetch(`${gw.url}/metrics`)).text();
      const line = new RegExp(`^kvgate_tracing_spans_dropped_total\\{reason="${reason}"\\} (\\S+)$`, 'm').exec(text);
      return line === null ? NaN : Number(line[1]);
    };
    const lines = (msg: string): Record<string, unknown>[] =>
      jsonLines(gw.proc).filter((l) => String(l.msg).startsWith(msg));

    // Both reasons are there at zero from the start.
    expect(await dropped('export_failed')).toBe(0);
    expect(await dropped('queue_full')).toBe(0);

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
});
