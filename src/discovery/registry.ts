/**
 * The worker registry: which engines serve which model, in which role, and
 * whether each is currently available. Static configuration is the first
 * source; a health prober (./health.ts) flips availability, and a dynamic
 * source could call `add`/`remove` the same way.
 *
 * Ownership: this registry is the source of truth for membership; routers
 * subscribe and derive their candidate lists from it.
 */
import { EventEmitter } from 'node:events';
import type { EngineDialect, WorkerRole } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

/**
 * A worker's configured KV-event endpoints, for every dp rank behind it (routing
 * expands them to one subscription per rank).
 */
export interface KvEventEndpoints {
  /** ZMQ PUB endpoint of rank `dpStart`, e.g. tcp://10.0.0.5:5557. */
  endpoint: string;
  /** ZMQ ROUTER endpoint for replay of missed batches (optional). */
  replayEndpoint?: string | undefined;
  /** Subscription topic prefix ('' = all). */
  topic?: string | undefined;
  /** Rank r publishes on the endpoint's port + r * portStride (vLLM data-parallel convention); default 1. */
  dpPortStride?: number | undefined;
}

export interface WorkerInfo {
  /** Stable id (u53): how pins, metrics and the index name this worker. */
  readonly id: number;
  /** Model name this worker serves: the gateway's name, the `model` clients send. */
  readonly model: string;
  /** The name the engine serves the model as (sent as `model` to it, checked against its /v1/models); default `model`. */
  readonly servedModelName?: string | undefined;
  /** LoRA adapters the engine serves by configuration, besides those its /v1/models lists. */
  readonly loraAdapters?: readonly string[] | undefined;
  /** Base URL of the engine's OpenAI-compatible server, e.g. http://10.0.0.5:8000. */
  readonly url: string;
  readonly role: WorkerRole;
  readonly dialect: EngineDialect;
  /** Data-parallel ranks dpStart .. dpStart + dpSize - 1 behind this URL. */
  readonly dpStart: number;
  readonly dpSize: number;
  readonly kvEvents?: KvEventEndpoints | undefined;
  /** SGLang-style disaggregation: where decode engines fetch this prefill worker's KV. */
  readonly bootstrap?: { host: string; port: number } | undefined;
  /**
   * A decode worker that can also serve a request alone, without a prefill
   * handoff (vLLM's `kv_both`): the fallback target while no prefill worker
   * is available. Decode workers are decode-only unless they say so.
   */
  readonly servesAggregated?: boolean | undefined;
  /**
   * The engine honours `return_token_ids` (each chunk's generated ids, the prompt's ids first), which a
   * migration resumes from. Undefined: only vLLM does.
   */
  readonly returnsTokenIds?: boolean | undefined;
  /** Scheduler capacity hints (engine flags), used by busy thresholds. */
  readonly maxNumBatchedTokens?: number | undefined;
  readonly totalKvBlocks?: number | undefined;
  /**
   * Labels a request's `nvext.routing_constraints` match: a worker lacking a required taint is not a candidate,
   * a preferred taint it carries multiplies its cost by the request's factor (KV mode).
   */
  readonly taints?: readonly string[] | undefined;
  /**
   * Why kvgate does not trust its view of this worker's KV cache (its engine's block size or tokenizer
   * differs from the model's, found when it joined): it stays routable, its cached-prefix overlap scored 0.
   * Never configured: set through `WorkerRegistry.setEngineFacts`.
   */
  readonly kvMismatch?: string | undefined;
}

/** What kvgate learned from a worker's engine after it was registered (its /metrics, a tokenizer probe). */
export type EngineFacts = Pick<WorkerInfo, 'totalKvBlocks' | 'kvMismatch'>;

/**
 * Why a worker stopped being routable: `unavailable` (marked down: failed probes, ejected; it stays registered
 * and may come back, so routing keeps what it knows of its engine's KV cache) or `unregistered` (it left the
 * fleet: everything kept for it goes).
 */
export type WorkerDeparture = 'unavailable' | 'unregistered';

export interface WorkerRegistryEvents {
  /** The worker became routable; the info carries its engine facts. */
  added: [WorkerInfo];
  /** The worker stopped being routable; `unregistered` also for one already down, so its kept state goes too. */
  removed: [WorkerInfo, WorkerDeparture];
  /** A routable worker's engine facts changed (capacity, KV trust): the info as routing should now see it. */
  updated: [WorkerInfo];
}

/** Workers by model and role, with availability. Emits 'added' / 'removed' as availability changes. */
export class WorkerRegistry extends EventEmitter<WorkerRegistryEvents> {
  readonly #all = new Map<number, WorkerInfo>();
  readonly #available = new Set<number>();
  /** Adapters each worker's engine listed at its last /v1/models check. */
  readonly #discoveredAdapters = new Map<number, readonly string[]>();
  /**
   * Each worker's info with its engine facts applied (only for workers that have facts). `get` and `all`
   * keep answering the registered object, whose identity says "the same registration" to the prober.
   */
  readonly #effective = new Map<number, WorkerInfo>();

  /** Registers a worker; it is available at once unless `available` is false. */
  add(w: WorkerInfo, available = true): void {
    validateWorker(w);
    const existing = this.#all.get(w.id);
    if (existing !== undefined) {
      throw new KvgateError(
        'KVG_ERR_INVALID_CONFIG',
        `worker id ${w.id} is used twice (${existing.url} and ${w.url})`,
        { field: 'workers.id' },
      );
    }
    this.#all.set(w.id, w);
    if (available) this.markUp(w.id);
  }

  /** Forgets a worker entirely ('removed' as `unregistered`, whether it was available or not). */
  remove(id: number): void {
    const w = this.#all.get(id);
    if (w === undefined) return;
    this.#available.delete(id);
    // Announced first: a listener that throws leaves the worker registered (unavailable), as a reload reports it.
    this.emit('removed', w, 'unregistered');
    this.#all.delete(id);
    this.#discoveredAdapters.delete(id);
    this.#effective.delete(id);
  }

  /**
   * Records what the worker's engine said (fields left undefined are cleared back to the registered
   * values); a routable worker is announced again as 'updated'.
   */
  setEngineFacts(id: number, facts: EngineFacts): void {
    const w = this.#all.get(id);
    if (w === undefined) return;
    const next: WorkerInfo = {
      ...w,
      totalKvBlocks: facts.totalKvBlocks ?? w.totalKvBlocks,
      kvMismatch: facts.kvMismatch,
    };
    this.#effective.set(id, next);
    if (this.#available.has(id)) this.emit('updated', next);
  }

  /** The worker as routing sees it: its registration with its engine facts applied. */
  effective(id: number): WorkerInfo | undefined {
    return this.#effective.get(id) ?? this.#all.get(id);
  }

  /** The LoRA adapters the worker's engine listed (replaces the previous list). */
  setDiscoveredAdapters(id: number, adapters: readonly string[]): void {
    if (this.#all.has(id)) this.#discoveredAdapters.set(id, [...adapters]);
  }

  /** Whether the worker serves the adapter: configured for its model, or listed by its engine. */
  servesAdapter(id: number, adapter: string): boolean {
    const w = this.#all.get(id);
    if (w === undefined) return false;
    return (
      (w.loraAdapters?.includes(adapter) ?? false) || (this.#discoveredAdapters.get(id)?.includes(adapter) ?? false)
    );
  }

  /** The adapters served by at least one available worker of the model in one of `roles`, sorted. */
  adapters(model: string, roles?: readonly WorkerRole[]): string[] {
    const out = new Set<string>();
    for (const w of this.available(model, roles)) {
      for (const a of w.loraAdapters ?? []) out.add(a);
      for (const a of this.#discoveredAdapters.get(w.id) ?? []) out.add(a);
    }
    return [...out].sort();
  }

  /** The worker becomes eligible for routing (idempotent). */
  markUp(id: number): void {
    const w = this.#all.get(id);
    if (w === undefined || this.#available.has(id)) return;
    this.#available.add(id);
    this.emit('added', this.effective(id)!);
  }

  /** The worker is no longer eligible (idempotent); it stays registered ('removed' as `unavailable`). */
  markDown(id: number): void {
    const w = this.#all.get(id);
    if (w === undefined || !this.#available.has(id)) return;
    this.#available.delete(id);
    this.emit('removed', w, 'unavailable');
  }

  get(id: number): WorkerInfo | undefined {
    return this.#all.get(id);
  }

  isAvailable(id: number): boolean {
    return this.#available.has(id);
  }

  /** Every registered worker, available or not. */
  all(): WorkerInfo[] {
    return [...this.#all.values()];
  }

  /** Available workers of a model, optionally of some roles. */
  available(model: string, roles?: readonly WorkerRole[]): WorkerInfo[] {
    const out: WorkerInfo[] = [];
    for (const id of this.#available) {
      const w = this.effective(id)!;
      if (w.model === model && (roles === undefined || roles.includes(w.role))) out.push(w);
    }
    return out;
  }

  models(): string[] {
    return [...new Set([...this.#all.values()].map((w) => w.model))];
  }
}

function validateWorker(w: WorkerInfo): void {
  const bad = (field: string, reason: string): never => {
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', `worker ${String(w.id)}: ${field} ${reason}`, {
      field: `workers.${field}`,
    });
  };
  if (!Number.isSafeInteger(w.id) || w.id < 0) bad('id', 'must be a non-negative integer');
  try {
    const u = new URL(w.url);
    if (u.protocol !== 'http:' && u.protocol !== 'https:') bad('url', 'must be http(s)');
  } catch {
    bad('url', `is not a URL: ${w.url}`);
  }
  if (!Number.isInteger(w.dpStart) || w.dpStart < 0) bad('dp_start', 'must be a non-negative integer');
  if (!Number.isInteger(w.dpSize) || w.dpSize < 1 || w.dpSize > 1024) bad('dp_size', 'must be an integer in [1, 1024]');
  if (w.role === 'prefill' && w.dialect === 'sglang' && w.bootstrap === undefined)
    bad('bootstrap', 'is required for an SGLang prefill worker');
}
