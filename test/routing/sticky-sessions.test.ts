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
