/**
 * Each worker's connections to its engine as gauges, read at every scrape from undici's own pool stats (the
 * engine client's `workerStats`), never counted here: `kvgate_worker_engine_connections{state=busy|idle}` and
 * `kvgate_worker_engine_requests_waiting`. A burst beyond `engine_connections.max_per_worker` waits inside the
 * pool, where the engine does not see it; without these gauges it showed only as `connection_wait` timeouts.
 *
 * Series follow the registry: a registered worker of the model has them from the first scrape (at zero before
 * traffic), and a worker that left loses them at the next one (its pool is closing; the fleet forgets the rest of
 * its series once it drained). Workers sharing one engine URL (dp ranks split across ids) share one pool, so they
 * read the same counts.
 */
import type { WorkerRegistry } from '../discovery/index.js';
import type { EngineClient } from '../engines/index.js';
import type { KvgateMetrics } from '../metrics/index.js';

/** Writes `model`'s workers' engine-connection gauges at each scrape of `metrics`; returns the function that stops it. */
export function watchEngineConnections(
  model: string,
  registry: WorkerRegistry,
  engine: EngineClient,
  metrics: KvgateMetrics,
): () => void {
  let written = new Set<string>();
  const forget = (workerId: string): void => {
    metrics.workerEngineRequestsWaiting.remove({ model, worker_id: workerId });
    for (const state of ['busy', 'idle']) metrics.workerEngineConnections.remove({ model, worker_id: workerId, state });
  };
  const stop = metrics.onScrape(() => {
    const now = new Set<string>();
    for (const w of registry.all()) {
      if (w.model !== model) continue;
      const s = engine.workerStats(w.url);
      if (s === undefined) continue;
      const worker_id = String(w.id);
      now.add(worker_id);
      metrics.workerEngineConnections.set({ model, worker_id, state: 'busy' }, s.connected - s.free);
      metrics.workerEngineConnections.set({ model, worker_id, state: 'idle' }, s.free);
      metrics.workerEngineRequestsWaiting.set({ model, worker_id }, s.queued);
    }
    for (const id of written) if (!now.has(id)) forget(id);
    written = now;
  });
  return () => {
    stop();
    for (const id of written) forget(id);
  };
}
