import { describe, expect, it } from 'vitest';
import { KvgateMetrics } from '../../src/metrics/index.js';

describe('KvgateMetrics', () => {
  it('exposes every metric with the kvgate_ prefix, in its own registry', async () => {
    const a = new KvgateMetrics({ processMetrics: false });
    const b = new KvgateMetrics({ processMetrics: false }); // no clash: separate registries
    a.ttft.labels({ model: 'm', worker_type: 'aggregated' }).observe(0.05);
    a.overhead.labels({ model: 'm', stage: 'total' }).observe(0.00002);
    a.kvEventsApplied.labels({ event_type: 'stored', status: 'ok' }).inc(3);
    const text = await a.text();
    expect(text).toContain('kvgate_router_time_to_first_token_seconds_count{model="m",worker_type="aggregated"} 1');
    expect(text).toContain('kvgate_kv_events_applied_total{event_type="stored",status="ok"} 3');
    const names = [...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]!);
    expect(names.length).toBeGreaterThan(25);
    for (const n of names) expect(n.startsWith('kvgate_')).toBe(true);
    expect(await b.text()).not.toContain('model="m"');
  });

  it('forgetWorker removes every series labelled with the worker id, across 1,000 ids of churn', async () => {
    const m = new KvgateMetrics({ processMetrics: false });
    const series = (text: string, id: number): string[] =>
      text.split('\n').filter((l) => l.includes(`worker_id="${id}"`) || l.includes(`prefill_worker_id="${id}"`));
    const touch = (id: number): void => {
      const w = String(id);
      m.ttft.labels({ model: 'm', worker_type: 'aggregated', worker_id: w }).observe(0.05);
      m.workerUp.labels({ model: 'm', worker_id: w, worker_type: 'aggregated' }).set(1);
      m.kvEventConnectionChanges.labels({ worker_id: w, dp_rank: '0', change: 'connected' }).inc();
      m.disaggRequests.labels({ model: 'm', prefill_worker_id: w, handoff: 'sync', outcome: 'decoded' }).inc();
      m.replicas.peerLoadShare.labels({ model: 'm', worker_id: w, dp_rank: '0', worker_type: 'aggregated' }).set(0);
    };
    touch(1);
    for (let id = 100; id < 1100; id++) {
      touch(id);
      expect(m.forgetWorker(id)).toBe(5);
    }
    const text = await m.text();
    for (const id of [100, 500, 1099]) expect(series(text, id)).toEqual([]);
    // The worker that stayed keeps its series.
    expect(series(text, 1).length).toBeGreaterThan(5);
    expect(text).toContain('kvgate_worker_up{model="m",worker_id="1",worker_type="aggregated"} 1');
  });
});
