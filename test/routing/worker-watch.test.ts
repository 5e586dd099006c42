/**
 * Worker state changes are logged with the worker's id and URL and exported as
 * gauges (the ModelRouter over a real registry, KV-event manager and metrics,
 * on a manual clock): KV events live, stale while serving, resumed; down and up
 * as the registry moves the worker; kv_events_live 0 as soon as it is down.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, silentLogger, type Logger } from '../../src/common/index.js';
import { WorkerRegistry } from '../../src/discovery/index.js';
import { EngineClient } from '../../src/engines/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { ModelRouter, makeRouterContext } from '../../src/routing/index.js';

type Line = { level: 'warn' | 'info'; msg: string } & Record<string, unknown>;

function captureLines(lines: Line[]): Logger {
  const log: Logger = {
    ...silentLogger,
    warn: (fields, msg) => lines.push({ ...fields, level: 'warn', msg }),
    info: (fields, msg) => lines.push({ ...fields, level: 'info', msg }),
    child: () => log,
  };
  return log;
}

async function gauge(metrics: KvgateMetrics, name: string, workerId: number): Promise<number | undefined> {
  const m = await metrics.registry.getSingleMetric(name)!.get();
  return m.values.find((v) => v.labels.worker_id === String(workerId))?.value;
}

/** A ModelRouter of model `m` over `registry` (`mode`, ticking only when told), its lines captured into `lines`. */
function routerOf(
  registry: WorkerRegistry,
  clock: ManualClock,
  mode: 'kv' | 'round-robin' = 'kv',
): { router: ModelRouter; engine: EngineClient; metrics: KvgateMetrics; lines: Line[] } {
  const engine = new EngineClient();
  const metrics = new KvgateMetrics({ processMetrics: false });
  const lines: Line[] = [];
  const kv = mode === 'kv' ? { kvEventsStaleAfterMs: 1000 } : {};
  const router = new ModelRouter(
    { model: 'm', mode, blockSize: 16, registry, engine, tickIntervalMs: 0, ...kv },
    makeRouterContext({ clock, rng: seededRng(1), metrics, logger: captureLines(lines) }),
  );
  return { router, engine, metrics, lines };
}

describe('worker state changes are loud', () => {
  // issue 17, failures must be loud: events stale / resumed, down / up, with worker id and URL, gauges
  it("logs KV events live, stale and resumed, and down and up, with the worker's id and URL; gauges follow", async () => {
    const clock = new ManualClock();
    const registry = new WorkerRegistry();
    const url = 'http://127.0.0.1:9';
    registry.add({
      id: 4,
      model: 'm',
      url,
      role: 'aggregated',
      dialect: 'vllm',
      dpStart: 0,
      dpSize: 1,
      kvEvents: { endpoint: 'tcp://127.0.0.1:9' },
    });
    const { router, engine, metrics, lines } = routerOf(registry, clock);
    try {
      const liveness = router.events!.liveness;
      const at = (msg: RegExp): Line | undefined =>
        lines.find((l) => msg.test(l.msg) && l.workerId === 4 && l.url === url);
      expect(await gauge(metrics, 'kvgate_worker_up', 4)).toBe(1);

      liveness.noteEvent({ workerId: 4, dpRank: 0 });
      router.tick();
      expect(at(/KV events live/)?.level).toBe('info');
      expect(await gauge(metrics, 'kvgate_worker_kv_events_live', 4)).toBe(1);

      liveness.noteDispatch({ workerId: 4, dpRank: 0 });
      clock.advance(1500);
      router.tick();
      expect(at(/KV events stale/)?.level).toBe('warn');
      expect(await gauge(metrics, 'kvgate_worker_kv_events_live', 4)).toBe(0);

      liveness.noteEvent({ workerId: 4, dpRank: 0 });
      router.tick();
      expect(at(/KV events resumed/)?.level).toBe('info');

      registry.markDown(4);
      expect(at(/is down/)?.level).toBe('warn');
      expect(await gauge(metrics, 'kvgate_worker_up', 4)).toBe(0);
      expect(await gauge(metrics, 'kvgate_worker_kv_events_live', 4)).toBe(0);
      expect(router.workerStatus()).toMatchObject([{ id: 4, up: false, kvEvents: 'down' }]);

      registry.markUp(4);
      expect(at(/is up/)?.level).toBe('info');
      expect(await gauge(metrics, 'kvgate_worker_up', 4)).toBe(1);
    } finally {
      await router.close();
      await engine.close();
    }
  });

  it('KV events that never arrive while the worker serves are a warn line naming the endpoint; each change counted', async () => {
    const clock = new ManualClock();
    const registry = new WorkerRegistry();
    const endpoint = 'tcp://127.0.0.1:9';
    const worker = { model: 'm', role: 'aggregated', dialect: 'vllm', dpStart: 0, dpSize: 1 } as const;
    registry.add({ ...worker, id: 5, url: 'http://127.0.0.1:5', kvEvents: { endpoint } });
    const { router, engine, metrics, lines } = routerOf(registry, clock);
    const count = async (to: string): Promise<number | undefined> => {
      const m = await metrics.registry.getSingleMetric('kvgate_worker_kv_events_transitions_total')!.get();
      return m.values.find((v) => v.labels.worker_id === '5' && v.labels.to === to)?.value;
    };
    const of5 = () => lines.filter((l) => l.workerId === 5 && /KV event/.test(l.msg));
    try {
      const liveness = router.events!.liveness;
      clock.advance(5000);
      router.tick();
      expect(of5()).toEqual([]); // idle and silent: nothing is wrong yet
      liveness.noteDispatch({ workerId: 5, dpRank: 0 });
      clock.advance(999);
      router.tick();
      expect(of5()).toEqual([]);
      clock.advance(1);
      router.tick();
      expect(of5()).toMatchObject([
        { level: 'warn', kvEvents: 'silent', endpoint, msg: /no KV event since it joined/ },
      ]);
      expect(router.events!.eventStatus(5)).toBe('never');
      expect(await count('silent')).toBe(1);
      router.tick();
      expect(of5()).toHaveLength(1);
      liveness.noteEvent({ workerId: 5, dpRank: 0 });
      router.tick();
      expect(of5()[1]).toMatchObject({ level: 'info', kvEvents: 'live', msg: /KV events live/ });
      expect(await count('live')).toBe(1);
      liveness.noteDispatch({ workerId: 5, dpRank: 0 });
      clock.advance(1000);
      router.tick();
      expect(of5()[2]).toMatchObject({ level: 'warn', kvEvents: 'stale' });
      expect(await count('stale')).toBe(1);
    } finally {
      await router.close();
      await engine.close();
    }
  });

  it('the model leaving /ready and /v1/models (its last worker down) and coming back is logged and counted', async () => {
    const registry = new WorkerRegistry();
    const worker = { model: 'm', role: 'aggregated', dialect: 'vllm', dpStart: 0, dpSize: 1 } as const;
    registry.add({ ...worker, id: 1, url: 'http://127.0.0.1:1' });
    registry.add({ ...worker, id: 2, url: 'http://127.0.0.1:2' });
    const { router, engine, metrics, lines } = routerOf(registry, new ManualClock(), 'round-robin');
    const model = async (name: string, to?: string): Promise<number | undefined> => {
      const m = await metrics.registry.getSingleMetric(name)!.get();
      return m.values.find((v) => v.labels.model === 'm' && (to === undefined || v.labels.to === to))?.value;
    };
    const modelLines = () => lines.filter((l) => /^model m /.test(l.msg));
    try {
      expect(await model('kvgate_model_servable')).toBe(1);
      expect(modelLines()).toEqual([]); // where it starts is no change
      registry.markDown(1);
      expect(modelLines()).toEqual([]); // worker 2 still serves it
      registry.markDown(2);
      expect(router.canServe()).toBe(false);
      expect(modelLines()).toMatchObject([
        { level: 'warn', to: 'unavailable', code: 'KVG_ERR_MODEL_UNAVAILABLE', msg: /can no longer be served/ },
      ]);
      expect(await model('kvgate_model_servable')).toBe(0);
      expect(await model('kvgate_model_servable_transitions_total', 'unavailable')).toBe(1);
      router.tick(); // no change: nothing more
      expect(modelLines()).toHaveLength(1);
      registry.markUp(2);
      expect(modelLines()[1]).toMatchObject({ level: 'info', to: 'servable', msg: /can be served again/ });
      expect(await model('kvgate_model_servable')).toBe(1);
      expect(await model('kvgate_model_servable_transitions_total', 'servable')).toBe(1);
    } finally {
      await router.close();
      await engine.close();
    }
  });
});
