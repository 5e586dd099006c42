/**
 * What names an aggregated model's pool where it is not the span's `kvgate.pool` (push/route-span.test.ts): the
 * replica channel stays `<model>/decode`, Dynamo's router side and the name replicas of earlier versions sync on, so
 * a rolling upgrade keeps one channel per pool; the session series keep Dynamo's `worker_type="decode"`
 * (sticky-sessions.test.ts pins it; docs/metrics.md says which side each value names).
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { WorkerRegistry } from '../../src/discovery/index.js';
import { EngineClient } from '../../src/engines/index.js';
import { channelKey } from '../../src/replicas/index.js';
import { ModelRouter, makeRouterContext } from '../../src/routing/index.js';
import { captureWarnings } from '../helpers/capture-log.js';

describe("an aggregated model's pool in replica sync", () => {
  it('is attached as the decode side: its channel is <model>/decode, as in earlier versions', async () => {
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
    const channels: string[] = [];
    let workerTypeOf: ((id: number) => string) | undefined;
    const router = new ModelRouter(
      {
        model: 'm',
        mode: 'kv',
        blockSize: 16,
        registry,
        engine: new EngineClient(),
        tickIntervalMs: 0,
        attachReplica: (pool) => {
          channels.push(channelKey('m', pool.role));
          workerTypeOf = pool.workerTypeOf;
        },
      },
      makeRouterContext({ clock: new ManualClock(), rng: seededRng(1), logger: captureWarnings([]) }),
    );
    try {
      expect(channels).toEqual(['m/decode']);
      // The per-worker series the channel feeds name the worker's own role.
      expect(workerTypeOf?.(1)).toBe('aggregated');
    } finally {
      await router.close();
    }
  });
});
