/**
 * PoolMetrics across worker churn: a worker that left takes its resolved children with it, so ids that come and
 * go keep no entry each, and a worker that comes back under the same id has its series at zero again.
 */
import { describe, expect, it } from 'vitest';
import type { WorkerRole } from '../../../src/common/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { PoolMetrics } from '../../../src/routing/push/pool-metrics.js';

describe('PoolMetrics', () => {
  it('gives a worker that left and came back under the same id its TTFT and ITL series at zero again', async () => {
    const m = new KvgateMetrics({ processMetrics: false });
    const members = new Map<number, { role: WorkerRole }>([[7, { role: 'aggregated' }]]);
    const pm = new PoolMetrics(m, 'm', 'decode', members, () => undefined);
    const ttftCount =
      'kvgate_router_time_to_first_token_seconds_count{model="m",worker_type="aggregated",worker_id="7"}';
    pm.addWorker(7, 0, 1);
    pm.latency('aggregated', 7).ttft.observe(0.1);
    expect(await m.text()).toContain(`${ttftCount} 1`);
    // It leaves: the pool forgets it, and once drained the fleet removes every series of its id.
    members.delete(7);
    pm.forgetWorker(7);
    m.forgetWorker(7);
    expect(await m.text()).not.toContain(ttftCount);
    members.set(7, { role: 'aggregated' });
    pm.addWorker(7, 0, 1);
    const text = await m.text();
    expect(text).toContain(`${ttftCount} 0`);
    expect(text).toContain(
      'kvgate_router_inter_token_latency_seconds_count{model="m",worker_type="aggregated",worker_id="7"} 0',
    );
    pm.close();
  });
});
