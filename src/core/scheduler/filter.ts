/**
 * Eligibility: which slots may serve a request (a pin, the allowed workers and
 * ranks, the required taints), and which of them are over a busy threshold (never
 * filtered for a pinned request).
 * Results go into the scratch `eligible` buffer; nothing here allocates per
 * candidate.
 */
import { KvgateError } from '../../errors/index.js';
import type { ActiveSequences } from '../active-sequences.js';
import type { KvRouterConfig } from '../config.js';
import type { SlotTable } from './slots.js';
import { invalidArg, workerNotFound, type SchedulingRequest } from './types.js';

export class SlotFilter {
  readonly #knobs: () => KvRouterConfig;
  readonly #table: SlotTable;
  readonly #active: ActiveSequences;

  /** `knobs`: the scheduler's knobs in force (they may be replaced at runtime). */
  constructor(knobs: () => KvRouterConfig, table: SlotTable, active: ActiveSequences) {
    this.#knobs = knobs;
    this.#table = table;
    this.#active = active;
  }

  /**
   * Fills `scratch.eligible` with the request's candidate slots; returns how many.
   * @throws KvgateError KVG_ERR_UNKNOWN_WORKER / KVG_ERR_INVALID_DP_RANK for bad pins, KVG_ERR_NO_WORKERS when
   *   nothing is eligible, KVG_ERR_INVALID_ARGUMENT for a preferred-taint factor that is not > 0.
   */
  eligibleInto(req: SchedulingRequest): number {
    const preferred = req.routingConstraints?.preferredTaints;
    if (preferred !== undefined) {
      for (const [t, v] of Object.entries(preferred)) {
        if (!(Number.isFinite(v) && v > 0))
          throw invalidArg(`preferred taint ${t}: factor must be a finite number > 0, got ${v}`);
      }
    }
    const table = this.#table;
    const elig = table.scratch.eligible;
    if (req.pinWorkerId !== undefined) {
      const w = table.workers.get(req.pinWorkerId);
      if (w === undefined) throw workerNotFound(req.pinWorkerId);
      if (req.pinDpRank !== undefined) {
        elig[0] = table.checkedSlot(w, req.pinDpRank);
        return 1;
      }
      elig.set(w.slots);
      return w.slots.length;
    }
    let n = 0;
    const allowed = req.allowedWorkerIds;
    const ranks = req.allowedDpRanks;
    if (allowed === undefined && ranks === undefined) {
      elig.set(table.all);
      n = table.all.length;
    } else {
      const set =
        allowed === undefined || allowed instanceof Set
          ? (allowed as ReadonlySet<number> | undefined)
          : new Set(allowed as readonly number[]);
      for (let i = 0; i < table.all.length; i++) {
        const s = table.all[i]!;
        const w = table.slotWorker[s]!;
        if ((set === undefined || set.has(w)) && (ranks?.get(w)?.has(table.slotRank[s]!) ?? true)) elig[n++] = s;
      }
    }
    if (n === 0) {
      throw new KvgateError(
        'KVG_ERR_NO_WORKERS',
        allowed === undefined && ranks === undefined
          ? 'no workers are registered'
          : `none of the allowed workers${ranks === undefined ? '' : ' and dp ranks'} is registered`,
        allowed === undefined ? {} : { allowedWorkerIds: [...allowed] },
      );
    }
    const required = req.routingConstraints?.requiredTaints;
    return required !== undefined && required.length > 0 ? this.#keepTainted(n, required) : n;
  }

  /**
   * Compacts `scratch.eligible[0..n)` to the slots not over a busy threshold; returns how many remain.
   * A pinned request keeps its slots: the picker upstream (an endpoint picker's stage 2, a worker-id
   * header, a session) has decided, so the pin is booked and dispatched even on a busy worker.
   */
  dropOverloaded(n: number, req: SchedulingRequest): number {
    const c = this.#knobs();
    if (req.pinWorkerId !== undefined) return n;
    if (
      c.activeDecodeBlocksThreshold === null &&
      c.activePrefillTokensThreshold === null &&
      c.activePrefillTokensThresholdFrac === null
    )
      return n;
    const elig = this.#table.scratch.eligible;
    let kept = 0;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      if (!this.overloaded(s)) elig[kept++] = s;
    }
    return kept;
  }

  /** True if slot `s` is over a busy threshold (decode blocks, prefill tokens, or prefill tokens as a fraction of the batch budget). */
  overloaded(s: number): boolean {
    const c = this.#knobs();
    const table = this.#table;
    const prefill = this.#active.activePrefillTokens[s]!;
    if (c.activeDecodeBlocksThreshold !== null && table.totalKv[s]! > 0) {
      const used = Math.max(this.#active.activeDecodeBlocks[s]!, table.kvUsed[s]!);
      if (used > c.activeDecodeBlocksThreshold * table.totalKv[s]!) return true;
    }
    if (c.activePrefillTokensThreshold !== null && prefill > c.activePrefillTokensThreshold) return true;
    if (
      c.activePrefillTokensThresholdFrac !== null &&
      prefill > c.activePrefillTokensThresholdFrac * table.maxBatched[s]!
    )
      return true;
    return false;
  }

  /** True if some slot of `slots[0..n)` is neither prefill-busy nor overloaded. */
  anyRoom(slots: Int32Array, n: number): boolean {
    const threshold = this.#knobs().routerQueueThreshold ?? Infinity;
    const prefill = this.#active.activePrefillTokens;
    const table = this.#table;
    for (let i = 0; i < n; i++) {
      const s = slots[i]!;
      if (table.registered[s] !== 1) continue;
      if (prefill[s]! <= threshold * table.maxBatched[s]! && !this.overloaded(s)) return true;
    }
    return false;
  }

  /** Keeps the slots of `eligible[0..n)` whose worker carries every required taint. */
  #keepTainted(n: number, required: readonly string[]): number {
    const table = this.#table;
    const elig = table.scratch.eligible;
    let kept = 0;
    for (let i = 0; i < n; i++) {
      const s = elig[i]!;
      const taints = table.workers.get(table.slotWorker[s]!)!.taints;
      if (required.every((t) => taints.has(t))) elig[kept++] = s;
    }
    if (kept === 0)
      throw new KvgateError('KVG_ERR_NO_WORKERS', `no worker carries every required taint (${required.join(', ')})`, {
        requiredTaints: [...required],
      });
    return kept;
  }
}
