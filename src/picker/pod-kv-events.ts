/**
 * `PodKvEvents`: the KV events of the pods `EndpointPicker` routes. Each pod that names its publisher (fleet's
 * `InferencePoolSource`: its `kvgate.io/kv-events-port` annotation or `kv-events` container port) is subscribed under
 * its worker id into the router's prefix index (routing's `kvPool`, as the gateway subscribes a worker), one
 * subscription per dp rank: a pod serving on several target ports is a data-parallel engine, rank i on port i, whose
 * rank i publishes on the named port + i (`dpRankEndpoint`, as vLLM binds it), each batch naming rank i, so each
 * rank's events fill its own slot. Its liveness is watched as the gateway watches a worker's (routing's
 * `KvEventsWatch`: a line naming the pod's endpoints, counted); a block size other than the model's and a replay are
 * lines naming its endpoints. A pod that leaves takes along what is kept under its id: its subscriptions (then its
 * metric series), its liveness state, its log-once state.
 */
import type { Logger } from 'pino';
import type { WorkerRank } from '../common/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import {
  KvEventsWatch,
  dpRankEndpoint,
  type EventWatch,
  type RouterContext,
  type WatchedWorker,
  type kvPool,
} from '../routing/index.js';

type Events = ReturnType<typeof kvPool>['events'];

/** A routed pod as its KV events name it. */
export interface KvPod {
  readonly id: number;
  /** The pod's name. */
  readonly pod: string;
  /** Its endpoints by dp rank (`ip:port`, one per target port): how every line names it. */
  readonly endpoints: readonly string[];
}

export class PodKvEvents {
  readonly #logger: Logger;
  readonly #metrics: KvgateMetrics | undefined;
  /** The pods' subscriptions (undefined: `use_kv_events` off, every pod approximate). */
  #events: Events;
  /** worker id -> the KV-event publisher it is subscribed to. */
  readonly #publishers = new Map<number, string>();
  /** The pods' KV-event liveness, told as the gateway tells its workers' (`kvgate_worker_kv_events_transitions_total`). */
  readonly #watch: KvEventsWatch;
  /** Worker ids already warned of a block size other than the model's (once per pod). */
  readonly #blockSizeWarned = new Set<number>();
  /** The endpoints (by dp rank) a routed worker id serves, or undefined once it left. */
  readonly #endpointsOf: (id: number) => readonly string[] | undefined;

  constructor(opts: {
    model: string;
    ctx: RouterContext;
    logger: Logger;
    metrics: KvgateMetrics | undefined;
    endpointsOf: (id: number) => readonly string[] | undefined;
  }) {
    this.#logger = opts.logger;
    this.#metrics = opts.metrics;
    this.#endpointsOf = opts.endpointsOf;
    this.#watch = new KvEventsWatch(opts.model, opts.ctx);
  }

  /** The subscriptions, once the router's pool has built them (`kvPool`, given `watch`). */
  attach(events: Events): void {
    this.#events = events;
  }

  /** What the router's pool tells of a pod's events (a block size other than the model's, a replay): lines by endpoint. */
  watch(blockSize: number): EventWatch {
    return {
      blockSizeMismatch: (workerId) => {
        const endpoint = this.#endpointsOf(workerId)?.join(',');
        if (this.#blockSizeWarned.has(workerId) || endpoint === undefined) return;
        this.#blockSizeWarned.add(workerId);
        this.#logger.warn(
          { endpoint, blockSize },
          `endpoint ${endpoint} publishes KV events with a block size other than the model's ` +
            `block_size ${blockSize}: its blocks are ignored (set the model's block_size to the engine's)`,
        );
      },
      replayed: (slot: WorkerRank, batches: number) => {
        const endpoint = this.#endpointsOf(slot.workerId)?.[slot.dpRank];
        this.#logger.info(
          { endpoint, batches },
          `endpoint ${endpoint}: missed KV events replayed (${batches} batch(es))`,
        );
      },
    };
  }

  /** The publisher a pod is subscribed to (undefined: none, or KV events off). */
  publisher(id: number): string | undefined {
    return this.#publishers.get(id);
  }

  /**
   * A pod joins: when it names a publisher and KV events are on, each of its ranks is subscribed (rank i at the
   * publisher's port + i); a rank refused is logged and counted, and scored approximately.
   */
  subscribe(pod: KvPod, publisher: string | undefined): void {
    if (this.#events === undefined || publisher === undefined) return;
    this.#publishers.set(pod.id, publisher);
    for (const [dpRank, endpoint] of pod.endpoints.entries()) {
      const refused = (err: Error): void => {
        // Not counted for a pod already gone: its series went with it.
        if (this.#endpointsOf(pod.id) !== undefined)
          this.#metrics?.kvEventSubscriptionsRefused
            .labels({ worker_id: String(pod.id), dp_rank: String(dpRank) })
            .inc();
        this.#logger.error(
          { endpoint, kvEvents: publisher, workerId: pod.id, dpRank, err: err.message },
          `endpoint ${endpoint}: its KV events cannot be subscribed (${err.message}); scored approximately`,
        );
      };
      try {
        // Rank 0's is the publisher as the pod names it (a pod with one target port is subscribed to just that).
        const rankPublisher = dpRank === 0 ? publisher : dpRankEndpoint(publisher, dpRank);
        this.#events.add({ workerId: pod.id, dpRank, endpoint: rankPublisher }).catch(refused);
      } catch (err) {
        refused(err as Error);
      }
    }
  }

  /**
   * A pod left: its subscription stopped, then its metric series forgotten (ids are never reused: each pod that joins
   * gets the next, so pod churn would otherwise pile up a series set per pod that ever served), its states dropped.
   */
  forget(id: number): void {
    const forget = (): void => void this.#metrics?.forgetWorker(id);
    if (this.#publishers.delete(id) && this.#events !== undefined) void this.#events.remove(id).finally(forget);
    else forget();
    this.#watch.forget(id);
    this.#blockSizeWarned.delete(id);
  }

  /** The data plane dispatches to the slot: its KV events are awaited from now (stale if none comes while it serves). */
  noteDispatch(slot: WorkerRank): void {
    this.#events?.noteDispatch(slot);
  }

  /** Periodic: each routed pod's KV-event liveness, a transition logged and counted. */
  tick(pods: Iterable<KvPod>): void {
    this.#watch.tick(this.#watched(pods), this.#events);
  }

  *#watched(pods: Iterable<KvPod>): Generator<WatchedWorker> {
    for (const { id, pod, endpoints } of pods) {
      const endpoint = endpoints.join(',');
      const publisher = this.#publishers.get(id);
      yield {
        id,
        role: 'aggregated',
        name: `endpoint ${endpoint}`,
        fields: { endpoint, pod, workerId: id },
        publisher:
          publisher === undefined
            ? undefined
            : { fields: { publisher }, check: "the pod's kvgate.io/kv-events-port annotation or kv-events port" },
      };
    }
  }

  /** What is kept, structure by structure (`EndpointPicker.footprint`): bounded by the pods routed now. */
  footprint(): Record<string, number> {
    const ev = this.#events;
    const tierSlots = ev?.indexes.tiers().reduce((n, t) => n + ev.indexes.get(t).slots().length, 0) ?? 0;
    return {
      publishers: this.#publishers.size,
      blockSizeWarned: this.#blockSizeWarned.size,
      kvEventStates: this.#watch.size,
      tierSlots,
      subscriptions: ev?.sources().length ?? 0,
      livenessSlots: ev?.liveness.statuses().length ?? 0,
      eventCounterSlots: Object.keys(ev?.counters.snapshot().slots ?? {}).length,
    };
  }

  /** Stops every subscription. */
  async close(): Promise<void> {
    await this.#events?.close();
  }
}
