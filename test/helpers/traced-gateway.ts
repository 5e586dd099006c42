/**
 * `kvgate serve` tracing every traced request to an OTLP collector at `collector` (sample ratio 1), in front of one
 * `kvgate mocker` engine, for the tracing suites: both processes are stopped through `cleanups` (the caller's
 * per-test list, run in reverse). `probe(n)` asks `/health` with a sampled W3C traceparent of trace id `n`: one span,
 * ended as the probe is answered.
 */
import { serveConfigObject, startMockerEngine, stopServed, type ServedGateway } from './serve-process.js';

/** The trace id of probe `n`, as the collector receives it. */
export const traceId = (n: number): string => n.toString(16).padStart(32, '0');

/** A sampled W3C traceparent for trace `n`: a request that carries one is traced. */
const traceparent = (n: number): string => `00-${traceId(n)}-00f067aa0ba902b7-01`;

export interface TracedGateway {
  readonly gw: ServedGateway;
  probe(n: number): Promise<void>;
}

export async function tracedGateway(collector: string, cleanups: (() => Promise<void>)[]): Promise<TracedGateway> {
  const m = await startMockerEngine();
  cleanups.push(() => stopServed(m.proc));
  const engine = m.engine;
  const gw = await serveConfigObject({
    listen: { host: '127.0.0.1', port: 0 },
    preprocess: { threads: 0 },
    log: { level: 'info' },
    tracing: { otlp_endpoint: collector, sample_ratio: 1 },
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
    const res = await fetch(`${gw.url}/health`, { headers: { traceparent: traceparent(n) } });
    await res.arrayBuffer();
  };
  return { gw, probe };
}
