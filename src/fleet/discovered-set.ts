/**
 * How a discovery source (etcd, Kubernetes) applies the worker set it now
 * sees: the workers gone or changed leave, then the new or changed ones join
 * through `FleetMembers`. A join refused because another source took the id
 * since it was read keeps that worker out (`refused` is told; the source's
 * next update retries it).
 */
import { isKvgateError, type KvgateError } from '../errors/index.js';
import { workerDiff, type WorkerConfig } from '../config/index.js';
import type { FleetMembers } from './membership.js';
import type { WorkerSourceKind } from './source.js';

/** The set now applied, and who joined and left; undefined when nothing changed. */
export function applyWorkerSet(
  members: FleetMembers,
  source: WorkerSourceKind,
  current: ReadonlyMap<number, WorkerConfig>,
  next: Map<number, WorkerConfig>,
  refused: (w: WorkerConfig, err: KvgateError) => void,
): { joined: WorkerConfig[]; left: WorkerConfig[] } | undefined {
  const { removed, added } = workerDiff([...current.values()], [...next.values()]);
  if (removed.length === 0 && added.length === 0) return undefined;
  for (const w of removed) members.leave(w.id);
  for (const w of added) {
    try {
      members.join(w, source);
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      next.delete(w.id);
      refused(w, err);
    }
  }
  return { joined: added.filter((w) => next.has(w.id)), left: removed };
}
