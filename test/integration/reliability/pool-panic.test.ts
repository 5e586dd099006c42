/**
 * Issue 23, section 2, item 1: outlier detection never takes a pool below its
 * panic threshold (`health.panic_threshold_percent`, 50 by default, Envoy's
 * semantics). Real processes: `kvgate mocker` engines behind `kvgate serve`,
 * two models. `solo` has one worker, answering 500 to every request: it
 * earns its ejection, but its pool would have no healthy worker left, so the
 * pool enters panic (a warn line, `kvgate_pool_panic` 1) and keeps routing to
 * it; once the engine recovers the next request succeeds, and the pool leaves
 * panic when the ejection time is over. Before the fix the worker was ejected
 * and the model answered 503 for the whole ejection. `trio` has three workers,
 * one failing: it is ejected as before (its pool keeps two of three healthy,
 * no panic), no request reaches it, and every client request succeeds (its
 * 500s are retried on the others).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import {
  jsonLines,
  serveConfigObject,
  startMockerEngine,
  stopServed,
  type ServedGateway,
  type ServedProc,
} from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

const BASE_EJECTION_MS = 4000;
const FAILING = ['--fault-error-rate', '1', '--fault-error-status', '500'];

describe("outlier ejection and the pool's panic threshold (real mocker processes)", () => {
  const engines: ServedProc[] = [];
  let solo = '';
  let trio: string[] = [];
  let url = '';
  let served: ServedGateway | undefined;
  let sent = 0;

  /** Requests an engine failed on purpose (its injected 500s). */
  const injected = (engine: string): Promise<number> => metric(engine, 'kvgate_mocker_injected_errors_total');
  const panic = (model: string): Promise<number> =>
    metric(url, 'kvgate_pool_panic', { model, worker_type: 'aggregated' });
  const ejections = (model: string, workerId: number): Promise<number> =>
    metric(url, 'kvgate_worker_ejections_total', { model, worker_id: String(workerId), reason: 'consecutive_errors' });
  const panicLines = (model: string, what: RegExp): Record<string, unknown>[] =>
    jsonLines(served!.proc).filter((o) => o.model === model && what.test(String(o.msg)));

  async function complete(model: string): Promise<number> {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: `request number ${sent++} of the panic test`, max_tokens: 4 }),
    });
    await res.arrayBuffer();
    return res.status;
  }

  beforeAll(async () => {
    const started = await Promise.all([
      startMockerEngine(['--seed', '1', ...FAILING]),
      startMockerEngine(['--seed', '2', ...FAILING]),
      startMockerEngine(['--seed', '3']),
      startMockerEngine(['--seed', '4']),
    ]);
    engines.push(...started.map((s) => s.proc));
    const urls = started.map((s) => String(s.engine.url));
    solo = urls[0]!;
    trio = urls.slice(1);
    served = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      health: { outlier_detection: { consecutive_errors: 3, base_ejection_ms: BASE_EJECTION_MS } },
      models: [
        {
          name: 'solo',
          served_model_name: 'mock-model',
          block_size: 16,
          router_mode: 'round-robin',
          workers: [{ id: 1, url: solo }],
        },
        {
          name: 'trio',
          served_model_name: 'mock-model',
          block_size: 16,
          router_mode: 'round-robin',
          workers: trio.map((u, i) => ({ id: i + 11, url: u })),
        },
      ],
    });
    url = served.url;
  }, 60_000);

  afterAll(async () => {
    await Promise.all([served?.stop(), ...engines.map((p) => stopServed(p))]);
  });

  it("a pool's only worker, failing, is never taken out: the pool panics, requests keep reaching it and succeed once it recovers", async () => {
    expect(await panic('solo')).toBe(0);
    // Three 500s in a row earn the ejection; the requests after them still reach the engine.
    for (let i = 0; i < 8; i++) expect(await complete('solo')).toBe(502);
    expect(await injected(solo)).toBe(8);
    expect(await ejections('solo', 1)).toBe(1);
    expect(await panic('solo')).toBe(1);
    // The gauge is set before the line is logged, and the line crosses the gateway's stdout pipe: wait for it.
    await until(() => panicLines('solo', /entered panic/).length > 0, 'the entered-panic log line');
    expect(panicLines('solo', /entered panic/)).toEqual([
      expect.objectContaining({ level: 40, workerType: 'aggregated', healthy: 0, workers: 1 }),
    ]);
    expect(await metric(url, 'kvgate_worker_up', { model: 'solo', worker_id: '1' })).toBe(1);

    // The engine recovers inside its ejection time: the next request is answered.
    await fetch(`${solo}/admin/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ error_rate: 0 }),
    });
    expect(await complete('solo')).toBe(200);
    // The ejection ends: the pool leaves panic, logged.
    await until(async () => (await panic('solo')) === 0, 'the solo pool to leave panic', BASE_EJECTION_MS + 5000);
    await until(() => panicLines('solo', /left panic/).length > 0, 'the left-panic log line');
    expect(panicLines('solo', /left panic/)).toHaveLength(1);
    expect(await complete('solo')).toBe(200);
  }, 60_000);

  it('a pool of three with one failing ejects it as before: no panic, no request reaches it, every client request succeeds', async () => {
    for (let i = 0; i < 30 && (await ejections('trio', 11)) === 0; i++) expect(await complete('trio')).toBe(200);
    expect(await ejections('trio', 11)).toBe(1);
    expect(await panic('trio')).toBe(0);
    const before = await injected(trio[0]!);
    for (let i = 0; i < 9; i++) expect(await complete('trio')).toBe(200);
    expect(await injected(trio[0]!)).toBe(before);
    expect(panicLines('trio', /panic/)).toEqual([]);
  }, 60_000);
});
