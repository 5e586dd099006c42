/**
 * How a push router picks and books a slot: one `LegSelector` per router mode
 * family. The push router owns membership and dispatch; the selector owns
 * choosing, the booking it makes, and the load it reports.
 *
 * - `KvSelector` (kv): the KvRouter decides (queue, backpressure) and keeps the bookkeeping.
 * - `LocalSelector` (simple and direct): in-flight legs per slot counted here;
 *   its two variants differ only in `choose`: `SimpleSelector` by a rule over
 *   load, `DirectSelector` by the worker the request must name.
 */
import { slotKey, type RoutingHints, type WorkerPin, type WorkerRank, type WorkerRole } from '../../common/index.js';
import type { WorkerInfo } from '../../discovery/index.js';
import { KvgateError } from '../../errors/index.js';
import { resolveDpRank } from '../pins.js';
import type { WorkerGauges } from './pool-metrics.js';
import type { LegRequest, Selection } from './types.js';

/** The pool a selector chooses from: the push router's members, read-only. */
export interface PoolMembers {
  readonly model: string;
  readonly role: WorkerRole;
  readonly members: ReadonlyMap<number, WorkerInfo>;
}

export interface LegSelector {
  /** A worker joined (or changed); the KV selector registers its ranks with the scheduler. */
  addWorker(w: WorkerInfo): void;
  /**
   * A worker left: its bookkeeping (and, in KV mode, its index entries) go with it, unless `hold` (marked down: kept
   * for its return, in every mode; a later `removeWorker` without `hold` drops them).
   */
  removeWorker(id: number, hold?: boolean): void;
  /**
   * Chooses the slot for a leg, never one of `exclude`; `book` books it, `query` changes nothing.
   * @throws KvgateError for pins (UNKNOWN_WORKER, INVALID_DP_RANK, MISSING_WORKER_ID), NO_WORKERS,
   *   BACKPRESSURE / OVERLOADED, CLIENT_ABORTED while queued.
   */
  select(req: LegRequest, mode: 'book' | 'query', exclude: ReadonlySet<number> | undefined): Promise<Selection>;
  /** Undoes the booking `select` made (called exactly once per booked leg, by the leg's guard). */
  release(req: LegRequest, sel: Selection): void;
  /** Legs booked on a slot and not yet released. */
  activeRequests(slot: WorkerRank): number;
  /** Writes a slot's load into its gauges. */
  publishLoad(g: WorkerGauges, slot: WorkerRank): void;
}

/** Whether worker `w` carries every taint `routing` requires (no requirement: every worker does). */
export function carriesRequiredTaints(w: WorkerInfo, routing: Pick<RoutingHints, 'routingConstraints'>): boolean {
  const required = routing.routingConstraints?.requiredTaints;
  if (required === undefined || required.length === 0) return true;
  const taints = w.taints ?? [];
  return required.every((t) => taints.includes(t));
}

/**
 * Every (worker, rank) slot of the pool a leg may go to: in the request's allowed workers when given, carrying
 * its required taints, not in `exclude`.
 * @throws KvgateError KVG_ERR_NO_WORKERS when none is left.
 */
export function eligibleSlots(
  pool: PoolMembers,
  routing: Pick<RoutingHints, 'allowedWorkerIds' | 'routingConstraints'>,
  exclude: ReadonlySet<number> | undefined,
): WorkerRank[] {
  const allowed = routing.allowedWorkerIds;
  const allow =
    allowed === undefined ? undefined : allowed instanceof Set ? allowed : new Set(allowed as readonly number[]);
  const out: WorkerRank[] = [];
  for (const w of pool.members.values()) {
    if (exclude?.has(w.id) || (allow !== undefined && !allow.has(w.id)) || !carriesRequiredTaints(w, routing)) continue;
    for (let r = 0; r < w.dpSize; r++) out.push({ workerId: w.id, dpRank: w.dpStart + r });
  }
  if (out.length === 0)
    throw new KvgateError('KVG_ERR_NO_WORKERS', `no eligible ${pool.role} worker for model ${pool.model}`);
  return out;
}

/** The pool's worker a pin names, with the pinned rank checked against the worker's ranks. */
export function pinnedSlot(pool: PoolMembers, pin: WorkerPin): WorkerRank {
  const w = pool.members.get(pin.workerId);
  if (w === undefined) {
    throw new KvgateError(
      'KVG_ERR_UNKNOWN_WORKER',
      `worker ${pin.workerId} is not a ${pool.role} worker of model ${pool.model}`,
      { workerId: pin.workerId },
    );
  }
  return { workerId: w.id, dpRank: resolveDpRank(w, pin.dpRank) };
}

/**
 * The selectors that keep their own bookkeeping (simple and direct modes):
 * in-flight legs per slot, counted when booked and released by the guard.
 * A variant only says how it chooses.
 */
export abstract class LocalSelector implements LegSelector {
  protected readonly pool: PoolMembers;
  readonly #active = new Map<string, number>();

  constructor(pool: PoolMembers) {
    this.pool = pool;
  }

  /** The slot for a leg, and whether a pin chose it. `query` must not advance the variant's state. */
  protected abstract choose(
    req: LegRequest,
    mode: 'book' | 'query',
    exclude: ReadonlySet<number> | undefined,
  ): { slot: WorkerRank; pinned: boolean };

  addWorker(): void {}

  /** `hold`: its in-flight legs stay counted (released as usual), so it is back with their load (load is not KV state). */
  removeWorker(id: number, hold = false): void {
    if (hold) return;
    for (const key of [...this.#active.keys()]) if (key.startsWith(`${id}:`)) this.#active.delete(key);
  }

  async select(req: LegRequest, mode: 'book' | 'query', exclude: ReadonlySet<number> | undefined): Promise<Selection> {
    const { slot, pinned } = this.choose(req, mode, exclude);
    if (mode === 'book') this.#active.set(slotKey(slot.workerId, slot.dpRank), this.activeRequests(slot) + 1);
    return { slot, worker: this.pool.members.get(slot.workerId)!, overlapBlocks: 0, pinned, decision: undefined };
  }

  release(_req: LegRequest, sel: Selection): void {
    const key = slotKey(sel.slot.workerId, sel.slot.dpRank);
    const n = (this.#active.get(key) ?? 0) - 1;
    if (n > 0) this.#active.set(key, n);
    else this.#active.delete(key);
  }

  activeRequests(slot: WorkerRank): number {
    return this.#active.get(slotKey(slot.workerId, slot.dpRank)) ?? 0;
  }

  publishLoad(g: WorkerGauges, slot: WorkerRank): void {
    g.activeRequests.set(this.activeRequests(slot));
  }
}
