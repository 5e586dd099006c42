/**
 * How a ModelRouter follows the registry for its model: each worker that becomes routable, stops being routable,
 * or has new engine facts is handed to the router's pool operations. A worker marked down (`unavailable`) keeps its
 * bookings, its session pins and its index slot whatever its KV events; `keepsKv` says only whether it also keeps
 * a KV-event subscription. One marked down that then leaves the registry is `forgotten` (its kept state goes; it
 * was logged down already, and FleetMembers logs the leave).
 */
import type { WorkerDeparture, WorkerInfo, WorkerRegistry } from '../discovery/index.js';

export interface RegistryHandlers {
  /** The worker became routable (first time, or back after being marked down). */
  added(w: WorkerInfo): void;
  /**
   * It stopped being routable, `why`. Marked down (`unavailable`), it keeps its bookings, session pins and index slot
   * whatever `keepKv` says; `keepKv`: it also keeps KV-event subscriptions that keep that slot current.
   */
  removed(w: WorkerInfo, keepKv: boolean, why: WorkerDeparture): void;
  /** A worker marked down earlier left the registry: what was kept for it goes, nothing more is logged. */
  forgotten(w: WorkerInfo): void;
  /** A routable worker's engine facts changed. */
  updated(w: WorkerInfo): void;
  /** Whether the worker has a KV-event subscription kept while it is down (KV events, in a pool that reads them). */
  keepsKv(w: WorkerInfo): boolean;
}

/** Subscribes `h` to the registry's events of `model`; returns the unsubscribe. */
export function followRegistry(registry: WorkerRegistry, model: string, h: RegistryHandlers): () => void {
  /** Workers of the model marked down and still registered. */
  const down = new Set<number>();
  const added = (w: WorkerInfo): void => {
    if (w.model !== model) return;
    down.delete(w.id);
    h.added(w);
  };
  const removed = (w: WorkerInfo, why: WorkerDeparture): void => {
    if (w.model !== model) return;
    if (down.delete(w.id)) return h.forgotten(w);
    if (why === 'unavailable') down.add(w.id);
    h.removed(w, why === 'unavailable' && h.keepsKv(w), why);
  };
  const updated = (w: WorkerInfo): void => {
    if (w.model === model) h.updated(w);
  };
  registry.on('added', added);
  registry.on('removed', removed);
  registry.on('updated', updated);
  return () => {
    registry.off('added', added);
    registry.off('removed', removed);
    registry.off('updated', updated);
  };
}
