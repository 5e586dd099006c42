// Issue 23, section 2: ejection never takes a pool below its panic threshold (Envoy's semantics: a pool with too
// few healthy workers routes to all of them), per pool (a model's workers of one role); entering and leaving
// panic is logged and in `kvgate_pool_panic`; an outlier ejection that connection failures alone earned ends
// with the first passing health probe that started during it.
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger, type Logger } from '../../src/common/index.js';
import {
  Ejections,
  HealthProber,
  OutlierDetector,
  WorkerRegistry,
  type WorkerInfo,
} from '../../src/discovery/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { healthServer } from '../helpers/health-server.js';
import { ManualTimers } from '../helpers/manual-timers.js';

const BASE_MS = 1000;

function worker(id: number, extra: Partial<WorkerInfo> = {}): WorkerInfo {
  return {
    id,
    model: 'm',
    url: `http://127.0.0.1:${9000 + id}`,
    role: 'aggregated',
    dialect: 'vllm',
    dpStart: 0,
    dpSize: 1,
    ...extra,
  };
}

/** Keeps every warn and info line with its level, message and the bindings of its child loggers (as pino writes them). */
function capture(lines: Record<string, unknown>[], bound: Record<string, unknown> = {}): Logger {
  const keep =
    (level: string) =>
    (fields: Record<string, unknown>, msg: string): void =>
      void lines.push({ ...bound, ...fields, level, msg });
  return {
    ...silentLogger,
    warn: keep('warn'),
    info: keep('info'),
    child: (more) => capture(lines, { ...bound, ...more }),
  };
}

function setup(workers: WorkerInfo[], opts: { maxEjectedPercent?: number; panic?: number } = {}) {
  const reg = new WorkerRegistry();
  for (const w of workers) reg.add(w);
  const ejections = new Ejections(reg, opts.maxEjectedPercent ?? 50);
  ejections.setPanicThreshold('m', opts.panic ?? 50);
  const metrics = new KvgateMetrics({ processMetrics: false });
  const lines: Record<string, unknown>[] = [];
  // The model's logger, bound to the model as the fleet binds it.
  ejections.watch('m', { logger: capture(lines).child({ model: 'm' }), metrics });
  const timers = new ManualTimers();
  const detector = new OutlierDetector(reg, ejections, {
    consecutiveErrors: 2,
    baseEjectionMs: BASE_MS,
    maxEjectionMs: 10 * BASE_MS,
    scheduler: timers,
  });
  const fail = (id: number, n = 2): void => {
    for (let i = 0; i < n; i++) detector.record(id, 'the engine answered 500');
  };
  const panicGauge = async (role: string): Promise<string | undefined> =>
    (await metrics.text())
      .split('\n')
      .find((l) => l.startsWith(`kvgate_pool_panic{model="m",worker_type="${role}"}`))
      ?.split(' ')
      .pop();
  return { reg, ejections, detector, timers, lines, fail, panicGauge };
}

const panicLines = (lines: Record<string, unknown>[]): Record<string, unknown>[] =>
  lines.filter((l) => /panic:/.test(String(l['msg'])));

describe('panic threshold (issue 23, section 2)', () => {
  it("a pool's only worker earns its ejection but stays routable: the pool is in panic until the ejection ends", async () => {
    const { reg, ejections, timers, lines, fail, panicGauge } = setup([worker(1)]);
    expect(await panicGauge('aggregated')).toBe('0');
    fail(1);
    expect(ejections.isEjected(1)).toBe(true);
    expect(reg.isAvailable(1)).toBe(true);
    expect(await panicGauge('aggregated')).toBe('1');
    expect(panicLines(lines)).toEqual([
      expect.objectContaining({
        level: 'warn',
        model: 'm',
        workerType: 'aggregated',
        healthy: 0,
        workers: 1,
        panicThresholdPercent: 50,
      }),
    ]);
    expect(lines.find((l) => /ejected for 1000 ms/.test(String(l['msg'])))?.['msg']).toMatch(
      /its pool is in panic, so it stays routable/,
    );
    timers.advance(BASE_MS);
    expect(ejections.isEjected(1)).toBe(false);
    expect(reg.isAvailable(1)).toBe(true);
    expect(await panicGauge('aggregated')).toBe('0');
    expect(panicLines(lines).map((l) => l['level'])).toEqual(['warn', 'info']);
    expect(String(panicLines(lines)[1]!['msg'])).toMatch(/left panic/);
  });

  it("the registry never sees a panicking pool's worker leave: no removed event, nothing for the routers to drop", () => {
    const { reg, fail } = setup([worker(1)]);
    const events: string[] = [];
    reg.on('removed', (w) => events.push(`removed ${w.id}`));
    reg.on('added', (w) => events.push(`added ${w.id}`));
    fail(1);
    expect(events).toEqual([]);
  });

  it('a pool of three ejects one failing worker as before: no panic', async () => {
    const { reg, fail, lines, panicGauge } = setup([worker(1), worker(2), worker(3)]);
    fail(1);
    expect(reg.isAvailable(1)).toBe(false);
    expect(reg.available('m').map((w) => w.id)).toEqual([2, 3]);
    expect(await panicGauge('aggregated')).toBe('0');
    expect(panicLines(lines)).toEqual([]);
  });

  it('below the threshold the pool routes to all its workers; back at it, the ejected ones leave routing', async () => {
    const { reg, timers, fail, panicGauge } = setup([worker(1), worker(2), worker(3), worker(4)], {
      maxEjectedPercent: 100,
    });
    fail(1);
    fail(2);
    // Two of four healthy: 50 %, not below the threshold.
    expect(reg.available('m').map((w) => w.id)).toEqual([3, 4]);
    timers.advance(BASE_MS / 2);
    fail(3);
    // One of four healthy: panic, every worker routed.
    expect(
      reg
        .available('m')
        .map((w) => w.id)
        .sort(),
    ).toEqual([1, 2, 3, 4]);
    expect(await panicGauge('aggregated')).toBe('1');
    // Workers 1 and 2 come back: three of four healthy, worker 3 (still ejected) leaves routing.
    timers.advance(BASE_MS / 2);
    expect(
      reg
        .available('m')
        .map((w) => w.id)
        .sort(),
    ).toEqual([1, 2, 4]);
    expect(await panicGauge('aggregated')).toBe('0');
  });

  it('panic is per pool: a lone prefill worker stays routable while the decode pool ejects as usual', async () => {
    const prefill = worker(1, { role: 'prefill', dialect: 'vllm' });
    const decode = [2, 3, 4].map((id) => worker(id, { role: 'decode' }));
    const { reg, fail, panicGauge } = setup([prefill, ...decode], { maxEjectedPercent: 50 });
    fail(1);
    fail(2);
    expect(reg.isAvailable(1)).toBe(true);
    expect(reg.isAvailable(2)).toBe(false);
    expect([await panicGauge('prefill'), await panicGauge('decode')]).toEqual(['1', '0']);
  });

  it("threshold 0 turns panic off: a pool's only worker can be ejected", () => {
    const { reg, fail } = setup([worker(1)], { panic: 0 });
    fail(1);
    expect(reg.isAvailable(1)).toBe(false);
  });

  it('a worker leaving can put its pool in panic (the healthy one of two) or take it out (the ejected one)', async () => {
    const { reg, ejections, fail, panicGauge } = setup([worker(1), worker(2)]);
    fail(1);
    expect(reg.isAvailable(1)).toBe(false);
    reg.remove(2);
    ejections.forget(2);
    expect(reg.isAvailable(1)).toBe(true);
    expect(await panicGauge('aggregated')).toBe('1');
    reg.add(worker(3));
    reg.remove(1);
    ejections.forget(1);
    expect(await panicGauge('aggregated')).toBe('0');
  });
});

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

describe('an outlier ejection and the health probe (issue 23, section 2)', () => {
  it('connection failures alone: the first passing probe ends the ejection; with a 5xx answer in the streak it runs its time', async () => {
    const reg = new WorkerRegistry();
    const urls = [
      await healthServer({ code: 200 }, servers),
      await healthServer({ code: 200 }, servers),
      await healthServer({ code: 200 }, servers),
    ];
    urls.forEach((url, i) => reg.add(worker(i + 1, { url })));
    const ejections = new Ejections(reg, 100);
    const lines: Record<string, unknown>[] = [];
    ejections.watch('m', { logger: capture(lines), metrics: undefined });
    const timers = new ManualTimers();
    const detector = new OutlierDetector(reg, ejections, {
      consecutiveErrors: 2,
      baseEjectionMs: 30_000,
      maxEjectionMs: 60_000,
      scheduler: timers,
    });
    const prober = new HealthProber(reg, { unhealthyAfter: 2, timeoutMs: 1000, checkModels: false, ejections });

    detector.record(1, 'KVG_ERR_ENGINE_UNREACHABLE', true);
    detector.record(1, 'KVG_ERR_ENGINE_DISCONNECTED', true);
    detector.record(2, 'KVG_ERR_ENGINE_UNREACHABLE', true);
    detector.record(2, 'the engine answered 500');
    expect([reg.isAvailable(1), reg.isAvailable(2)]).toEqual([false, false]);
    expect(lines.find((l) => l['workerId'] === 1 && /ejected for/.test(String(l['msg'])))).toMatchObject({
      connectionFailuresOnly: true,
    });

    await prober.probeAll();
    expect(reg.isAvailable(1)).toBe(true);
    expect(lines.at(-1)).toMatchObject({
      workerId: 1,
      msg: expect.stringMatching(/health probe again after its connection failures: ejection ended: readmitted/),
    });
    expect(reg.isAvailable(2)).toBe(false);
    expect(prober.view(2)?.state).toBe('ejected');
    timers.advance(30_000);
    expect(reg.isAvailable(2)).toBe(true);
    prober.close();
    detector.close();
  });
});
