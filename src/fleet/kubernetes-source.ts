/**
 * The Kubernetes discovery source: the ready endpoints of a Service's
 * EndpointSlices (label `kubernetes.io/service-name`) in a namespace, applied
 * through `FleetMembers` (source `kubernetes`).
 *
 * It speaks the API server's list + watch protocol over plain HTTP(S)
 * (undici): a list gives the slices and a resourceVersion; a watch from that
 * resourceVersion streams ADDED / MODIFIED / DELETED (and BOOKMARK) events as
 * JSON lines. A watch the server ends, or a dropped connection, is resumed
 * from the last resourceVersion seen; a 410 Gone (that version is compacted
 * away) lists again and applies the difference. An endpoint whose
 * `conditions.ready` is false is not routed to (nil counts as ready, as the
 * API says). Until the API server answers again the current workers stay.
 * Every outcome is counted in `kvgate_discovery_updates_total{source="kubernetes"}`.
 *
 * `@kubernetes/client-node` is not used: its current release needs undici 8,
 * which needs Node 22, and kvgate runs on Node 20.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import type { Logger } from 'pino';
import { Agent, request } from 'undici';
import {
  kubernetesWorker,
  type ConfigProblem,
  type KubernetesDiscovery,
  type KubernetesEndpoint,
  type ModelConfig,
  type WorkerConfig,
} from '../config/index.js';
import type { WorkerRegistry } from '../discovery/index.js';
import { isKvgateError } from '../errors/index.js';
import { applyWorkerSet } from './discovered-set.js';
import type { FleetMembers } from './membership.js';
import type { DiscoveryMetrics, WorkerSource } from './source.js';

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;

/** The EndpointSlice fields kvgate reads (discovery.k8s.io/v1). */
interface EndpointSlice {
  metadata?: {
    name?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  ports?: { name?: string; port?: number }[] | null;
  endpoints?: { addresses?: string[]; conditions?: { ready?: boolean | null }; targetRef?: { name?: string } }[] | null;
}
interface WatchEvent {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: EndpointSlice & { code?: number; message?: string };
}
/** The watch ended because its resourceVersion is gone: list again. */
class Gone extends Error {}

export class KubernetesWorkersSource implements WorkerSource {
  readonly kind = 'kubernetes' as const;
  readonly #model: ModelConfig;
  readonly #k8s: KubernetesDiscovery;
  readonly #members: FleetMembers;
  readonly #registry: WorkerRegistry;
  readonly #dispatcher: Agent;
  readonly #path: string;
  /** The slices of the Service, by name. */
  #slices = new Map<string, EndpointSlice>();
  /** Worker ids given to endpoints (by pod name, or address), kept while the endpoint is listed. */
  readonly #ids = new Map<string, number>();
  #current = new Map<number, WorkerConfig>();
  #resourceVersion: string | undefined;
  #abort = new AbortController();
  #timer: NodeJS.Timeout | undefined;
  #retryMs = RETRY_MIN_MS;
  #sink: { logger: Logger; metrics: DiscoveryMetrics } | undefined;
  #closed = false;
  /** 410s since the last event a watch delivered. */
  #gones = 0;

  constructor(model: ModelConfig, registry: WorkerRegistry, members: FleetMembers) {
    this.#model = model;
    this.#k8s = model.kubernetes!;
    this.#registry = registry;
    this.#members = members;
    const ca = this.#k8s.apiServer.startsWith('https:') ? readOptional(this.#k8s.caFile) : undefined;
    this.#dispatcher = new Agent({ connect: ca === undefined ? {} : { ca }, bodyTimeout: 0 });
    const selector = encodeURIComponent(`kubernetes.io/service-name=${this.#k8s.service}`);
    this.#path = `/apis/discovery.k8s.io/v1/namespaces/${this.#k8s.namespace}/endpointslices?labelSelector=${selector}`;
  }

  /** Lists and watches the Service's EndpointSlices from now on; outcomes go to `logger` and `metrics`. */
  start(logger: Logger, metrics: DiscoveryMetrics): void {
    if (this.#closed || this.#sink !== undefined) return;
    this.#sink = { logger, metrics };
    logger.info(
      { apiServer: this.#k8s.apiServer, namespace: this.#k8s.namespace, service: this.#k8s.service },
      `watching the EndpointSlices of service ${this.#k8s.namespace}/${this.#k8s.service} for workers of model ${this.#model.name}`,
    );
    void this.#run(true);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#abort.abort();
    await this.#dispatcher.close().catch(() => undefined);
  }

  /** Lists (when `list`, or when there is no resourceVersion yet), then watches until the watch ends. */
  async #run(list: boolean): Promise<void> {
    if (this.#closed) return;
    try {
      if (list || this.#resourceVersion === undefined) await this.#list();
      await this.#watch();
      // The server closed the watch (its timeout): resume from the last resourceVersion at once.
      this.#retryMs = RETRY_MIN_MS;
      void this.#run(false);
    } catch (err) {
      if (this.#closed) return;
      // A second 410 with no event between is not the watch falling behind: wait before listing again.
      if (err instanceof Gone && ++this.#gones === 1) {
        this.#sink?.logger.warn(
          { service: this.#k8s.service, resourceVersion: this.#resourceVersion },
          `kubernetes watch: ${err.message}; listing again`,
        );
        this.#resourceVersion = undefined;
        void this.#run(true);
        return;
      }
      this.#sink?.logger.error(
        { service: this.#k8s.service, retryInMs: this.#retryMs },
        `kubernetes watch of service ${this.#k8s.namespace}/${this.#k8s.service} failed: ${(err as Error).message}; the ` +
          `current workers stay, retrying`,
      );
      const relist = err instanceof Gone;
      this.#timer = setTimeout(() => void this.#run(relist), this.#retryMs);
      this.#timer.unref();
      this.#retryMs = Math.min(this.#retryMs * 2, RETRY_MAX_MS);
    }
  }

  async #list(): Promise<void> {
    const res = await this.#get(this.#path);
    const body = (await res.body.json()) as { metadata?: { resourceVersion?: string }; items?: EndpointSlice[] };
    this.#slices = new Map((body.items ?? []).map((s) => [s.metadata?.name ?? '', s]));
    this.#resourceVersion = body.metadata?.resourceVersion;
    this.#applySlices();
  }

  async #watch(): Promise<void> {
    const rv =
      this.#resourceVersion === undefined ? '' : `&resourceVersion=${encodeURIComponent(this.#resourceVersion)}`;
    const res = await this.#get(`${this.#path}&watch=1&allowWatchBookmarks=true${rv}`);
    const lines = createInterface({ input: res.body, crlfDelay: Infinity });
    try {
      for await (const line of lines) {
        if (line.trim() === '') continue;
        this.#event(JSON.parse(line) as WatchEvent);
      }
    } finally {
      // A watch left on an ERROR event (410) or a bad line: its connection goes too.
      res.body.destroy();
    }
  }

  #event(e: WatchEvent): void {
    if (e.type === 'ERROR') {
      if (e.object.code === 410) throw new Gone(e.object.message ?? 'resourceVersion too old (410 Gone)');
      throw new Error(`watch error ${e.object.code ?? ''} ${e.object.message ?? ''}`.trim());
    }
    const rv = e.object.metadata?.resourceVersion;
    if (rv !== undefined) this.#resourceVersion = rv;
    this.#gones = 0;
    if (e.type === 'BOOKMARK') return;
    const name = e.object.metadata?.name ?? '';
    if (e.type === 'DELETED') this.#slices.delete(name);
    else this.#slices.set(name, e.object);
    this.#applySlices();
  }

  async #get(path: string): Promise<Awaited<ReturnType<typeof request>>> {
    const token = readOptional(this.#k8s.tokenFile)?.trim();
    const res = await request(`${this.#k8s.apiServer}${path}`, {
      dispatcher: this.#dispatcher,
      signal: this.#abort.signal,
      headers: { accept: 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    });
    if (res.statusCode === 200) return res;
    const text = await res.body.text().catch(() => '');
    if (res.statusCode === 410) throw new Gone('resourceVersion too old (410 Gone)');
    throw new Error(`API server answered ${res.statusCode}: ${text.slice(0, 200)}`);
  }

  /** The workers of every ready endpoint of every slice (an invalid one is logged, counted and left out). */
  #applySlices(): void {
    const next = new Map<number, WorkerConfig>();
    const seen = new Set<string>();
    for (const slice of this.#slices.values()) {
      const ports = slice.ports ?? [];
      const port = (this.#k8s.portName === undefined ? ports[0] : ports.find((p) => p.name === this.#k8s.portName))
        ?.port;
      for (const ep of slice.endpoints ?? []) {
        const address = ep.addresses?.[0];
        if (address === undefined || port === undefined || ep.conditions?.ready === false) continue;
        const key = ep.targetRef?.name ?? address;
        seen.add(key);
        const endpoint: KubernetesEndpoint = {
          address,
          port,
          labels: slice.metadata?.labels ?? {},
          annotations: slice.metadata?.annotations ?? {},
        };
        const w = this.#read(key, endpoint, slice.metadata?.name ?? '');
        if (w !== undefined) next.set(w.id, w);
      }
    }
    for (const key of [...this.#ids.keys()]) if (!seen.has(key)) this.#ids.delete(key);
    this.#apply(next);
  }

  #read(key: string, endpoint: KubernetesEndpoint, slice: string): WorkerConfig | undefined {
    const source = `EndpointSlice ${this.#k8s.namespace}/${slice} endpoint ${key}`;
    try {
      return kubernetesWorker(this.#model, this.#idOf(key), endpoint, source);
    } catch (err) {
      if (!isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')) throw err;
      this.#count('rejected');
      this.#sink?.logger.error(
        { endpoint: key, problems: (err.detail?.problems ?? []) as ConfigProblem[] },
        `kubernetes endpoint rejected: ${err.message}`,
      );
      return undefined;
    }
  }

  /** The endpoint's worker id: the one it has, or the lowest from `id_base` no worker of the gateway holds. */
  #idOf(key: string): number {
    const known = this.#ids.get(key);
    if (known !== undefined) return known;
    const used = new Set([...this.#ids.values(), ...this.#registry.all().map((w) => w.id)]);
    let id = this.#k8s.idBase;
    while (used.has(id)) id++;
    this.#ids.set(key, id);
    return id;
  }

  #apply(next: Map<number, WorkerConfig>): void {
    const change = applyWorkerSet(this.#members, 'kubernetes', this.#current, next, (w, err) => {
      this.#count('rejected');
      this.#sink?.logger.error(
        { service: this.#k8s.service, workerId: w.id, url: w.url },
        `kubernetes worker ${w.id} cannot join: ${err.message}`,
      );
    });
    if (change === undefined) return this.#count('unchanged');
    this.#current = next;
    this.#count('applied');
    this.#sink?.logger.info(
      { service: this.#k8s.service, joined: change.joined.map((w) => w.id), left: change.left.map((w) => w.id) },
      `kubernetes workers applied: ${change.joined.length} joined, ${change.left.length} left`,
    );
  }

  #count(outcome: 'applied' | 'unchanged' | 'rejected'): void {
    this.#sink?.metrics.discoveryUpdates.labels({ model: this.#model.name, source: 'kubernetes', outcome }).inc();
  }
}

function readOptional(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}
