/**
 * What names an aggregated model's pool where it is not the span's `kvgate.pool` (push/route-span.test.ts): the
 * replica channel stays `<model>/decode`, Dynamo's router side and the name replicas of earlier versions sync on, so
 * a rolling upgrade keeps one channel per pool; the session series keep Dynamo's `worker_type="decode"`
 * (sticky-sessions.test.ts pins it; docs/metrics.md says which side each value names).
 */
import { describe, expect, it } from 'vitest';
import { channelKey } from '../../src/replicas/index.js';
import { MODEL, startFleet } from '../helpers/fleet.js';

describe("an aggregated model's pool in replica sync", () => {
  it('is attached as the decode side: its channel is <model>/decode, as in earlier versions', async () => {
    const channels: string[] = [];
    let workerTypeOf: ((id: number) => string) | undefined;
    const fleet = await startFleet(1, {
      router: {
        attachReplica: (pool) => {
          channels.push(channelKey(MODEL, pool.role));
          workerTypeOf = pool.workerTypeOf;
        },
      },
    });
    try {
      expect(channels).toEqual([`${MODEL}/decode`]);
      // The per-worker series the channel feeds name the worker's own role.
      expect(workerTypeOf?.(1)).toBe('aggregated');
    } finally {
      await fleet.close();
    }
  });
});
