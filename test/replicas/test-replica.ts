/** A `ReplicaSync` on an in-process bus for replica sync unit tests, bound to its own metrics and a silent logger. */
import pino from 'pino';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { ReplicaSync } from '../../src/replicas/index.js';
import type { MemoryBus } from './memory-bus.js';

export function replica(
  bus: MemoryBus,
  id: string,
  opts: { chunkBytes?: number; maxSnapshotBytes?: number } = {},
): { sync: ReplicaSync; metrics: KvgateMetrics } {
  const metrics = new KvgateMetrics({ processMetrics: false });
  const sync = new ReplicaSync({
    transport: bus.transport(),
    routerId: id,
    heartbeatMs: 1000,
    peerTimeoutMs: 5000,
    maxQueuedOps: 1000,
    subjectPrefix: 'kvgate.test',
    chunkBytes: opts.chunkBytes ?? 1024,
    maxSnapshotBytes: opts.maxSnapshotBytes ?? 1 << 24,
  });
  sync.bind(pino({ level: 'silent' }), metrics);
  return { sync, metrics };
}
