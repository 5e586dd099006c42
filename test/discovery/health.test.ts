// issue 13 item 8: under CPU saturation the health checker ejected every engine at once. Probe time
// now counts event-loop time that was free to run, at most a share of a model's workers is ejected on
// health alone, and every transition is logged and counted.
import type { Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { HealthProber, WorkerRegistry, type WorkerInfo } from '../../src/discovery/index.js';
import { loopTimeout, type Scheduler } from '../../src/discovery/loop-timeout.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { captureWarnings } from '../helpers/capture-log.js';
import { healthServer } from '../helpers/health-server.js';
import { startMockerProcess, type KvgateProcess } from '../helpers/kvgate-process.js';
import { until } from '../helpers/until.js';

/** An event loop in virtual time: timers run only when told, a blocked loop is time passing with nothing run. */
class VirtualLoop implements Scheduler {
  readonly clock = new ManualClock();
  #timers: { at: number; fn: () => void; id: number }[] = [];
  #ids = 0;

  setTimeout(fn: () => void, ms: number): unknown {
    const id = ++this.#ids;
    this.#timers.push({ at: this.clock.now() + ms, fn, id });
    return id;
  }

  clearTimeout(handle: unknown): void {
    this.#timers = this.#timers.filter((t) => t.id !== handle);
  }

  /** The loop runs freely until `t`: each timer fires at its due time. */
  runUntil(t: number): void {
    for (;;) {
      const next = this.#timers.filter((x) => x.at <= t).sort((a, b) => a.at - b.at)[0];
      if (next === undefined) break;
      this.#timers = this.#timers.filter((x) => x !== next);
      if (next.at > this.clock.now()) this.clock.set(next.at);
      next.fn();
    }
    if (t > this.clock.now()) this.clock.set(t);
  }

  /** The loop is blocked for `ms`, then runs the timers that came due meanwhile (late). */
  block(ms: number): void {
    this.clock.advance(ms);
    this.runDueOnce();
  }

  /** One timers phase: what is due now fires, nothing later. */
  runDueOnce(): void {
    const now = this.clock.now();
    const due = this.#timers.filter((x) => x.at <= now).sort((a, b) => a.at - b.at);
    this.#timers = this.#timers.filter((x) => x.at > now);
    for (const t of due) t.fn();
  }
}

describe('probe timeouts count free event-loop time (issue 13 item 8a)', () => {
  it('a steady loop expires the budget on time', () => {
    const loop = new VirtualLoop();
    let expiredAt: number | undefined;
    loopTimeout(1000, () => (expiredAt = loop.clock.now()), { clock: loop.clock, scheduler: loop });
    loop.runUntil(999);
    expect(expiredAt).toBeUndefined();
    loop.runUntil(1100);
    expect(expiredAt).toBe(1000);
  });

  it('a loop blocked for 1.7 s does not spend a 1 s budget; the answer read after the stall wins', () => {
    const loop = new VirtualLoop();
    let expired = false;
    const cancel = loopTimeout(1000, () => (expired = true), { clock: loop.clock, scheduler: loop });
    loop.block(1700); // the timers phase after the stall: the step fires 1.65 s late
    expect(expired).toBe(false);
    loop.runDueOnce(); // the re-armed 0 ms step, after one poll phase
    expect(expired).toBe(false);
    cancel(); // the poll phase read the engine's answer: the probe settles before any timeout
    loop.runUntil(10_000);
    expect(expired).toBe(false);
  });

  it('a blocked loop after part of the budget still leaves the rest of it; sustained stalls end at the backstop', () => {
    const loop = new VirtualLoop();
    let expiredAt: number | undefined;
    loopTimeout(1000, () => (expiredAt = loop.clock.now()), { clock: loop.clock, scheduler: loop });
    loop.runUntil(600);
    loop.block(2000);
    // The stall is credited as one step plus the tolerance at most (75 ms), not 2 s.
    loop.runUntil(2600 + 300);
    expect(expiredAt).toBeUndefined();
    loop.runUntil(2600 + 500);
    expect(expiredAt).toBeGreaterThan(2600 + 300);
    expect(expiredAt).toBeLessThanOrEqual(2600 + 400);

    const stalled = new VirtualLoop();
    let stalledAt: number | undefined;
    loopTimeout(1000, () => (stalledAt = stalled.clock.now()), {
      clock: stalled.clock,
      scheduler: stalled,
      backstopMs: 5000,
    });
    while (stalledAt === undefined && stalled.clock.now() < 60_000) stalled.block(500);
    expect(stalledAt).toBe(5000);
  });

  it("a real blocked event loop does not fail a healthy engine's probe", async () => {
    const engine = await startMockerProcess();
    procs.push(engine.proc);
    const reg = new WorkerRegistry();
    reg.add(worker(1, engine.url, { servedModelName: engine.model }));
    const prober = new HealthProber(reg, { unhealthyAfter: 1, timeoutMs: 1000 });
    expect(await prober.probe(1)).toBe(true);
    const probing = prober.probe(1);
    const until = performance.now() + 1500;
    while (performance.now() < until) {
      /* the gateway's loop saturated for 1.5 s */
    }
    expect(await probing).toBe(true);
    expect(reg.isAvailable(1)).toBe(true);
    prober.close();
  });
});

function worker(id: number, url: string, extra: Partial<WorkerInfo> = {}): WorkerInfo {
  return { id, model: 'm', url, role: 'aggregated', dialect: 'vllm', dpStart: 0, dpSize: 1, ...extra };
}

const procs: KvgateProcess[] = [];
afterEach(async () => {
  await Promise.all(procs.splice(0).map((p) => p.stop()));
});

describe('a real engine that crashes or stops is still ejected and readmitted (issue 13 item 8c)', () => {
  it('POST /admin/crash on one of two mocker processes: ejected, then readmitted when an engine is back on its port', async () => {
    const [a, b] = await Promise.all([startMockerProcess(), startMockerProcess()]);
    procs.push(a.proc, b.proc);
    const reg = new WorkerRegistry();
    reg.add(worker(1, a.url, { servedModelName: a.model }));
    reg.add(worker(2, b.url, { servedModelName: b.model }));
    const w = { lines: [] as Record<string, unknown>[] };
    const metrics = new KvgateMetrics({ processMetrics: false });
    const prober = new HealthProber(reg, { unhealthyAfter: 2, timeoutMs: 1000 });
    prober.watch('m', captureWarnings(w.lines), metrics);
    await prober.probeAll();
    expect(reg.available('m')).toHaveLength(2);

    expect((await fetch(`${a.url}/admin/crash`, { method: 'POST' })).status).toBe(202);
    await until(async () => (await prober.probe(1), !reg.isAvailable(1)), 'the crashed engine to be ejected');
    expect(reg.isAvailable(2)).toBe(true);
    expect(w.lines).toEqual([expect.objectContaining({ workerId: 1, url: a.url, transition: 'ejected' })]);

    // A new engine process on the same port (a restarted engine).
    await a.proc.stop();
    const again = await startMockerProcess(Number(new URL(a.url).port));
    procs.push(again.proc);
    await until(async () => (await prober.probe(1), reg.isAvailable(1)), 'the restarted engine to be readmitted');
    expect(w.lines.at(-1)).toMatchObject({ workerId: 1, url: a.url, transition: 'readmitted' });
    expect(await metrics.text()).toContain(
      'kvgate_worker_health_transitions_total{model="m",worker_id="1",transition="readmitted"} 1',
    );
    prober.close();
  });
});

describe("the series a model's watch counts the ledger's outcomes in", () => {
  const servers: Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
  });

  it('an ejection the limit refused and an ejection lifted are counted in the metrics handed to watch', async () => {
    const codes = [{ code: 503 }, { code: 503 }];
    const reg = new WorkerRegistry();
    reg.add(worker(1, await healthServer(codes[0]!, servers)));
    reg.add(worker(2, await healthServer(codes[1]!, servers)));
    const metrics = new KvgateMetrics({ processMetrics: false });
    const prober = new HealthProber(reg, { unhealthyAfter: 1, maxEjectedPercent: 50, checkModels: false });
    prober.watch('m', captureWarnings([]), metrics);
    // One of two may be out (50 %): worker 1 is ejected, worker 2 kept routable.
    await prober.probe(1);
    await prober.probe(2);
    codes[0]!.code = 200;
    await prober.probe(1);
    const text = await metrics.text();
    expect(text).toContain('kvgate_worker_ejections_total{model="m",worker_id="1",reason="health_probe"} 1');
    expect(text).toContain('kvgate_worker_ejections_refused_total{model="m",worker_id="2",reason="health_probe"} 1');
    expect(text).toContain('kvgate_worker_readmissions_total{model="m",worker_id="1",reason="health_probe"} 1');
    prober.close();
  });
});
