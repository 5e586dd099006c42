/**
 * LegBuilder: what a model's router makes of a prepared request before it is
 * routed. It checks the request's pins against the registry (a pinned worker
 * that is down is named in a 503, not reported unknown) and builds the
 * request's one leg: a unique leg id, the engine path, the body with the
 * model the engines know (the served name, or the LoRA adapter), and an
 * adapter's request restricted to the workers serving that adapter, and, with
 * `session_priority`, the session start's engine `priority`. The prefill router
 * derives its prefill and decode legs from this one.
 */
import { systemClock, withJsonMembers, type RoutingHints, type SessionPriorityOrder } from '../common/index.js';
import type { WorkerHealthView, WorkerRegistry } from '../discovery/index.js';
import { KvgateError } from '../errors/index.js';
import type { LegRequest } from './push/types.js';
import type { PreparedRequest } from './router-port.js';
import type { RouterContext } from './context.js';
import { SessionPriority, sessionPriorityLimitReporter } from './session-priority.js';
import type { SessionLimits } from './sticky-sessions.js';
import { EMBEDDINGS_PATH, routedHashes } from './embeddings.js';

export interface LegBuilderOptions {
  readonly model: string;
  /** The name engines serve the model as (default `model`). */
  readonly servedModelName?: string | undefined;
  readonly registry: WorkerRegistry;
  /** The health prober's view of a worker (why a pinned worker is down). */
  readonly workerHealth?: ((workerId: number) => WorkerHealthView | undefined) | undefined;
  /**
   * `session_priority`: chat, completion and Responses requests carry their root session's start as the engine
   * `priority` (unless the client set one), ordered for engines that serve this end first. Default: none.
   */
  readonly sessionPriority?: SessionPriorityOrder | undefined;
  /** The sessions' bounds (the longest remembered unseen, the number held), shared with sticky sessions. */
  readonly sessionLimits?: SessionLimits | undefined;
}

/** Why a pinned worker is not routed to, by its health view's state. */
const DOWN_BECAUSE: Partial<Record<string, string>> = {
  model_mismatch: 'its engine serves another model',
  ejected: 'ejected for consecutive errors',
};
const PATHS = {
  chat: '/v1/chat/completions',
  completion: '/v1/completions',
  messages: '/v1/messages',
  responses: '/v1/responses',
  embeddings: EMBEDDINGS_PATH,
} as const;

/** A model's session-start priority, its limits reported. */
function sessionPriority(opts: LegBuilderOptions, order: SessionPriorityOrder, ctx: RouterContext): SessionPriority {
  const { clock } = ctx;
  // The system clock reads ms since the process's time origin; an injected clock (tests, replay) counts from its own zero.
  const epochOffsetMs = clock === systemClock ? performance.timeOrigin : 0;
  const onLimit = sessionPriorityLimitReporter(ctx, opts.model);
  return new SessionPriority(clock, { order, epochOffsetMs, ...opts.sessionLimits, onLimit });
}

export class LegBuilder {
  readonly #opts: LegBuilderOptions;
  readonly #sessionPriority: SessionPriority | undefined;
  #legSeq = 0;

  constructor(opts: LegBuilderOptions, ctx: RouterContext) {
    this.#opts = opts;
    this.#sessionPriority =
      opts.sessionPriority === undefined ? undefined : sessionPriority(opts, opts.sessionPriority, ctx);
  }

  /**
   * The request as one leg. The leg's id is the client's request id made
   * unique in this router (clients and proxies do resend an `x-request-id`),
   * because the bookkeeping refuses two in-flight requests with one id.
   * Engines see the client's id unchanged as their `x-request-id` (they build
   * the response's `id` from it), so the suffix never reaches the client.
   * A `query` leg (a routing decision only, never sent) records no session sighting.
   */
  leg(req: PreparedRequest, query = false): LegRequest {
    const lora = req.hints.loraName;
    const model = lora ?? this.#opts.servedModelName ?? this.#opts.model;
    return {
      requestId: `${req.requestId}~${(this.#legSeq = (this.#legSeq + 1) % Number.MAX_SAFE_INTEGER).toString(36)}`,
      clientRequestId: req.requestId,
      path: PATHS[req.endpoint],
      // Engines know the model by its served name, an adapter by its own name (vLLM and SGLang take it as `model`); no copy
      // when it says so, and a copy written from the client's text when that is known (a large body's members are never parsed here).
      body: this.#body(req, model, query),
      stream: req.stream,
      isl: req.promptTokens,
      hashes: routedHashes(req.endpoint, req.hashes),
      hashingMs: req.hashingMs,
      routing: lora === undefined ? req.hints : this.#adapterRouting(lora, req.hints),
      phase: 'aggregated',
      signal: req.signal,
      receivedAt: req.receivedAt,
    };
  }

  #body(req: PreparedRequest, model: string, query: boolean): PreparedRequest['body'] {
    const sp = this.#sessionPriority;
    const prioritized =
      sp !== undefined &&
      !query &&
      (req.endpoint === 'chat' || req.endpoint === 'completion' || req.endpoint === 'responses') &&
      !Object.hasOwn(req.body, 'priority');
    if (prioritized) return withJsonMembers(req.body, { model, priority: sp.priorityOf(req.hints.session) });
    return req.body['model'] === model ? req.body : withJsonMembers(req.body, { model });
  }

  /**
   * An adapter's request restricted to the workers serving it. Unless the client gave its own list (a picker's
   * decision, which skips the router queue), the restriction is marked kvgate's (`adapterRestricted`): the request
   * queues like any other.
   */
  #adapterRouting(adapter: string, hints: RoutingHints): RoutingHints {
    const allowedWorkerIds = this.#adapterWorkers(adapter, hints.allowedWorkerIds);
    if (hints.allowedWorkerIds !== undefined) return { ...hints, allowedWorkerIds };
    return { ...hints, allowedWorkerIds, adapterRestricted: true };
  }

  /** The workers (any role) serving `adapter`, within the client's allowed list if it gave one. */
  #adapterWorkers(adapter: string, allowed: RoutingHints['allowedWorkerIds']): ReadonlySet<number> {
    const registry = this.#opts.registry;
    const within = allowed === undefined ? undefined : new Set(allowed);
    const ids = new Set<number>();
    for (const w of registry.available(this.#opts.model)) {
      if (registry.servesAdapter(w.id, adapter) && (within === undefined || within.has(w.id))) ids.add(w.id);
    }
    return ids;
  }

  /**
   * A pin naming a configured worker of this model that is down is a 503 naming it, not an unknown worker.
   * @throws KvgateError KVG_ERR_WORKER_DOWN (the pin's parameter and the worker named).
   */
  checkPins(hints: RoutingHints): void {
    if (
      hints.backendInstanceId === undefined &&
      hints.prefillWorkerId === undefined &&
      hints.decodeWorkerId === undefined
    )
      return;
    const pins = [
      ['backend_instance_id', hints.backendInstanceId],
      ['prefill_worker_id', hints.prefillWorkerId],
      ['decode_worker_id', hints.decodeWorkerId],
    ] as const;
    const registry = this.#opts.registry;
    for (const [param, id] of pins) {
      if (id === undefined || registry.get(id)?.model !== this.#opts.model || registry.isAvailable(id)) continue;
      const state = this.#opts.workerHealth?.(id)?.state;
      throw new KvgateError(
        'KVG_ERR_WORKER_DOWN',
        `worker ${id} is down (${DOWN_BECAUSE[state ?? 'down'] ?? 'failing its health probe'}): ` +
          'not routed to; retry later or pin another worker',
        { param, workerId: id },
      );
    }
  }
}
