/**
 * A worker's series going with it. Every series labelled with a worker's id (`worker_id`, `prefill_worker_id`)
 * is removed from a registry once the worker has left the fleet: worker ids come and go with the fleet
 * (Kubernetes pods, etcd registrations, the picker's InferencePool endpoints), and series kept for every id
 * that ever served would grow the process's memory and the operators' Prometheus without bound.
 *
 * It reads prom-client's per-metric `hashMap` of `{ labels, ... }` entries (pinned version, as fast-children.ts
 * does) to find the label sets of the worker's series, and removes each through prom-client's own `remove`.
 */
import type { Registry } from 'prom-client';

/** The labels that name a worker by id. */
const WORKER_LABELS = ['worker_id', 'prefill_worker_id'] as const;

interface LabelledMetric {
  readonly labelNames?: readonly string[];
  readonly hashMap?: Record<string, { labels?: Record<string, string | number> }>;
  remove(labels: Record<string, string | number>): void;
}

/** Removes every series of `registry` whose worker-id label is `workerId`; returns how many went. */
export function removeWorkerSeries(registry: Registry, workerId: number): number {
  const id = String(workerId);
  let removed = 0;
  for (const metric of registry.getMetricsAsArray() as unknown as LabelledMetric[]) {
    const names = WORKER_LABELS.filter((l) => metric.labelNames?.includes(l));
    if (names.length === 0 || metric.hashMap === undefined) continue;
    for (const entry of Object.values(metric.hashMap)) {
      const labels = entry.labels;
      if (labels === undefined || !names.some((l) => String(labels[l]) === id)) continue;
      metric.remove({ ...labels });
      removed++;
    }
  }
  return removed;
}
