// issue 14 item "outlier ejection": a worker with consecutive 5xx answers or connection failures on dispatch
// is ejected for base × (times ejected), then readmitted; the share of a model's workers ejected at once is
// the one limit the health prober obeys too, and a passing probe does not readmit a worker ejected for errors.
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { healthServer as startHealthServer } from '../helpers/health-server.js';
import {
  Ejections,
  HealthProber,
  OutlierDetector,
  WorkerRegistry,
  type WorkerInfo,
} from '../../src/discovery/index.js';
import { ManualTimers } from '../helpers/manual-timers.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { silentLogger, type Logger } from '../../src/common/index.js';

/** Keeps each warn line's fields and message. */
function captureWarnings(lines: Record<string, unknown>[]): Logger {
  const log: Logger = {
    ...silentLogger,
    warn: (fields: object, msg?: string) => lines.push({ ...fields, msg }),
    child: () => log,
  };
  return log;
}

function worker(id: number, url = `http://127.0.0.1:${9000 + id}`, extra: Partial<WorkerInfo> = {}): WorkerInfo {
  return { id, model: 'm', url, role: 'aggregated', dialect: 'vllm', dpStart: 0, dpSize: 1, ...extra };
}

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

const healthServer = (status: { code: number }): Promise<string> => startHealthServer(status, servers);

function setup(
  n: number,
  maxEjectedPercent = 50,
): {
  reg: WorkerRegistry;
  ejections: Ejections;
  detector: OutlierDetector;
  timers: ManualTimers;
  metrics: KvgateMetrics;
  lines: Record<string, unknown>[];
} {
  const reg = new WorkerRegistry();
  for (let id = 1; id <= n; id++) reg.add(worker(id));
  const ejections = new Ejections(reg, maxEjectedPercent);
  const metrics = new KvgateMetrics({ processMetrics: false });
  const lines: Record<string, unknown>[] = [];
  ejections.watch('m', { logger: captureWarnings(lines), metrics });
  const timers = new ManualTimers();
  const detector = new OutlierDetector(reg, ejections, {
    consecutiveErrors: 3,
    baseEjectionMs: 1000,
    maxEjectionMs: 2500,
    scheduler: timers,
  });
  return { reg, ejections, detector, timers, metrics, lines };
}

describe('outlier ejection on dispatch errors (issue 14, outlier ejection)', () => {
  it('ejects after N consecutive errors for base × times ejected (capped), then readmits; a success resets the streak', async () => {
    const { reg, detector, timers, metrics, lines } = setup(4);
    detector.record(1, 'the engine answered 503');
    detector.record(1, 'the engine answered 503');
    detector.record(1, undefined); // an answer below 500 breaks the streak
    detector.record(1, 'the engine answered 503');
    detector.record(1, 'KVG_ERR_ENGINE_UNREACHABLE');
    expect(reg.isAvailable(1)).toBe(true);
    detector.record(1, 'the engine answered 503');
    expect(reg.isAvailable(1)).toBe(false);
    expect(lines.at(-1)).toMatchObject({ workerId: 1, url: 'http://127.0.0.1:9001', ejectionMs: 1000 });
    timers.advance(999);
    expect(reg.isAvailable(1)).toBe(false);
    timers.advance(1);
    expect(reg.isAvailable(1)).toBe(true);
    expect(lines.at(-1)).toMatchObject({ workerId: 1, url: 'http://127.0.0.1:9001' });
    expect(String(lines.at(-1)?.['msg'] ?? '')).toMatch(/readmitted/);

    // The second ejection lasts twice the base; the third is capped at max_ejection_ms.
    for (let i = 0; i < 3; i++) detector.record(1, 'the engine answered 503');
    timers.advance(1999);
    expect(reg.isAvailable(1)).toBe(false);
    timers.advance(1);
    expect(reg.isAvailable(1)).toBe(true);
    for (let i = 0; i < 3; i++) detector.record(1, 'the engine answered 503');
    expect(lines.at(-1)).toMatchObject({ ejectionMs: 2500 });
    timers.advance(2500);
    expect(reg.isAvailable(1)).toBe(true);
    const text = await metrics.text();
    expect(text).toContain('kvgate_worker_ejections_total{model="m",worker_id="1",reason="consecutive_errors"} 3');
    expect(text).toContain('kvgate_worker_readmissions_total{model="m",worker_id="1",reason="consecutive_errors"} 3');
  });

  it('a fleet where every worker fails ejects no more than the share; the rest stay routable, logged and counted once', async () => {
    const { reg, detector, lines, metrics } = setup(4, 50);
    for (let round = 0; round < 5; round++)
      for (let id = 1; id <= 4; id++) detector.record(id, 'the engine answered 503');
    expect(reg.available('m')).toHaveLength(2);
    const kept = lines.filter((l) => String(l['msg']).includes('kept routable'));
    expect(kept.map((l) => l['workerId']).sort()).toEqual([3, 4]);
    const text = await metrics.text();
    for (const id of [3, 4])
      expect(text).toContain(
        `kvgate_worker_ejections_refused_total{model="m",worker_id="${id}",reason="consecutive_errors"} 1`,
      );
    expect(text).not.toMatch(/kvgate_worker_ejections_refused_total\{model="m",worker_id="[12]"/);
  });

  it('the share is shared with the health prober, and a passing probe does not readmit a worker ejected for errors', async () => {
    const reg = new WorkerRegistry();
    const sick = { code: 500 };
    const well = { code: 200 };
    for (let id = 1; id <= 4; id++) reg.add(worker(id, await healthServer(id <= 2 ? sick : well)));
    const ejections = new Ejections(reg, 50);
    const timers = new ManualTimers();
    const detector = new OutlierDetector(reg, ejections, {
      consecutiveErrors: 2,
      baseEjectionMs: 1000,
      maxEjectionMs: 5000,
      scheduler: timers,
    });
    const prober = new HealthProber(reg, { unhealthyAfter: 1, timeoutMs: 1000, checkModels: false, ejections });
    await prober.probeAll();
    expect(
      reg
        .available('m')
        .map((w) => w.id)
        .sort(),
    ).toEqual([3, 4]);
    // Two of four are out on health: the detector may not eject a third.
    detector.record(3, 'the engine answered 503');
    detector.record(3, 'the engine answered 503');
    expect(reg.isAvailable(3)).toBe(true);
    // Worker 1 recovers: room for one ejection on errors.
    sick.code = 200;
    await prober.probe(1);
    detector.record(3, 'the engine answered 503');
    detector.record(3, 'the engine answered 503');
    expect(reg.isAvailable(3)).toBe(false);
    // Its probe passes, yet it stays out until its ejection time is over; the prober's view says why.
    await prober.probe(3);
    expect(reg.isAvailable(3)).toBe(false);
    expect(prober.view(3)?.state).toBe('ejected');
    timers.advance(1000);
    expect(reg.isAvailable(3)).toBe(true);
    expect(prober.view(3)?.state).toBe('up');
    prober.close();
    detector.close();
  });

  it('consecutive_errors 0 turns detection off', () => {
    const reg = new WorkerRegistry();
    reg.add(worker(1));
    const detector = new OutlierDetector(reg, new Ejections(reg), {
      consecutiveErrors: 0,
      baseEjectionMs: 1000,
      maxEjectionMs: 1000,
    });
    for (let i = 0; i < 100; i++) detector.record(1, 'the engine answered 503');
    expect(reg.isAvailable(1)).toBe(true);
  });
});
