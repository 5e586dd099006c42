/**
 * One prober and one ejection ledger serve every model, but each model's lines and counts go to its own logger
 * and metrics, registered with `watch` as the gateway builds the model's router: probing starts with the first
 * model, so a later model's workers can be ejected and readmitted before it is watched. Those transitions are
 * held and logged and counted when it is, in the order they happened, whatever order the models were built in.
 */
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger, type Logger } from '../../src/common/index.js';
import { Ejections, HealthProber, WorkerRegistry, type WorkerInfo } from '../../src/discovery/index.js';
import { HELD_PER_MODEL, ModelSinks } from '../../src/discovery/model-sinks.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { healthServer } from '../helpers/health-server.js';

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

function worker(id: number, model: string, url: string): WorkerInfo {
  return { id, model, url, role: 'aggregated', dialect: 'vllm', dpStart: 0, dpSize: 1 };
}

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

/** The series of `name` for worker 2 of model b, as `label=value count` lines. */
async function series(metrics: KvgateMetrics, name: string): Promise<string[]> {
  return (await metrics.text())
    .split('\n')
    .filter((l) => l.startsWith(`${name}{model="b",worker_id="2"`))
    .map((l) => l.replace(/^[^{]*\{model="b",worker_id="2",/, '').replace('"}', '"'));
}

describe('health transitions of a model watched after probing started', () => {
  it('are logged to its logger and counted when it is watched, in the order they happened, marked early', async () => {
    const b = { code: 503 };
    const reg = new WorkerRegistry();
    reg.add(worker(1, 'a', await healthServer({ code: 200 }, servers)));
    reg.add(worker(2, 'b', await healthServer(b, servers)));
    const ejections = new Ejections(reg, 50);
    // Model b's pool is its one worker: ejecting it puts the pool in panic, readmitting it takes it out.
    ejections.setPanicThreshold('b', 50);
    const prober = new HealthProber(reg, { ejections, unhealthyAfter: 1, checkModels: false });
    const metrics = new KvgateMetrics({ processMetrics: false });
    const lines: Record<string, unknown>[] = [];
    prober.watch('a', capture(lines).child({ model: 'a' }), metrics);

    await prober.probeAll();
    expect(ejections.isEjected(2)).toBe(true);
    b.code = 200;
    expect(await prober.probe(2)).toBe(true);
    expect(ejections.isEjected(2)).toBe(false);
    // Model b is not watched yet: nothing of its worker's is logged or counted anywhere.
    expect(lines).toEqual([]);
    expect(await series(metrics, 'kvgate_worker_health_transitions_total')).toEqual([]);

    prober.watch('b', capture(lines).child({ model: 'b' }), metrics);
    expect(lines.map((l) => [l['model'], l['early'], l['level'], l['transition'] ?? l['msg']])).toEqual([
      ['b', true, 'warn', expect.stringMatching(/^pool entered panic: 0 of its 1 workers healthy/)],
      ['b', true, 'warn', 'ejected'],
      ['b', true, 'info', expect.stringMatching(/^pool left panic: 1 of its 1 workers healthy/)],
      ['b', true, 'warn', 'readmitted'],
    ]);
    expect(lines[1]).toMatchObject({ workerId: 2, url: reg.get(2)!.url, error: 'GET /health answered 503' });
    expect(await series(metrics, 'kvgate_worker_health_transitions_total')).toEqual([
      'transition="ejected" 1',
      'transition="readmitted" 1',
    ]);
    expect(await series(metrics, 'kvgate_worker_ejections_total')).toEqual(['reason="health_probe" 1']);

    // Once watched, transitions are reported as they happen, and not marked.
    lines.length = 0;
    b.code = 503;
    await prober.probe(2);
    expect(lines.map((l) => [l['early'], l['transition'] ?? l['msg']])).toEqual([
      [undefined, expect.stringMatching(/^pool entered panic/)],
      [undefined, 'ejected'],
    ]);
    prober.close();
  });
});

describe('ModelSinks', () => {
  it(`holds at most ${HELD_PER_MODEL} reports per model: the oldest go, and the replay says how many`, () => {
    const sinks = new ModelSinks<{ logger: Logger }>();
    const ran: number[] = [];
    for (let i = 0; i < HELD_PER_MODEL + 6; i++) sinks.report('b', () => ran.push(i));
    sinks.report('a', () => ran.push(-1));
    expect(ran).toEqual([]);
    const lines: Record<string, unknown>[] = [];
    sinks.set('b', { logger: capture(lines) });
    expect(ran).toEqual(Array.from({ length: HELD_PER_MODEL }, (_, i) => i + 6));
    expect(lines).toEqual([expect.objectContaining({ level: 'warn', early: true, dropped: 6 })]);
    // Model a's report is still held for it; b's next runs at once.
    sinks.report('b', () => ran.push(100));
    expect(ran.at(-1)).toBe(100);
    sinks.set('a', { logger: capture(lines) });
    expect(ran.at(-1)).toBe(-1);
  });
});
