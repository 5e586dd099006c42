/**
 * `kvgate serve` with its OTLP collector black-holed (a listener that takes connections and never answers) stops
 * on SIGTERM within `tracing.export_timeout_ms` (2 s by default) of its tracing shutdown: the spans still queued
 * are given up with a warn line, and nothing of the export is left to hold the process (the exit guard does not
 * fire). Before, the last export waited for the exporter's own default timeout, 10 s, which a Kubernetes pod's
 * termination grace period pays for.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { startBlackHole } from '../../helpers/black-hole.js';
import { jsonLines } from '../../helpers/serve-process.js';
import { tracedGateway } from '../../helpers/traced-gateway.js';
import { until } from '../../helpers/until.js';

describe('kvgate serve: tracing shutdown with the collector black-holed', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('exits within the export timeout of SIGTERM, the queued spans given up with a warn line', async () => {
    const hole = await startBlackHole();
    cleanups.push(() => hole.close());
    const { gw, probe } = await tracedGateway(hole.url, cleanups);

    // The first span's export (sent after the 1 s batch delay) hangs at the black hole...
    await probe(1);
    await until(() => hole.received() > 0, 'an export at the black hole', 10_000);
    // ... and while it does, the batch processor sends nothing more: this span stays queued for shutdown's flush.
    await probe(2);

    // 'close': the output read to its end, so the lines logged just before the exit are in it.
    const exited = new Promise<number | null>((resolve) => gw.proc.child.once('close', (code) => resolve(code)));
    const signalled = performance.now();
    gw.proc.child.kill('SIGTERM');
    const code = await Promise.race([exited, new Promise<'alive'>((r) => setTimeout(() => r('alive'), 20_000))]);
    const tookMs = performance.now() - signalled;
    expect(code).toBe(0);
    const lines = jsonLines(gw.proc);
    // (The first export's failure, were it to come before SIGTERM, would be a line of its own: see otlp-span-loss.)
    const warned = lines.filter(
      (l) => l.level === 40 && String(l.msg).startsWith('tracing: the last spans could not be exported'),
    );
    expect(warned).toHaveLength(1);
    // Nothing of the export was left to keep the process up (the exit guard logs at warn when it ends one).
    expect(lines.filter((l) => String(l.msg).startsWith('shutdown: handles still open'))).toEqual([]);
    // The drain (250 ms without a new connection), the fleet's close, then at most the 2 s export bound. Before:
    // the flush waited for the exporter's default timeout, and the process exited about 10.5 s after SIGTERM.
    expect(tookMs).toBeLessThan(4_500);
  }, 60_000);
});
