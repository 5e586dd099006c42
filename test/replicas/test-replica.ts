/**
 * A `ReplicaSync` on an in-process bus for replica sync unit tests, bound to its own metrics and a logger that is
 * silent unless `lines` is given (then every line from info on is parsed into it).
 */
import pino from 'pino';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { ReplicaSync } from '../../src/replicas/index.js';
import type { MemoryBus } from './memory-bus.js';

export function replica(
  bus: MemoryBus,
  id: string,
  opts: { chunkBytes?: number; maxSnapshotBytes?: number; lines?: Record<string, unknown>[] } = {},
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
  const lines = opts.lines;
  const logger =
    lines === undefined
      ? pino({ level: 'silent' })
      : pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
  sync.bind(logger, metrics);
  return { sync, metrics };
}
