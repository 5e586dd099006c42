/**
 * Issue 12 item 3: a query-only request is observed in the KV-hit and
 * input-length histograms before its answer returns, as a dispatched request
 * is (and as Dynamo does), while nothing is booked.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { startFleet, prepare, randomTokens, type Fleet } from '../../helpers/fleet.js';

function count(text: string, name: string): number {
  const m = new RegExp(`^${name}_count\\{model="mock-model",worker_type="aggregated"\\} (\\d+)$`, 'm').exec(text);
  return m === null ? Number.NaN : Number(m[1]);
}

describe('query-only requests in the histograms', () => {
  let f: Fleet;
  beforeAll(async () => {
    f = await startFleet(2, { kvEvents: false });
  });
  afterAll(async () => {
    await f?.close();
  });

  it('a query is counted in kv_hit_rate and input_sequence_tokens, and books nothing', async () => {
    const before = await f.metrics.text();
    const q = await f.router.query(prepare(randomTokens(seededRng(3), 96), { queryOnly: true }));
    expect([1, 2]).toContain(q.worker.workerId);
    const after = await f.metrics.text();
    expect(count(after, 'kvgate_router_kv_hit_rate') - count(before, 'kvgate_router_kv_hit_rate')).toBe(1);
    expect(
      count(after, 'kvgate_router_input_sequence_tokens') - count(before, 'kvgate_router_input_sequence_tokens'),
    ).toBe(1);
    expect(after).toMatch(
      /^kvgate_router_input_sequence_tokens_sum\{model="mock-model",worker_type="aggregated"\} 96$/m,
    );
    expect(f.router.decode.kvRouter!.activeRequestCount).toBe(0);
  });
});
