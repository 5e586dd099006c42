/**
 * How a ModelRouter follows the registry for its model: each worker that becomes routable, stops being routable,
 * or has new engine facts is handed to the router's pool operations. A worker marked down (`unavailable`) keeps
 * what kvgate knows of its engine's KV cache when `keepsKv` says there is any, and its session pins; one marked down that then leaves
 * the registry is `forgotten` (its kept state goes; it was logged down already, and FleetMembers logs the leave).
 */
import type { WorkerDeparture, WorkerInfo, WorkerRegistry } from '../discovery/index.js';

export interface RegistryHandlers {
  /** The worker became routable (first time, or back after being marked down). */
  added(w: WorkerInfo): void;
  /**
   * It stopped being routable, `why`; `keepKv`: marked down, its prefix-index slot, KV-event subscriptions and
   * bookings kept. A worker marked down keeps its session pins whatever `keepKv` says (its engine keeps its cache).
   */
  removed(w: WorkerInfo, keepKv: boolean, why: WorkerDeparture): void;
  /** A worker marked down earlier left the registry: what was kept for it goes, nothing more is logged. */
  forgotten(w: WorkerInfo): void;
  /** A routable worker's engine facts changed. */
  updated(w: WorkerInfo): void;
  /** Whether the worker has KV knowledge worth keeping while it is down (KV events, in a pool that reads them). */
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
