/**
 * `EndpointPicker`: the KV-aware choice of one InferencePool's endpoint, with
 * the gateway's own router underneath (routing's `KvRouter`: the same cost
 * model, bookkeeping and shedding as `kvgate serve`), for a data plane that
 * dispatches itself. It owns the pool's endpoints (`ip:port` to a stable
 * worker id, kept while the pod is listed; one per endpoint, the newer pod's
 * when two listed pods share one) and the booking of every request in flight,
 * and follows each request's life as the data plane reports it. A pod that
 * serves on several target ports (a data-parallel engine, one rank per port)
 * is one worker with a dp rank per port, port i rank i: each rank its own
 * slot (load, cached blocks, KV events), named by its own `ip:port`.
 *
 *   pick (booked on the first endpoint) -> served (moved to the endpoint that really served)
 *        -> firstToken (prefill done) -> end (freed; exactly once, however the stream ends)
 *
 * KV events (the model's `router.use_kv_events`, on by default) are subscribed
 * per pod, from the publisher its `kvgate.io/kv-events-port` annotation or
 * `kv-events` container port names (fleet's `InferencePoolSource`), into the
 * router's prefix index, as the gateway does for its workers. A pod whose
 * events are not live (none named, not yet connected, silent) is scored in
 * approximate mode: the router's own recorded choices, kept `router_ttl_secs`.
 * Each pick is noted as the pod's dispatch, so events that stop while it serves
 * make it stale; the transitions are told as the gateway tells a worker's
 * (routing's `KvEventsWatch`: a line naming the endpoint, counted).
 */
import type { Logger } from 'pino';
import type { Clock, RoutingHints, Rng, WorkerRank } from '../common/index.js';
import type { GatewayConfig, ModelConfig } from '../config/index.js';
import { EndpointOwners, type PoolEndpoint } from '../fleet/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import { rejectionError, type SlotLoad } from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import { KvRouter, kvPool, makeRouterContext, reportIndexBytes, type RouterContext } from '../routing/index.js';
import type { PromptHashes } from '../wasm/index.js';
import { endpointAddress, inSubset } from './endpoint-address.js';
import { PodKvEvents } from './pod-kv-events.js';

/**
 * How often the router's bookkeeping expires what outlived its TTL (bookings, approximate entries) and the
 * index's bytes are gauged (`kvgate_index_memory_bytes`), as the gateway's model router ticks.
 */
const TICK_MS = 1000;

/** What to route: the preprocessed prompt and its hints, and where the data plane lets the picker choose. */
export interface PickInput {
  readonly requestId: string;
  readonly tokenIds: Uint32Array;
  readonly hashes: PromptHashes;
  readonly hints: RoutingHints;
  /**
   * Endpoints the pick must come from (`ip:port`, `[ipv6]:port`, or a bare address, an IPv6 one unbracketed too, for
   * any port); undefined = the whole pool.
   */
  readonly subset?: readonly string[] | undefined;
}

/** What a pod list changed: endpoints joined and left, endpoints handed over, pods shadowed (listed, not routed). */
export interface PoolChange {
  readonly joined: string[];
  readonly left: string[];
  readonly handedOver: string[];
  readonly shadowed: string[];
}

interface Booking {
  readonly input: PickInput;
  endpoint: string;
  prefillDone: boolean;
  /**
   * The cached prompt blocks the request was booked with on its endpoint (the decision's overlap), kept for booking it
   * there again (a rejoin, a handover): the engine serving it is the same, so is its load. Undefined once it moved to
   * another endpoint (`served`): the router reads that endpoint's own overlap.
   */
  overlapBlocks: number | undefined;
  /** Its first booking's start (the router's clock), kept when booked again: its expiry does not restart. */
  readonly startedAt: number;
}

export interface EndpointPickerOptions {
  readonly model: ModelConfig;
  readonly logger: Logger;
  readonly clock: Clock;
  readonly rng: Rng;
  /** Endpoints in the answer: the pick and up to `fallbacks - 1` next best, for the data plane's retries. */
  readonly fallbacks: number;
  /** KV-event ingestion bounds (the config's `kv_events`); the defaults when undefined. */
  readonly kvEvents?: GatewayConfig['kvEvents'] | undefined;
  /** The KV-event series (`kvgate_kv_events_*`) are counted here when given. */
  readonly metrics?: KvgateMetrics | undefined;
}

export class EndpointPicker {
  readonly #router: KvRouter;
  readonly #logger: Logger;
  readonly #fallbacks: number;
  /**
   * endpoint -> its slot (worker id, dp rank), and back (worker id -> its endpoints by rank): one slot per endpoint,
   * its owner's (`EndpointOwners`).
   */
  readonly #ids = new Map<string, WorkerRank>();
  readonly #endpoints = new Map<number, readonly string[]>();
  /** routed pod name -> worker id: a pod keeps its id while it is listed and owns its endpoint. */
  readonly #byName = new Map<string, number>();
  /** Which listed pod owns each endpoint (two may list one: an IP reused while the old pod is still listed). */
  readonly #owners: EndpointOwners<PoolEndpoint>;
  readonly #bookings = new Map<string, Booking>();
  /** The pods' KV-event subscriptions, their liveness and their lines. */
  readonly #kv: PodKvEvents;
  readonly #ctx: RouterContext;
  readonly #model: string;
  readonly #timer: NodeJS.Timeout;
  #nextId = 1;

  constructor(opts: EndpointPickerOptions) {
    this.#logger = opts.logger;
    this.#owners = new EndpointOwners<PoolEndpoint>(opts.logger);
    this.#fallbacks = Math.max(1, opts.fallbacks);
    const m = opts.model;
    const ctx = makeRouterContext({ clock: opts.clock, rng: opts.rng, logger: opts.logger, metrics: opts.metrics });
    this.#ctx = ctx;
    this.#model = m.name;
    const endpointsOf = (id: number): readonly string[] | undefined => this.#endpoints.get(id);
    this.#kv = new PodKvEvents({ model: m.name, ctx, logger: opts.logger, metrics: opts.metrics, endpointsOf });
    const pool = {
      model: m.name,
      blockSize: m.blockSize,
      routerConfig: m.router,
      kvEvents: opts.kvEvents,
      eagle: m.eagle,
    };
    const { kvRouter, events } = kvPool('aggregated', pool, ctx, this.#kv.watch(m.blockSize));
    this.#router = kvRouter;
    this.#kv.attach(events);
    this.#timer = setInterval(() => this.#tick(), TICK_MS);
    this.#timer.unref();
  }

  /**
   * Periodic (every second): the router's bookkeeping expiry, its index's bytes gauged, and each pod's KV-event
   * liveness (a pod whose events stopped while it serves, or never came, is a warn line and counted, and scored in
   * approximate mode by the router), as a gateway model router ticks.
   */
  #tick(): void {
    this.#router.tick();
    reportIndexBytes(this.#ctx, this.#model, 'aggregated', this.#router);
    this.#kv.tick([...this.#byName].map(([pod, id]) => ({ id, pod, endpoints: this.#endpoints.get(id)! })));
  }

  /** Stops the bookkeeping timer and every KV-event subscription. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.#kv.close();
  }

  /**
   * The endpoints of the pool's ready pods now: the new join, the gone leave (the router forgets their load). A request booked on an
   * endpoint stays booked here until its stream ends, wherever its pod went: an endpoint that joins (again: a pod back from NotReady,
   * which served on meanwhile) is booked with the requests still in flight on it, with their first start, so its load is what it runs,
   * not zero. Of two listed pods with one endpoint (an IP reused while the old pod is still listed) only the newer is routed
   * (`EndpointOwners`): an endpoint handed over is its old owner leaving and its new owner joining, told and returned as a handover too.
   */
  setEndpoints(pods: readonly PoolEndpoint[]): PoolChange {
    const { owners: next, handedOver, shadowed } = this.#owners.apply(pods);
    const joined: string[] = [];
    const left: string[] = [];
    for (const [name, id] of [...this.#byName]) {
      const endpoints = this.#endpoints.get(id)!;
      const now = next.get(name);
      // A pod whose address, ports or publisher changed is another engine: it leaves and joins anew.
      if (now !== undefined && same(ranksOf(now), endpoints) && now.kvEvents === this.#kv.publisher(id)) continue;
      this.#leave(name, id, endpoints);
      left.push(...endpoints);
    }
    for (const [name, pod] of next) {
      if (this.#byName.has(name)) continue;
      this.#join(name, pod);
      joined.push(...ranksOf(pod));
    }
    // A pod's endpoints go over together: they share its address.
    const over = handedOver.flatMap((h) => ranksOf(next.get(h.to)!));
    const line = { joined, left, endpoints: this.#ids.size, ...(over.length > 0 ? { handedOver: over } : {}) };
    // The last ready pod gone: every request is refused (KVG_ERR_NO_WORKERS) until one is back.
    if (left.length > 0 && this.#ids.size === 0)
      this.#logger.warn(line, 'picker endpoints changed: no endpoint of the pool is ready, requests are refused');
    else if (joined.length + left.length > 0) this.#logger.info(line, 'picker endpoints changed');
    return { joined, left, handedOver: over, shadowed };
  }

  /** A routed pod leaves: everything kept under its worker id goes (ids are never reused). */
  #leave(name: string, id: number, endpoints: readonly string[]): void {
    this.#router.removeWorker(id);
    this.#kv.forget(id);
    this.#byName.delete(name);
    this.#endpoints.delete(id);
    // Only the entries this pod owns: an endpoint may be another pod's already.
    for (const e of endpoints) if (this.#ids.get(e)?.workerId === id) this.#ids.delete(e);
  }

  /**
   * A pod joins with the next worker id, a dp rank per endpoint: its KV events subscribed, the requests in flight on
   * its endpoints booked on their ranks.
   */
  #join(name: string, pod: PoolEndpoint): void {
    const id = this.#nextId++;
    const endpoints = ranksOf(pod);
    this.#byName.set(name, id);
    this.#endpoints.set(id, endpoints);
    endpoints.forEach((e, dpRank) => this.#ids.set(e, { workerId: id, dpRank }));
    this.#router.addWorker(id, endpoints.length > 1 ? { dataParallelSize: endpoints.length } : {});
    this.#kv.subscribe({ id, pod: name, endpoints }, pod.kvEvents);
    // The router dropped these when the endpoint left (removeWorker frees its requests), so none is booked twice;
    // each is booked as it was (its overlap and hints), so its load is the same, not its whole prompt again.
    for (const [dpRank, endpoint] of endpoints.entries()) {
      let rebooked = 0;
      for (const [requestId, b] of this.#bookings) {
        if (b.endpoint !== endpoint) continue;
        this.#book(requestId, b, { workerId: id, dpRank });
        rebooked++;
      }
      if (rebooked > 0)
        this.#logger.info(
          { endpoint, requests: rebooked },
          `endpoint ${endpoint} joined with ${rebooked} request(s) still in flight on it: booked there again`,
        );
    }
  }

  /**
   * What the picker keeps per pod, structure by structure (diagnostics: each is bounded by the pods listed now,
   * however many came and went, since each pod that leaves takes its worker id's state along).
   */
  footprint(): Record<string, number> {
    return {
      endpoints: this.#endpoints.size,
      ids: this.#ids.size,
      names: this.#byName.size,
      listed: this.#owners.sizes.listed,
      shadowed: this.#owners.sizes.shadowed,
      routerWorkers: this.#router.workers().length,
      indexSlots: this.#router.index.slots().length,
      ...this.#kv.footprint(),
      bookings: this.#bookings.size,
    };
  }

  get endpoints(): string[] {
    return [...this.#ids.keys()];
  }

  /**
   * The routed endpoints the data plane's subset hint allows (every one without a hint), each with its slot: what a
   * pick chooses among, and where a request passed on unscored may go.
   * @throws KvgateError KVG_ERR_NO_WORKERS when none is (no endpoint ready, or none of the subset).
   */
  eligible(subset: readonly string[] | undefined): Map<string, WorkerRank> {
    const entries = subset?.map(endpointAddress);
    const out = new Map<string, WorkerRank>();
    for (const [endpoint, id] of this.#ids)
      if (entries === undefined || inSubset(endpoint, entries)) out.set(endpoint, id);
    if (out.size === 0) throw noEndpoint();
    return out;
  }

  /** Requests booked and not yet ended, by the endpoint each is booked on. */
  bookings(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const b of this.#bookings.values()) out[b.endpoint] = (out[b.endpoint] ?? 0) + 1;
    return out;
  }

  /**
   * The router's load on each routed endpoint (what it scores on): requests in flight, uncached prompt tokens not yet
   * prefilled, KV blocks held. Beside `bookings` (the picker's own record), it shows each request counted once.
   */
  loads(): Record<string, SlotLoad> {
    const out: Record<string, SlotLoad> = {};
    for (const { workerId, dpRank, activeRequests, activePrefillTokens, activeDecodeBlocks } of this.#router.loads())
      out[this.#endpoints.get(workerId)![dpRank]!] = { activeRequests, activePrefillTokens, activeDecodeBlocks };
    return out;
  }

  /**
   * Picks and books: the endpoints in order, the best first.
   * @throws KvgateError KVG_ERR_NO_WORKERS (none ready, or none of the subset), KVG_ERR_TOO_MANY_REQUESTS (shed:
   *   every eligible endpoint busy or the queue full), the router's own for bad hints.
   */
  pick(input: PickInput): string[] {
    const hints = this.#restricted(input);
    const outcome = this.#router.schedule({
      requestId: input.requestId,
      tokens: input.tokenIds,
      hashes: input.hashes,
      isl: input.tokenIds.length,
      routing: hints,
    });
    if (outcome.status === 'queued') {
      // The picker answers at once: a request the router would park is shed, the data plane's to retry.
      outcome.ticket.cancel();
      throw new KvgateError('KVG_ERR_TOO_MANY_REQUESTS', 'every eligible endpoint is busy; the request was shed');
    }
    if (outcome.status === 'rejected') {
      const cause = rejectionError(outcome.rejection);
      throw new KvgateError('KVG_ERR_TOO_MANY_REQUESTS', `the request was shed: ${cause.message}`, {}, { cause });
    }
    const d = outcome.decision;
    const at = (slot: WorkerRank): string => this.#endpoints.get(slot.workerId)![slot.dpRank]!;
    const endpoints = [at(d)];
    for (const c of [...d.candidates].sort((a, b) => a.cost - b.cost))
      if (endpoints.length < this.#fallbacks && !endpoints.includes(at(c))) endpoints.push(at(c));
    // The data plane dispatches to the pick: its KV events are awaited from now (stale if none comes while it serves).
    this.#kv.noteDispatch({ workerId: d.workerId, dpRank: d.dpRank });
    this.#bookings.set(input.requestId, {
      input: { ...input, hints },
      endpoint: endpoints[0]!,
      prefillDone: false,
      overlapBlocks: d.overlapBlocks,
      startedAt: this.#router.activeRequest(input.requestId)?.startedAt ?? this.#ctx.clock.now(),
    });
    return endpoints;
  }

  /** The endpoint that really served: a booking made on another endpoint follows it there. */
  served(requestId: string, endpoint: string): void {
    const b = this.#bookings.get(requestId);
    if (b === undefined || b.endpoint === endpoint) return;
    const slot = this.#ids.get(endpoint);
    this.#router.free(requestId);
    if (slot === undefined) {
      this.#logger.warn({ requestId, endpoint, picked: b.endpoint }, 'served by an endpoint not in the pool; unbooked');
      this.#bookings.delete(requestId);
      return;
    }
    this.#logger.info({ requestId, endpoint, picked: b.endpoint }, 'served by a fallback endpoint; booking moved');
    b.endpoint = endpoint;
    b.overlapBlocks = undefined;
    this.#book(requestId, b, slot);
    this.#kv.noteDispatch(slot);
  }

  /**
   * Books a request on a worker as it was picked: its prompt, its hints (a router config override, an expected output
   * length: what its load is booked with), its overlap where known, its prefill done when it is, and its first start.
   */
  #book(requestId: string, b: Booking, slot: WorkerRank): void {
    this.#router.addRequest({
      requestId,
      tokens: b.input.tokenIds,
      hashes: b.input.hashes,
      isl: b.input.tokenIds.length,
      routing: b.input.hints,
      workerId: slot.workerId,
      dpRank: slot.dpRank,
      startedAt: b.startedAt,
      ...(b.overlapBlocks !== undefined ? { overlapBlocks: b.overlapBlocks } : {}),
    });
    if (b.prefillDone) this.#router.markPrefillCompleted(requestId);
  }

  firstToken(requestId: string): void {
    const b = this.#bookings.get(requestId);
    if (b === undefined || b.prefillDone) return;
    b.prefillDone = true;
    this.#router.markPrefillCompleted(requestId);
  }

  /**
   * The request's hints narrowed to the endpoints it may go to (the subset's, within a client's own worker list): the
   * workers, and the ranks of a worker the subset names only some endpoints of.
   * @throws KvgateError KVG_ERR_NO_WORKERS when none is left.
   */
  #restricted(input: PickInput): RoutingHints {
    const eligible = this.eligible(input.subset);
    const own = input.hints.allowedWorkerIds;
    if (input.subset === undefined && own === undefined) return input.hints;
    const owned = own === undefined ? undefined : new Set(own);
    const ranks = new Map<number, Set<number>>();
    for (const { workerId, dpRank } of eligible.values())
      if (owned?.has(workerId) ?? true) ranks.set(workerId, (ranks.get(workerId) ?? new Set()).add(dpRank));
    if (ranks.size === 0) throw noEndpoint();
    const some = [...ranks].filter(([id, r]) => r.size < this.#endpoints.get(id)!.length);
    return {
      ...input.hints,
      allowedWorkerIds: new Set(ranks.keys()),
      ...(some.length > 0 ? { allowedDpRanks: new Map(some) } : {}),
    };
  }

  /** Frees the request's booking; a second call is a no-op. */
  end(requestId: string): void {
    if (!this.#bookings.delete(requestId)) return;
    this.#router.free(requestId);
  }
}

const noEndpoint = (): KvgateError =>
  new KvgateError('KVG_ERR_NO_WORKERS', 'no endpoint of the pool is ready for this request');

/** A pod's endpoints by dp rank: one per target port of the pool, in its order. */
const ranksOf = (p: PoolEndpoint): readonly string[] => p.ranks ?? [p.endpoint];

const same = (a: readonly string[], b: readonly string[]): boolean =>
  a.length === b.length && a.every((x, i) => x === b[i]);
