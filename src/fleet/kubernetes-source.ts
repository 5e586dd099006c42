/**
 * The Kubernetes discovery source: the ready endpoints of a Service's
 * EndpointSlices (label `kubernetes.io/service-name`) in a namespace, applied
 * through `FleetMembers` (source `kubernetes`).
 *
 * It speaks the API server's list + watch protocol over plain HTTP(S)
 * (undici, through kube-watch.ts's `KubeListWatch`): a list gives the slices and a resourceVersion; a watch from that
 * resourceVersion streams ADDED / MODIFIED / DELETED (and BOOKMARK) events as
 * JSON lines. A watch the server ends, or a dropped connection, is resumed
 * from the last resourceVersion seen; a 410 Gone (that version is compacted
 * away) lists again and applies the difference. An endpoint whose
 * `conditions.ready` is false is not routed to (nil counts as ready, as the
 * API says). Until the API server answers again the current workers stay.
 * Every outcome is counted in `kvgate_discovery_updates_total{source="kubernetes"}`.
 *
 * One worker per address (`ip:port`): two ready endpoints of different pods with one address (an IP reused by a new
 * pod while the old one is still listed) are one worker, the newer pod's (`EndpointOwners`: not terminating, else
 * the one this process listed later, else the later name). The other pod is shadowed: it has no worker and no worker
 * id, so its leaving the list takes nothing away. An owner changing is its worker leaving and the new owner's
 * joining at the same URL (another engine answers there now: its load, KV events and cache start afresh), a line
 * and a count (`kvgate_worker_membership_changes_total{source="kubernetes",change="handed_over"|"shadowed"}`).
 * When the owner leaves first, the shadowed pod still listed takes the address back: the Service still lists it
 * as ready there, as kube-proxy would route it, and it joins as any worker does, routed only once its engine
 * answers the health probe.
 *
 * `@kubernetes/client-node` is not used: its current release needs undici 8,
 * which needs Node 22, and kvgate runs on Node 20.
 */
import type { Logger } from 'pino';
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
import { EndpointOwners, type OwnedEndpoint } from './endpoint-owners.js';
import { KubeClient, KubeListWatch } from './kube-watch.js';
import type { FleetMembers } from './membership.js';
import type { DiscoveryMetrics, WorkerSource } from './source.js';
import { WatchReport } from './watch-report.js';

/** The EndpointSlice fields kvgate reads (discovery.k8s.io/v1). */
interface EndpointSlice {
  metadata?: {
    name?: string;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  ports?: { name?: string; port?: number }[] | null;
  endpoints?:
    | {
        addresses?: string[];
        conditions?: { ready?: boolean | null; terminating?: boolean | null };
        targetRef?: { name?: string };
      }[]
    | null;
}

/** A ready endpoint of the Service: its pod (or address, for none) and what its worker is read from. */
interface Listed extends OwnedEndpoint {
  readonly read: KubernetesEndpoint;
  readonly slice: string;
}

export class KubernetesWorkersSource implements WorkerSource {
  readonly kind = 'kubernetes' as const;
  readonly #model: ModelConfig;
  readonly #k8s: KubernetesDiscovery;
  readonly #members: FleetMembers;
  readonly #registry: WorkerRegistry;
  readonly #client: KubeClient;
  readonly #watch: KubeListWatch<EndpointSlice>;
  /** The slices of the Service. */
  #slices: EndpointSlice[] = [];
  /** Worker ids given to the owners of addresses (by pod name, or address), kept while the pod owns its address. */
  readonly #ids = new Map<string, number>();
  /** Which listed pod owns each address; made at `start` (it logs). */
  #owners: EndpointOwners<Listed> | undefined;
  #current = new Map<number, WorkerConfig>();
  #sink: { logger: Logger; metrics: DiscoveryMetrics } | undefined;
  readonly #report: WatchReport;
  #closed = false;

  constructor(model: ModelConfig, registry: WorkerRegistry, members: FleetMembers) {
    this.#model = model;
    this.#k8s = model.kubernetes!;
    this.#registry = registry;
    this.#members = members;
    this.#client = new KubeClient(this.#k8s);
    const selector = encodeURIComponent(`kubernetes.io/service-name=${this.#k8s.service}`);
    const path = `/apis/discovery.k8s.io/v1/namespaces/${this.#k8s.namespace}/endpointslices?labelSelector=${selector}`;
    this.#report = new WatchReport({
      model: this.#model.name,
      source: 'kubernetes',
      what: `kubernetes watch of service ${this.#k8s.namespace}/${this.#k8s.service}`,
      fields: { service: this.#k8s.service },
      stays: 'the current workers stay',
    });
    this.#watch = new KubeListWatch<EndpointSlice>({
      client: this.#client,
      path: () => path,
      onChange: (slices) => {
        this.#slices = slices;
        this.#applySlices();
      },
      onRelist: (err) => this.#report.relisted(err),
      onLive: (failures) => this.#report.live(failures),
      onFailure: (err, retryInMs) => this.#report.failed(err, retryInMs),
    });
  }

  /** Lists and watches the Service's EndpointSlices from now on; outcomes go to `logger` and `metrics`. */
  start(logger: Logger, metrics: DiscoveryMetrics): void {
    if (this.#closed || this.#sink !== undefined) return;
    this.#sink = { logger, metrics };
    this.#owners = new EndpointOwners<Listed>(logger.child({ service: this.#k8s.service }));
    this.#report.start(logger, metrics);
    logger.info(
      { apiServer: this.#k8s.apiServer, namespace: this.#k8s.namespace, service: this.#k8s.service },
      `watching the EndpointSlices of service ${this.#k8s.namespace}/${this.#k8s.service} for workers of model ${this.#model.name}`,
    );
    this.#watch.start();
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#watch.close();
    await this.#client.close();
  }

  /** The workers of the ready endpoints of every slice, one per address (an invalid one is logged, counted and left out). */
  #applySlices(): void {
    const { owners, handedOver, shadowed } = this.#owners!.apply(this.#listed());
    this.#countOwnership('handed_over', handedOver.length);
    this.#countOwnership('shadowed', shadowed.length);
    for (const key of [...this.#ids.keys()]) if (!owners.has(key)) this.#ids.delete(key);
    const next = new Map<number, WorkerConfig>();
    for (const [key, listed] of owners) {
      const w = this.#read(key, listed.read, listed.slice);
      if (w !== undefined) next.set(w.id, w);
    }
    this.#apply(next);
  }

  /** Every ready endpoint of every slice, by its pod (or its address, where it names none). */
  #listed(): Listed[] {
    const listed: Listed[] = [];
    for (const slice of this.#slices) {
      const ports = slice.ports ?? [];
      const port = (this.#k8s.portName === undefined ? ports[0] : ports.find((p) => p.name === this.#k8s.portName))
        ?.port;
      for (const ep of slice.endpoints ?? []) {
        const address = ep.addresses?.[0];
        if (address === undefined || port === undefined || ep.conditions?.ready === false) continue;
        const read: KubernetesEndpoint = {
          address,
          port,
          labels: slice.metadata?.labels ?? {},
          annotations: slice.metadata?.annotations ?? {},
        };
        listed.push({
          name: ep.targetRef?.name ?? address,
          endpoint: `${address.includes(':') ? `[${address}]` : address}:${port}`,
          terminating: ep.conditions?.terminating === true,
          read,
          slice: slice.metadata?.name ?? '',
        });
      }
    }
    return listed;
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

  #countOwnership(change: 'handed_over' | 'shadowed', n: number): void {
    if (n > 0)
      this.#sink?.metrics.workerMembership.labels({ model: this.#model.name, source: 'kubernetes', change }).inc(n);
  }

  #count(outcome: 'applied' | 'unchanged' | 'rejected'): void {
    this.#sink?.metrics.discoveryUpdates.labels({ model: this.#model.name, source: 'kubernetes', outcome }).inc();
  }
}
