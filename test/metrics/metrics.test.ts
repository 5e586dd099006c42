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
});
