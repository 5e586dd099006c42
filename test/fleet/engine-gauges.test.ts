/**
 * The engine-connection gauges of a model's workers (src/fleet/engine-gauges.ts), with the real registry, engine
 * client and metrics: every registered worker of the model has them at each scrape (at zero before traffic, its
 * pool connecting lazily), another model's workers are not written, and a worker that left loses them at the next
 * scrape; stopping removes the rest.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { WorkerRegistry, type WorkerInfo } from '../../src/discovery/index.js';
import { EngineClient } from '../../src/engines/index.js';
import { watchEngineConnections } from '../../src/fleet/engine-gauges.js';
import { KvgateMetrics } from '../../src/metrics/index.js';

const worker = (id: number, model: string): WorkerInfo => ({
  id,
  model,
  url: `http://10.0.0.${id}:8000`,
  role: 'aggregated',
  dialect: 'vllm',
  dpStart: 0,
  dpSize: 1,
});

/** The gauges' series in a scrape: `name{labels} value` lines of both families. */
async function series(metrics: KvgateMetrics): Promise<string[]> {
  const text = await metrics.text();
  return text.split('\n').filter((l) => l.startsWith('kvgate_worker_engine_'));
}

describe('engine-connection gauges', () => {
  const engine = new EngineClient();
  afterEach(() => engine.close({ force: true }));

  it("follow the registry: a model's registered workers at each scrape, a leaving one gone at the next", async () => {
    const registry = new WorkerRegistry();
    const metrics = new KvgateMetrics({ processMetrics: false });
    for (const w of [worker(1, 'a'), worker(2, 'a'), worker(3, 'b')]) {
      registry.add(w);
      engine.addWorker(w.url);
    }
    const stop = watchEngineConnections('a', registry, engine, metrics);
    expect(await series(metrics)).toEqual([
      'kvgate_worker_engine_connections{model="a",worker_id="1",state="busy"} 0',
      'kvgate_worker_engine_connections{model="a",worker_id="1",state="idle"} 0',
      'kvgate_worker_engine_connections{model="a",worker_id="2",state="busy"} 0',
      'kvgate_worker_engine_connections{model="a",worker_id="2",state="idle"} 0',
      'kvgate_worker_engine_requests_waiting{model="a",worker_id="1"} 0',
      'kvgate_worker_engine_requests_waiting{model="a",worker_id="2"} 0',
    ]);
    registry.remove(2);
    expect((await series(metrics)).filter((l) => l.includes('worker_id="2"'))).toEqual([]);
    expect(await series(metrics)).toHaveLength(3);
    stop();
    expect(await series(metrics)).toEqual([]);
  });
});
