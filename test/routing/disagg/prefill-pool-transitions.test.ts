/**
 * The prefill pool of a disaggregated model switching between active (a prefill worker available: requests run
 * disaggregated) and inactive (the last one gone: served aggregated, refused under enforce_disagg, or
 * unavailable without a decode worker that serves alone): each switch is a log line and a count
 * (`kvgate_prefill_pool_transitions_total{model,to}`), and `kvgate_prefill_pool_active` follows it. Driven
 * through the registry, as the health prober and membership drive it.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, silentLogger, type Logger } from '../../../src/common/index.js';
import { WorkerRegistry, type WorkerInfo } from '../../../src/discovery/index.js';
import { EngineClient } from '../../../src/engines/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { ModelRouter, makeRouterContext, type ModelRouterOptions } from '../../../src/routing/index.js';

const MODEL = 'mock-model';

function worker(id: number, role: WorkerInfo['role'], extra: Partial<WorkerInfo> = {}): WorkerInfo {
  return { id, model: MODEL, url: `http://127.0.0.1:${id}`, role, dialect: 'vllm', dpStart: 0, dpSize: 1, ...extra };
}

/** Keeps every warn and info line with its level and message. */
function capture(lines: Record<string, unknown>[]): Logger {
  const keep =
    (level: string) =>
    (fields: Record<string, unknown>, msg: string): void =>
      void lines.push({ ...fields, level, msg });
  const log: Logger = { ...silentLogger, warn: keep('warn'), info: keep('info'), child: () => log };
  return log;
}

function setup(opts: Partial<ModelRouterOptions> = {}) {
  const registry = new WorkerRegistry();
  const metrics = new KvgateMetrics({ processMetrics: false });
  const lines: Record<string, unknown>[] = [];
  const router = new ModelRouter(
    {
      model: MODEL,
      mode: 'kv',
      blockSize: 16,
      registry,
      engine: new EngineClient(),
      tickIntervalMs: 0,
      routerConfig: { useKvEvents: false },
      ...opts,
    },
    makeRouterContext({ rng: seededRng(1), clock: new ManualClock(), metrics, logger: capture(lines) }),
  );
  const pool = (l: Record<string, unknown>): boolean => /^prefill pool/.test(String(l['msg']));
  const model = (l: Record<string, unknown>): boolean => /^model /.test(String(l['msg']));
  const series = async (): Promise<string[]> =>
    (await metrics.text()).split('\n').filter((l) => /^kvgate_prefill_pool_(active|transitions_total)\{/.test(l));
  return { registry, router, metrics, lines: () => lines.filter(pool), modelLines: () => lines.filter(model), series };
}

describe('prefill pool transitions', () => {
  it('active at the first prefill worker, inactive when the last goes, active again when one returns', async () => {
    const { registry, router, lines, series } = setup();
    registry.add(worker(1, 'decode', { servesAggregated: true }));
    // The model's series exist from the start, at zero.
    expect(await series()).toEqual([
      `kvgate_prefill_pool_active{model="${MODEL}"} 0`,
      `kvgate_prefill_pool_transitions_total{model="${MODEL}",to="active"} 0`,
      `kvgate_prefill_pool_transitions_total{model="${MODEL}",to="inactive"} 0`,
    ]);

    registry.add(worker(11, 'prefill'));
    registry.add(worker(12, 'prefill'));
    expect(router.prefill.state).toBe('active');
    expect(lines()).toEqual([
      expect.objectContaining({ level: 'info', from: 'pending', to: 'active', workerId: 11, prefillWorkers: 1 }),
    ]);
    expect(String(lines()[0]!['msg'])).toMatch(/requests run disaggregated/);

    registry.markDown(11);
    expect(lines()).toHaveLength(1);
    registry.markDown(12);
    expect(router.prefill.state).toBe('inactive');
    expect(lines()[1]).toMatchObject({
      level: 'warn',
      from: 'active',
      to: 'inactive',
      workerId: 12,
      prefillWorkers: 0,
    });
    expect(String(lines()[1]!['msg'])).toMatch(/served aggregated on the decode pool/);

    registry.markUp(11);
    expect(lines()[2]).toMatchObject({ level: 'info', from: 'inactive', to: 'active', workerId: 11 });
    expect(lines()).toHaveLength(3);
    expect(await series()).toEqual([
      `kvgate_prefill_pool_active{model="${MODEL}"} 1`,
      `kvgate_prefill_pool_transitions_total{model="${MODEL}",to="active"} 2`,
      `kvgate_prefill_pool_transitions_total{model="${MODEL}",to="inactive"} 1`,
    ]);
    registry.markDown(11);
    expect((await series())[0]).toBe(`kvgate_prefill_pool_active{model="${MODEL}"} 0`);
  });

  it("the inactive line says what becomes of the model's requests", () => {
    const consequence = (opts: Partial<ModelRouterOptions>, decode: Partial<WorkerInfo>): string => {
      const { registry, lines } = setup(opts);
      registry.add(worker(1, 'decode', decode));
      registry.add(worker(11, 'prefill'));
      registry.remove(11);
      const inactive = lines().filter((l) => l['to'] === 'inactive');
      expect(inactive).toHaveLength(1);
      expect(inactive[0]).toMatchObject({ level: 'warn' });
      return String(inactive[0]!['msg']);
    };
    expect(consequence({ enforceDisagg: true }, { servesAggregated: true })).toMatch(/refused \(enforce_disagg\)/);
    expect(consequence({}, {})).toMatch(/none of its decode workers serves alone: the model is unavailable/);
  });

  it('under enforce_disagg the last prefill worker leaving takes the model out of /ready, logged and counted', async () => {
    const { registry, router, metrics, modelLines } = setup({ enforceDisagg: true });
    registry.add(worker(1, 'decode', { servesAggregated: true }));
    registry.add(worker(11, 'prefill'));
    expect(router.canServe()).toBe(true);
    // Never servable before (no prefill worker from the start): the first servable line is no "again".
    expect(modelLines()).toEqual([
      expect.objectContaining({
        level: 'info',
        to: 'servable',
        msg: `model ${MODEL} can be served: listed by /ready and /v1/models`,
      }),
    ]);
    registry.markDown(11);
    expect(router.canServe()).toBe(false);
    expect(modelLines()[1]).toMatchObject({ level: 'warn', to: 'unavailable', code: 'KVG_ERR_PREFILL_NOT_ACTIVATED' });
    expect(String(modelLines()[1]!['reason'])).toMatch(/enforce_disagg/);
    const text = await metrics.text();
    expect(text).toContain(`kvgate_model_servable{model="${MODEL}"} 0`);
    expect(text).toContain(`kvgate_model_servable_transitions_total{model="${MODEL}",to="unavailable"} 1`);
  });

  it('a prefill worker its pool refuses (an empty bootstrap host) is a warn line and not up, never "up: routed to"', async () => {
    const registry = new WorkerRegistry();
    const metrics = new KvgateMetrics({ processMetrics: false });
    const all: Record<string, unknown>[] = [];
    new ModelRouter(
      { model: MODEL, mode: 'round-robin', blockSize: 16, registry, engine: new EngineClient(), tickIntervalMs: 0 },
      makeRouterContext({ rng: seededRng(1), clock: new ManualClock(), metrics, logger: capture(all) }),
    );
    registry.add(worker(1, 'decode', { servesAggregated: true }));
    registry.add(worker(11, 'prefill', { dialect: 'sglang', bootstrap: { host: '', port: 8998 } }));
    const of11 = all.filter((l) => l['workerId'] === 11);
    expect(of11).toEqual([
      expect.objectContaining({ level: 'warn', url: 'http://127.0.0.1:11', msg: expect.stringMatching(/not used/) }),
    ]);
    expect(await metrics.text()).toContain(`kvgate_worker_up{model="${MODEL}",worker_id="11",worker_type="prefill"} 0`);
  });
});
