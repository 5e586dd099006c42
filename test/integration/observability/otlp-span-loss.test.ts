/**
 * `kvgate serve` losing spans while it runs, to a collector that refuses its exports (an OTLP/HTTP receiver answering
 * 500, test/helpers/otlp-receiver.ts): the spans are counted in `kvgate_tracing_spans_dropped_total{reason}` and the
 * episode is one warn line however many batches fail; once the collector takes exports again, one info line says so
 * and the spans arrive. Before, the SDK's report of each failed export reached nobody: no line, no count.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startOtlpReceiver } from '../../helpers/otlp-receiver.js';
import { jsonLines, serveConfigObject, startMockerEngine, stopServed } from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

/** A sampled W3C traceparent: a probe that carries one is traced (one span, ended as the probe is answered). */
const traceId = (n: number): string => n.toString(16).padStart(32, '0');
const traceparent = (n: number): string => `00-${traceId(n)}-00f067aa0ba902b7-01`;

describe('kvgate serve: spans lost to a collector that refuses exports', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('are counted by reason, the episode is one warn line, and its end an info line once exports succeed', async () => {
    const otlp = await startOtlpReceiver();
    cleanups.push(() => otlp.close());
    otlp.refuse(500);
    const m = await startMockerEngine();
    cleanups.push(() => stopServed(m.proc));
    const engine = m.engine;
    const gw = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      tracing: { otlp_endpoint: otlp.url, sample_ratio: 1 },
      models: [
        {
          name: engine.model,
          block_size: 16,
          workers: [{ id: 1, url: engine.url, kv_events: (engine.kv_events as string[])[0] }],
        },
      ],
    });
    cleanups.push(() => gw.stop());
    const probe = async (n: number): Promise<void> => {
      await (await fetch(`${gw.url}/health`, { headers: { traceparent: traceparent(n) } })).arrayBuffer();
    };
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
