/**
 * The KV-event hooks of one model: counters in the metrics registry, and the
 * worker watch told of replays and of a block size other than the model's.
 */
import type { KvEventHooks } from '../events/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import type { WorkerWatch } from './worker-watch.js';

/** KV-event counters exported as Prometheus metrics; a block size other than the model's is reported per worker. */
export function eventHooks(m: KvgateMetrics | undefined, watch: WorkerWatch, blockSize: number): KvEventHooks {
  const onBlockSizeMismatch = (w: number): void => watch.blockSizeMismatch(w, blockSize);
  const onReplay: KvEventHooks['onReplay'] = (w, r, outcome, applied) => {
    if (outcome === 'recovered') watch.replayed(w, r, applied);
    m?.kvEventReplays.labels({ worker_id: String(w), dp_rank: String(r), outcome }).inc();
  };
  if (m === undefined) return { onApplied: (w, _r, _t, status) => status === 'block_size_mismatch' && onBlockSizeMismatch(w), onReplay };
  // onApplied runs once per event (hundreds of thousands a second under load):
  // resolve each (type, status) child once rather than hashing labels per event.
  const applied = new Map<string, { inc(): void }>();
  return {
    onApplied: (w, _r, type, status) => {
      if (status === 'block_size_mismatch') onBlockSizeMismatch(w);
      const key = `${type}:${status}`;
      let c = applied.get(key);
      if (c === undefined) applied.set(key, (c = m.kvEventsApplied.labels({ event_type: type, status })));
      c.inc();
    },
    onDecodeError: (rep) => m.kvEventDecodeErrors.labels({ worker_id: String(rep.workerId), kind: rep.kind }).inc(),
    onGap: (w, r) => m.kvEventGaps.labels({ worker_id: String(w), dp_rank: String(r) }).inc(),
    onReplay,
    onDropped: (w, r, reason) => m.kvEventDropped.labels({ worker_id: String(w), dp_rank: String(r), reason }).inc(),
    onReset: (w, r, reason) => {
      m.kvEventResets.labels({ worker_id: String(w), dp_rank: String(r), reason }).inc();
      if (reason === 'restart') m.kvEventPublisherRestarts.labels({ worker_id: String(w), dp_rank: String(r) }).inc();
    },
  };
}
