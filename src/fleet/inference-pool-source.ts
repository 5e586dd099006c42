/**
 * `InferencePoolSource`: the ready pods of a Gateway API Inference Extension
 * `InferencePool` (inference.networking.k8s.io/v1), for `kvgate picker`. The
 * pool is read for its `spec.selector.matchLabels` and its
 * `spec.targetPorts[].number` (1 to 8); the pods matching the selector in the
 * pool's namespace are listed and watched (`KubeListWatch`), and every change
 * hands the picker the pods that are ready (condition Ready True, an IP, not
 * being deleted), each with its endpoints `<podIP>:<targetPort>`, one per
 * target port in the pool's order (GIE's: every port of a pod is an endpoint;
 * port i serves data-parallel rank i), its name and creation time (two listed
 * pods may share an IP: the picker routes the newer). The pool is read before
 * each list of its pods (at start, after a 410, after a failure) and watched
 * itself: an edit of its selector lists the pods again at once (the list or
 * watch in flight dropped), an edit of its ports hands the pods over again with
 * the new endpoints; each is an info line, and what it changes counted as any
 * update. A pod's KV-event publisher is `tcp://<podIP>:<port>`, the port being
 * its `kvgate.io/kv-events-port` annotation (or label), else its container
 * port named `kv-events` (with several target ports, rank 0's: the picker
 * subscribes rank i at that port + i, where vLLM binds it); a pod with neither
 * publishes none the picker knows of. Until the API server answers again the
 * current endpoints stay; every outcome is logged and counted
 * (`kvgate_discovery_updates_total{source="inference_pool"}`).
 */
import type { Logger } from 'pino';
import { KV_EVENTS_PORT, type InferencePoolDiscovery } from '../config/index.js';
import { KubeClient, KubeListWatch } from './kube-watch.js';
import type { DiscoveryMetrics } from './source.js';
import { WatchReport } from './watch-report.js';

/** One ready pod of the pool as the picker dials it. */
export interface PoolEndpoint {
  /** The pod's name: its identity while it lives, whatever its IP. */
  readonly name: string;
  /** `ip:port` (`[ip]:port` for IPv6), of the pool's first target port: its address's identity. */
  readonly endpoint: string;
  /**
   * With several target ports, the pod's endpoints one per port in the pool's order (`endpoint` first): port i serves
   * data-parallel rank i. Undefined with one: `endpoint` is the pod's only one.
   */
  readonly ranks?: readonly string[] | undefined;
  /** The pod's KV-event publisher, `tcp://ip:port`; undefined when the pod names none. */
  readonly kvEvents?: string | undefined;
  /**
   * The pod's `metadata.creationTimestamp` (RFC 3339); of two listed pods with one endpoint
   * (an IP reused while the old pod is still listed) the picker routes the newer.
   */
  readonly created?: string | undefined;
}

/** The container port named so is a pod's KV-event publisher (when no annotation names one). */
const KV_EVENTS_PORT_NAME = 'kv-events';

/** The pod fields read (core/v1). */
interface Pod {
  metadata?: {
    name?: string;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec?: { containers?: { ports?: { name?: string; containerPort?: number }[] }[] };
  status?: { podIP?: string; conditions?: { type?: string; status?: string }[] };
}

/** The pod's KV-event port: its annotation (or label), else its container port named `kv-events`. */
function kvEventsPort(p: Pod): { port: number } | { invalid: string } | undefined {
  const tagged = p.metadata?.annotations?.[KV_EVENTS_PORT] ?? p.metadata?.labels?.[KV_EVENTS_PORT];
  if (tagged !== undefined) {
    const port = /^\d{1,5}$/.test(tagged) ? Number(tagged) : 0;
    return port >= 1 && port <= 65535 ? { port } : { invalid: tagged };
  }
  const ports = (p.spec?.containers ?? []).flatMap((c) => c.ports ?? []);
  const named = ports.find((port) => port.name === KV_EVENTS_PORT_NAME)?.containerPort;
  return named === undefined ? undefined : { port: named };
}
/** The InferencePool fields read (inference.networking.k8s.io/v1). */
interface InferencePool {
  metadata?: { name?: string; resourceVersion?: string };
  spec?: { selector?: { matchLabels?: Record<string, string> }; targetPorts?: { number?: number }[] };
}

const isPort = (n: unknown): n is number => Number.isInteger(n) && (n as number) >= 1 && (n as number) <= 65535;

export class InferencePoolSource {
  readonly #pool: InferencePoolDiscovery;
  readonly #model: string;
  readonly #client: KubeClient;
  readonly #watch: KubeListWatch<Pod>;
  /** The pool object itself, watched: an edit of its selector or ports is followed at once. */
  readonly #poolWatch: KubeListWatch<InferencePool>;
  readonly #onEndpoints: (endpoints: PoolEndpoint[]) => void;
  #selector = '';
  #ports: readonly number[] = [];
  /** The selector the pods were last listed with; undefined before the first list. */
  #listedWith: string | undefined;
  /** The pods as last listed or watched (undefined before the first list): handed over again on a port edit. */
  #pods: Pod[] | undefined;
  #last = '';
  #sink: { logger: Logger; metrics: DiscoveryMetrics } | undefined;
  readonly #report: WatchReport;

  constructor(model: string, pool: InferencePoolDiscovery, onEndpoints: (endpoints: PoolEndpoint[]) => void) {
    this.#model = model;
    this.#pool = pool;
    this.#onEndpoints = onEndpoints;
    this.#client = new KubeClient(pool);
    this.#report = new WatchReport({
      model,
      source: 'inference_pool',
      what: `kubernetes watch of InferencePool ${pool.namespace}/${pool.name}`,
      fields: { pool: pool.name },
      stays: 'the current endpoints stay',
    });
    this.#watch = new KubeListWatch<Pod>({
      client: this.#client,
      path: () => `/api/v1/namespaces/${pool.namespace}/pods?labelSelector=${encodeURIComponent(this.#selector)}`,
      beforeList: () => this.#readPool(),
      onChange: (pods) => {
        this.#pods = pods;
        this.#apply(pods);
      },
      onRelist: (err) => this.#report.relisted(err),
      onLive: (failures) => this.#report.live(failures),
      onFailure: (err, retryInMs) => this.#report.failed(err, retryInMs),
    });
    const poolWatch = `watch of InferencePool ${pool.namespace}/${pool.name} itself`;
    this.#poolWatch = new KubeListWatch<InferencePool>({
      client: this.#client,
      path: () =>
        `/apis/inference.networking.k8s.io/v1/namespaces/${pool.namespace}/inferencepools` +
        `?fieldSelector=${encodeURIComponent(`metadata.name=${pool.name}`)}`,
      onChange: (pools) => this.#poolEdited(pools),
      // The pods' watch reports the API server (its gauge and transitions); this one's failed attempts are lines and
      // retries, its selector and ports as last read kept meanwhile.
      onFailure: (err, retryInMs) => {
        this.#sink?.metrics.discoveryWatch.retries.labels({ model, source: 'inference_pool' }).inc();
        this.#sink?.logger.warn(
          { pool: pool.name, err: err.message, retryInMs },
          `${poolWatch} failed: ${err.message}; its selector and ports as last read stay, retrying`,
        );
      },
      onRelist: (err) => this.#sink?.logger.info({ pool: pool.name }, `${poolWatch}: ${err.message}; listing again`),
    });
  }

  start(logger: Logger, metrics: DiscoveryMetrics): void {
    if (this.#sink !== undefined) return;
    this.#sink = { logger, metrics };
    this.#report.start(logger, metrics);
    logger.info(
      { apiServer: this.#pool.apiServer, namespace: this.#pool.namespace, pool: this.#pool.name },
      `watching the pods of InferencePool ${this.#pool.namespace}/${this.#pool.name} for model ${this.#model}`,
    );
    this.#watch.start();
    this.#poolWatch.start();
  }

  async close(): Promise<void> {
    this.#watch.close();
    this.#poolWatch.close();
    await this.#client.close();
  }

  /** Before each list of the pods: the pool read (GET), the list to use its selector. */
  async #readPool(): Promise<void> {
    const res = await this.#client.get(
      `/apis/inference.networking.k8s.io/v1/namespaces/${this.#pool.namespace}/inferencepools/${this.#pool.name}`,
    );
    this.#setPool((await res.body.json()) as InferencePool);
    this.#listedWith = this.#selector;
  }

  /**
   * The pool's selector and target ports taken; an info line when they changed.
   * @throws Error (counted `rejected`) when it has no selector, or no target port, or one that is not a port number.
   */
  #setPool(pool: InferencePool): void {
    const labels = Object.entries(pool.spec?.selector?.matchLabels ?? {});
    const ports = (pool.spec?.targetPorts ?? []).map((p) => p.number);
    if (labels.length === 0 || ports.length === 0 || !ports.every(isPort)) {
      this.#count('rejected');
      throw new Error('the pool has no spec.selector.matchLabels, or no spec.targetPorts[].number, or one not a port');
    }
    const selector = labels.map(([k, v]) => `${k}=${v}`).join(',');
    if (selector !== this.#selector || ports.join() !== this.#ports.join())
      this.#sink?.logger.info(
        { pool: this.#pool.name, selector, ports },
        'InferencePool read: selector and target ports',
      );
    this.#selector = selector;
    this.#ports = ports;
  }

  /**
   * The pool object changed (its watch): a new selector lists the pods again at once, new ports hand the pods over
   * again with their new endpoints. A pool gone, or one with no selector or port, keeps what is (a warn line, counted
   * `rejected`). Before the pods' first list nothing more is done: that list reads the pool itself.
   */
  #poolEdited(pools: InferencePool[]): void {
    const pool = pools.find((p) => p.metadata?.name === this.#pool.name);
    const name = `InferencePool ${this.#pool.namespace}/${this.#pool.name}`;
    if (pool === undefined) {
      if (this.#listedWith === undefined) return;
      this.#count('rejected');
      this.#sink?.logger.warn({ pool: this.#pool.name }, `${name} is gone: its current endpoints stay`);
      return;
    }
    const ports = this.#ports.join();
    try {
      this.#setPool(pool);
    } catch (err) {
      const line = { pool: this.#pool.name, err: (err as Error).message };
      this.#sink?.logger.warn(line, `${name} edited: ${(err as Error).message}; its current endpoints stay`);
      return;
    }
    if (this.#listedWith === undefined || this.#pods === undefined) return;
    if (this.#selector !== this.#listedWith) {
      this.#sink?.logger.info(
        { pool: this.#pool.name, selector: this.#selector },
        `${name}: selector edited, listing its pods again`,
      );
      this.#watch.relist();
    } else if (this.#ports.join() !== ports) this.#apply(this.#pods);
  }

  #apply(pods: Pod[]): void {
    const endpoints: PoolEndpoint[] = [];
    for (const p of pods) {
      const ip = p.status?.podIP;
      const ready = p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;
      if (ip === undefined || ip === '' || !ready || p.metadata?.deletionTimestamp !== undefined) continue;
      const host = ip.includes(':') ? `[${ip}]` : ip;
      const name = p.metadata?.name ?? ip;
      const kv = kvEventsPort(p);
      if (kv !== undefined && 'invalid' in kv)
        this.#sink?.logger.warn(
          { pool: this.#pool.name, pod: name, value: kv.invalid },
          `pod ${name}: ${KV_EVENTS_PORT} is not a port number; its KV events are not subscribed`,
        );
      const kvEvents = kv !== undefined && 'port' in kv ? `tcp://${host}:${kv.port}` : undefined;
      const created = p.metadata?.creationTimestamp;
      const ranks = this.#ports.map((port) => `${host}:${port}`);
      endpoints.push({
        name,
        endpoint: ranks[0]!,
        ...(ranks.length > 1 ? { ranks } : {}),
        ...(kvEvents === undefined ? {} : { kvEvents }),
        ...(created === undefined ? {} : { created }),
      });
    }
    endpoints.sort((a, b) => a.name.localeCompare(b.name));
    const key = JSON.stringify(endpoints);
    if (key === this.#last) return this.#count('unchanged');
    this.#last = key;
    this.#count('applied');
    const all = endpoints.flatMap((e) => e.ranks ?? [e.endpoint]);
    this.#sink?.logger.info(
      { pool: this.#pool.name, endpoints: all },
      `InferencePool ${this.#pool.namespace}/${this.#pool.name}: ${all.length} ready endpoints`,
    );
    this.#onEndpoints(endpoints);
  }

  #count(outcome: 'applied' | 'unchanged' | 'rejected'): void {
    this.#sink?.metrics.discoveryUpdates.labels({ model: this.#model, source: 'inference_pool', outcome }).inc();
  }
}
