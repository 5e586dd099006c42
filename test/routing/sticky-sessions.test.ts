// issue 13 item 4: sticky sessions are bounded: the client-chosen timeout is clamped and the number of
// bindings is capped (least recently used out). Before, 20,000 sessions with `timeout: 1e9` never expired.
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { WorkerRegistry } from '../../src/discovery/index.js';
import { EngineClient } from '../../src/engines/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { ModelRouter, makeRouterContext } from '../../src/routing/index.js';
import { StickySessions } from '../../src/routing/sticky-sessions.js';
import { captureWarnings } from '../helpers/capture-log.js';

describe('sticky session limits (issue 13 item 4)', () => {
  it('20,000 sessions with timeout 1e9 never exceed the cap and lapse at the maximum timeout', () => {
    const clock = new ManualClock();
    const limits: string[] = [];
    const s = new StickySessions(clock, 300_000, { maxTtlMs: 3_600_000, maxSessions: 5000 }, (limit) =>
      limits.push(limit),
    );
    for (let i = 0; i < 20_000; i++) {
      s.served({ id: `s${i}`, timeoutSecs: 1e9 }, { workerId: 1 + (i % 4), dpRank: 0 });
      expect(s.size).toBeLessThanOrEqual(5000);
      if (i % 100 === 0) clock.advance(1);
    }
    expect(s.size).toBe(5000);
    expect(limits.filter((l) => l === 'timeout')).toHaveLength(20_000);
    expect(limits.filter((l) => l === 'capacity')).toHaveLength(15_000);
    // The most recent sessions are the ones kept, each with the clamped TTL.
    expect(s.lookup('s0')).toBeUndefined();
    const last = s.lookup('s19999')!;
    expect(last.ttlMs).toBe(3_600_000);
    const bound = clock.now();
    clock.advance(3_600_000 - 200);
    expect(s.lookup('s19999')).toBeDefined();
    clock.set(bound + 3_600_000);
    expect(s.sweep()).toBe(5000);
    expect(s.size).toBe(0);
  });

  it('a binding used again is the most recently used: eviction takes the idle one', () => {
    const clock = new ManualClock();
    const s = new StickySessions(clock, 1000, { maxSessions: 2 });
    s.bind('a', { workerId: 1, dpRank: 0 });
    s.bind('b', { workerId: 2, dpRank: 0 });
    expect(s.touch('a')).toBe(true);
    s.bind('c', { workerId: 3, dpRank: 0 });
    expect(s.lookup('a')).toBeDefined();
    expect(s.lookup('b')).toBeUndefined();
    expect(s.lookup('c')).toBeDefined();
  });

  it('a ModelRouter applies the limits to its pool, counts them and warns once per kind', async () => {
    const clock = new ManualClock();
    const metrics = new KvgateMetrics({ processMetrics: false });
    const warnings: Record<string, unknown>[] = [];
    const registry = new WorkerRegistry();
    registry.add({
      id: 1,
      model: 'm',
      url: 'http://127.0.0.1:9',
      role: 'aggregated',
      dialect: 'vllm',
      dpStart: 0,
      dpSize: 1,
    });
    const engine = new EngineClient();
    const router = new ModelRouter(
      {
        model: 'm',
        mode: 'round-robin',
        blockSize: 16,
        registry,
        engine,
        tickIntervalMs: 0,
        sessionLimits: { maxTtlMs: 60_000, maxSessions: 10 },
      },
      makeRouterContext({ clock, rng: seededRng(1), metrics, logger: captureWarnings(warnings) }),
    );
    try {
      for (let i = 0; i < 50; i++)
        router.sessions.served({ id: `x${i}`, timeoutSecs: 1e9 }, { workerId: 1, dpRank: 0 });
      expect(router.sessions.size).toBe(10);
      expect(router.prefill.sessions.maxSessions).toBe(10);
      expect(router.prefill.sessions.maxTtlMs).toBe(60_000);
      router.tick();
      const text = await metrics.text();
      expect(text).toContain('kvgate_router_session_limits_total{model="m",worker_type="decode",limit="timeout"} 50');
      expect(text).toContain('kvgate_router_session_limits_total{model="m",worker_type="decode",limit="capacity"} 40');
      expect(text).toContain('kvgate_router_sessions{model="m",worker_type="decode"} 10');
      expect(warnings).toHaveLength(2);
      expect(warnings[0]).toMatchObject({ maxSessionTimeoutS: 60, maxSessions: 10 });
    } finally {
      await router.close();
      await engine.close();
    }
  });
});

// A worker marked down (a failed health check, an ejection) keeps its sessions' pins for its return; one that
// leaves drops them. Before, marking it down dropped them, so after a flap its sessions were placed anew.
describe("a worker marked down holds its sessions' pins", () => {
  const A = { workerId: 1, dpRank: 0 };
  const B = { workerId: 2, dpRank: 0 };
  const up = (id: number): boolean => id !== 1;

  it('passes a held pin over without dropping it; a session served elsewhere meanwhile moves; TTL still runs', () => {
    const clock = new ManualClock();
    const s = new StickySessions(clock, 1000);
    const events: [string, number, number][] = [];
    s.onPin = (event, workerId, n) => void events.push([event, workerId, n]);
    s.served({ id: 'idle' }, A);
    s.served({ id: 'busy' }, A);
    s.served({ id: 'short' }, A);
    s.bind('long', A, 5000);
    clock.advance(500);
    s.touch('idle');
    s.touch('long');

    expect(s.holdWorker(1)).toBe(4);
    expect(s.holds(1)).toBe(true);
    // Not routed to (the worker is down), not dropped.
    expect(s.stickySlot({ id: 'idle' }, up)).toBeUndefined();
    expect(s.lookup('idle')).toMatchObject(A);
    // A subagent of a held session goes where the router sends it, not to the held worker.
    expect(s.stickySlot({ id: 'child', parentId: 'idle' }, up)).toBeUndefined();
    // Served elsewhere while held: bound there (that worker now holds its whole context).
    s.served({ id: 'busy' }, B);
    expect(s.lookup('busy')).toMatchObject(B);
    // Nothing slides a held pin: 'short' (last used at 0) lapses at 1000 while its worker is down.
    clock.advance(600);
    expect(s.lookup('short')).toBeUndefined();
    expect(s.lookup('idle')).toMatchObject(A);

    expect(s.releaseWorker(1)).toBe(2); // 'idle' and 'long'
    expect(s.holds(1)).toBe(false);
    expect(s.stickySlot({ id: 'idle' }, () => true)).toMatchObject(A);
    expect(s.stickySlot({ id: 'busy' }, () => true)).toMatchObject(B);
    expect(s.releaseWorker(1)).toBe(0); // not held: nothing to report
    expect(events).toEqual([
      ['held', 1, 4],
      ['moved', 1, 1],
      ['returned', 1, 2],
    ]);
  });

  it('a worker that leaves drops its pins at once, held or not', () => {
    const s = new StickySessions(new ManualClock(), 1000);
    const events: [string, number, number][] = [];
    s.onPin = (event, workerId, n) => void events.push([event, workerId, n]);
    s.bind('a', A);
    s.bind('b', B);
    expect(s.holdWorker(1)).toBe(1);
    expect(s.unbindWorker(1)).toBe(1);
    expect(s.holds(1)).toBe(false);
    expect(s.unbindWorker(2)).toBe(1);
    expect(s.size).toBe(0);
    expect(s.holdWorker(3)).toBe(0); // none to hold: nothing reported
    expect(events).toEqual([
      ['held', 1, 1],
      ['dropped', 1, 1],
      ['dropped', 2, 1],
    ]);
  });

  it("a ModelRouter holds them on the registry's markDown (KV events or not), drops them on remove, and counts both", async () => {
    const metrics = new KvgateMetrics({ processMetrics: false });
    const registry = new WorkerRegistry();
    for (const id of [1, 2])
      registry.add({
        id,
        model: 'm',
        url: `http://127.0.0.1:9/${id}`,
        role: 'aggregated',
        dialect: 'vllm',
        dpStart: 0,
        dpSize: 1,
      });
    const engine = new EngineClient();
    const router = new ModelRouter(
      { model: 'm', mode: 'round-robin', blockSize: 16, registry, engine, tickIntervalMs: 0 },
      makeRouterContext({ clock: new ManualClock(), rng: seededRng(1), metrics }),
    );
    const count = async (event: string): Promise<string | undefined> =>
      (await metrics.text())
        .split('\n')
        .find((l) => l.startsWith(`kvgate_router_session_pins_total{model="m",worker_type="decode",event="${event}"}`));
    try {
      router.sessions.served({ id: 's' }, A);
      registry.markDown(1);
      expect(router.sessions.holds(1)).toBe(true);
      expect(router.sessions.lookup('s')).toMatchObject(A);
      registry.markUp(1);
      expect(router.sessions.holds(1)).toBe(false);
      expect(router.sessions.lookup('s')).toMatchObject(A);
      registry.markDown(1);
      registry.remove(1);
      expect(router.sessions.lookup('s')).toBeUndefined();
      expect(await count('held')).toMatch(/ 2$/);
      expect(await count('returned')).toMatch(/ 1$/);
      expect(await count('dropped')).toMatch(/ 1$/);
    } finally {
      await router.close();
      await engine.close();
    }
  });
});
