/**
 * `InferencePoolSource`: the ready pods of a Gateway API Inference Extension
 * `InferencePool` (inference.networking.k8s.io/v1), for `kvgate picker`. The
 * pool is read for its `spec.selector.matchLabels` and its first
 * `spec.targetPorts[].number`; the pods matching the selector in the pool's
 * namespace are listed and watched (`KubeListWatch`), and every change hands
 * the picker the endpoints `<podIP>:<targetPort>` of the pods that are ready
 * (condition Ready True, an IP, not being deleted), with each pod's name and
 * creation time (two listed pods may share an IP: the picker routes the
 * newer). The pool is read again before each list of its pods (at start,
 * after a 410, after a failure), so a
 * changed selector or port is followed from the next list. A pod's KV-event
 * publisher is `tcp://<podIP>:<port>`, the port being its `kvgate.io/kv-events-port`
 * annotation (or label), else its container port named `kv-events`; a pod with
 * neither publishes none the picker knows of. Until the API
 * server answers again the current endpoints stay; every outcome is logged
 * and counted (`kvgate_discovery_updates_total{source="inference_pool"}`).
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
  /** `ip:port` (`[ip]:port` for IPv6). */
  readonly endpoint: string;
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
  spec?: { selector?: { matchLabels?: Record<string, string> }; targetPorts?: { number?: number }[] };
}

export class InferencePoolSource {
  readonly #pool: InferencePoolDiscovery;
  readonly #model: string;
  readonly #client: KubeClient;
  readonly #watch: KubeListWatch<Pod>;
  readonly #onEndpoints: (endpoints: PoolEndpoint[]) => void;
  #selector = '';
  #port = 0;
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
      onChange: (pods) => this.#apply(pods),
      onRelist: (err) => this.#report.relisted(err),
      onLive: (failures) => this.#report.live(failures),
      onFailure: (err, retryInMs) => this.#report.failed(err, retryInMs),
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
  }

  async close(): Promise<void> {
    this.#watch.close();
    await this.#client.close();
  }

  async #readPool(): Promise<void> {
    const res = await this.#client.get(
      `/apis/inference.networking.k8s.io/v1/namespaces/${this.#pool.namespace}/inferencepools/${this.#pool.name}`,
    );
    const pool = (await res.body.json()) as InferencePool;
    const labels = Object.entries(pool.spec?.selector?.matchLabels ?? {});
    const port = pool.spec?.targetPorts?.[0]?.number;
    if (labels.length === 0 || port === undefined || !Number.isInteger(port)) {
      this.#count('rejected');
      throw new Error('the pool has no spec.selector.matchLabels or no spec.targetPorts[0].number');
    }
    const selector = labels.map(([k, v]) => `${k}=${v}`).join(',');
    if (selector !== this.#selector || port !== this.#port)
      this.#sink?.logger.info({ pool: this.#pool.name, selector, port }, 'InferencePool read: selector and port');
    this.#selector = selector;
    this.#port = port;
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
      endpoints.push({
        name,
        endpoint: `${host}:${this.#port}`,
        ...(kvEvents === undefined ? {} : { kvEvents }),
        ...(created === undefined ? {} : { created }),
      });
    }
    endpoints.sort((a, b) => a.name.localeCompare(b.name));
    const key = JSON.stringify(endpoints);
    if (key === this.#last) return this.#count('unchanged');
    this.#last = key;
    this.#count('applied');
    this.#sink?.logger.info(
      { pool: this.#pool.name, endpoints: endpoints.map((e) => e.endpoint) },
      `InferencePool ${this.#pool.namespace}/${this.#pool.name}: ${endpoints.length} ready endpoints`,
    );
    this.#onEndpoints(endpoints);
  }

  #count(outcome: 'applied' | 'unchanged' | 'rejected'): void {
    this.#sink?.metrics.discoveryUpdates.labels({ model: this.#model, source: 'inference_pool', outcome }).inc();
  }
}
