/**
 * `engine_connections.max_per_worker` over real processes: `kvgate serve` allowed one connection to its one
 * `kvgate mocker` engine. With the engine hung, the first request holds that connection and a second one waits
 * inside kvgate for it: `kvgate_worker_engine_requests_waiting` shows it (before the key and the gauges, the pool
 * was fixed at 256 and a wait showed only as a `connection_wait` timeout). Once the hang is lifted both are
 * answered, one after the other on the one connection, and the gauges go back to zero waiting and none busy.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import {
  serveConfigObject,
  startMockerEngine,
  stopServed,
  type ServedGateway,
  type ServedProc,
} from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

describe('engine_connections.max_per_worker: a request beyond the limit waits, and the gauges show it', () => {
  let mocker: ServedProc | undefined;
  let engineUrl = '';
  let served: ServedGateway | undefined;
  let url = '';

  const labels = { model: 'mock-model', worker_id: '1' };
  const waiting = (): Promise<number> => metric(url, 'kvgate_worker_engine_requests_waiting', labels);
  const busy = (): Promise<number> => metric(url, 'kvgate_worker_engine_connections', { ...labels, state: 'busy' });
  const hang = (on: boolean): Promise<Response> =>
    fetch(`${engineUrl}/admin/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ hang: on }),
    });
  const complete = async (prompt: string): Promise<number> => {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-model', prompt, max_tokens: 4, stream: true }),
    });
    const text = await res.text();
    expect(text).toMatch(/data: \[DONE\]\n\n$/);
    return res.status;
  };

  beforeAll(async () => {
    const started = await startMockerEngine();
    mocker = started.proc;
    engineUrl = String(started.engine.url);
    served = await serveConfigObject({
      listen: { host: '127.0.0.1', port: 0 },
      preprocess: { threads: 0 },
      log: { level: 'info' },
      engine_connections: { max_per_worker: 1 },
      // One probe at start: a hung engine's probes must not take the worker out while the test holds it hung.
      health: { interval_ms: 3_600_000 },
      models: [
        { name: 'mock-model', block_size: 16, router_mode: 'round-robin', workers: [{ id: 1, url: engineUrl }] },
      ],
    });
    url = served.url;
  }, 60_000);

  afterAll(async () => {
    await Promise.all([served?.stop(), stopServed(mocker)]);
  });

  it('the second concurrent request waits for the one connection, is counted waiting, then is served', async () => {
    // The gauges exist before traffic.
    expect(await waiting()).toBe(0);
    expect(await busy()).toBe(0);
    await hang(true);
    const first = complete('the request that holds the connection');
    await until(async () => (await busy()) === 1, 'the first request on the one connection');
    const second = complete('the request that waits for it');
    await until(async () => (await waiting()) === 1, 'the second request counted waiting');
    expect(await busy()).toBe(1);
    await hang(false);
    expect(await Promise.all([first, second])).toEqual([200, 200]);
    await until(async () => (await waiting()) === 0 && (await busy()) === 0, 'the gauges back at rest');
    expect(await metric(url, 'kvgate_worker_engine_connections', { ...labels, state: 'idle' })).toBeLessThanOrEqual(1);
  }, 30_000);
});
