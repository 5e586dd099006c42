/**
 * A protocol double of the Kubernetes API server's list + watch (no API server
 * can run on our machines) for EndpointSlices, Pods and InferencePools, and GET
 * of one InferencePool: GET .../endpointslices (or .../pods, .../inferencepools)
 * lists the objects matching `labelSelector` (`k=v[,k=v]`) and `fieldSelector`
 * (`metadata.name=x`) with the current resourceVersion; with
 * `watch=1` it streams JSON-line events (ADDED, MODIFIED, DELETED) of the
 * objects its selectors match after the given resourceVersion, replaying those
 * it still keeps (an object changed to match them no more is not sent a
 * DELETED, as a real server would send), or one ERROR event
 * with code 410 (Gone) for a version compacted away, as the real server does,
 * and ends the watch cleanly after its `timeoutSeconds` (or at once, after
 * the events it replays, while `endWatchesAtOnce`).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Slice {
  metadata: {
    name: string;
    labels: Record<string, string>;
    annotations?: Record<string, string>;
    resourceVersion?: string;
  };
  ports: { name?: string; port: number }[];
  endpoints: { addresses: string[]; conditions: { ready: boolean }; targetRef?: { name: string } }[];
}
/** A Pod's fields the InferencePool source reads. */
export interface Pod {
  metadata: {
    name: string;
    labels: Record<string, string>;
    annotations?: Record<string, string>;
    resourceVersion?: string;
    creationTimestamp?: string;
    deletionTimestamp?: string;
  };
  spec?: { containers: { name: string; ports?: { name?: string; containerPort: number }[] }[] };
  status: { podIP?: string; conditions: { type: string; status: 'True' | 'False' }[] };
}
/** An InferencePool (inference.networking.k8s.io/v1): its selector and target ports. */
export interface InferencePool {
  metadata: { name: string; namespace: string; resourceVersion?: string };
  spec: {
    selector: { matchLabels: Record<string, string> };
    targetPorts: { number: number }[];
    endpointPickerRef?: unknown;
  };
}
type Resource = 'endpointslices' | 'pods' | 'inferencepools';
type Stored = Slice | Pod | InferencePool;
type Event = { type: 'ADDED' | 'MODIFIED' | 'DELETED'; object: Stored };

export class KubeApiDouble {
  readonly #server: Server;
  readonly #objects: Record<Resource, Map<string, Stored>> = {
    endpointslices: new Map(),
    pods: new Map(),
    inferencepools: new Map(),
  };
  readonly #history: { rv: number; resource: Resource; event: Event }[] = [];
  /** Open watches: the resource each watches and the objects its selectors match (events of others are not sent). */
  readonly #watchers = new Map<ServerResponse, { resource: Resource; matches: (o: Stored) => boolean }>();
  readonly #held: (() => void)[] = [];
  /** Watches `stallWatches` cut off: not ended at their `timeoutSeconds` either. */
  readonly #stalled = new Set<ServerResponse>();
  #rv = 100;
  /** Versions before this are compacted: a watch from them gets 410 (the current one is always watchable). */
  #oldest = 0;
  /** New watch requests wait (unanswered) while true. */
  holdWatches = false;
  /** While true, each watch is answered, sent the events it replays, and ended at once (a misbehaving server or proxy). */
  endWatchesAtOnce = false;
  /** The next this many requests are answered 503, as an API server that is restarting or overloaded. */
  failRequests = 0;
  /** The requests served: `list`, or `watch@<resourceVersion>`. */
  readonly requests: string[] = [];

  private constructor(server: Server) {
    this.#server = server;
  }

  static async start(): Promise<KubeApiDouble> {
    const double: KubeApiDouble = new KubeApiDouble(createServer((req, res) => double.#serve(req, res)));
    await new Promise<void>((resolve) => double.#server.listen(0, '127.0.0.1', resolve));
    return double;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`;
  }

  get heldWatches(): number {
    return this.#held.length;
  }

  /** Creates or replaces a slice; `silent`: watchers are not told and the change is not kept for replay (only a list sees it). */
  put(slice: Slice, silent = false): void {
    const type = this.#objects.endpointslices.has(slice.metadata.name) ? 'MODIFIED' : 'ADDED';
    this.#emit('endpointslices', { type, object: slice }, silent);
  }

  delete(name: string): void {
    const slice = this.#objects.endpointslices.get(name);
    if (slice !== undefined) this.#emit('endpointslices', { type: 'DELETED', object: slice }, false);
  }

  /** Creates or replaces a pod (watchers are told). */
  putPod(pod: Pod): void {
    const type = this.#objects.pods.has(pod.metadata.name) ? 'MODIFIED' : 'ADDED';
    this.#emit('pods', { type, object: pod }, false);
  }

  deletePod(name: string): void {
    const pod = this.#objects.pods.get(name);
    if (pod !== undefined) this.#emit('pods', { type: 'DELETED', object: pod }, false);
  }

  /** Creates or replaces an InferencePool (read by GET, listed and watched: watchers are told). */
  putPool(pool: InferencePool): void {
    const type = this.#objects.inferencepools.has(pool.metadata.name) ? 'MODIFIED' : 'ADDED';
    this.#emit('inferencepools', { type, object: pool }, false);
  }

  /** Forgets every version up to now and ends open watches with 410 Gone. */
  compact(): void {
    this.#oldest = this.#rv;
    for (const w of this.#watchers.keys())
      w.end(
        `${JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } })}\n`,
      );
    this.#watchers.clear();
  }

  /** Cuts every open watch connection (no clean end). */
  dropWatches(): void {
    for (const w of this.#watchers.keys()) w.socket?.destroy();
    this.#watchers.clear();
  }

  /**
   * Open watches get nothing more and are never ended, their connections left open: what a client sees when a
   * load balancer or NAT between it and the API server drops the flow without a reset.
   */
  stallWatches(): void {
    for (const w of this.#watchers.keys()) this.#stalled.add(w);
    this.#watchers.clear();
  }

  releaseWatches(): void {
    this.holdWatches = false;
    for (const go of this.#held.splice(0)) go();
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #emit(resource: Resource, event: Event, silent: boolean): void {
    this.#rv++;
    const object = {
      ...event.object,
      metadata: { ...event.object.metadata, resourceVersion: String(this.#rv) },
    } as Stored;
    if (event.type === 'DELETED') this.#objects[resource].delete(object.metadata.name);
    else this.#objects[resource].set(object.metadata.name, object);
    if (silent) {
      this.#oldest = this.#rv;
      return;
    }
    const e = { type: event.type, object };
    this.#history.push({ rv: this.#rv, resource, event: e });
    for (const [w, r] of this.#watchers)
      if (r.resource === resource && r.matches(object)) w.write(`${JSON.stringify(e)}\n`);
  }

  #serve(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    if (this.failRequests > 0) {
      this.failRequests--;
      this.requests.push('failed');
      res.writeHead(503, { 'content-type': 'application/json' }).end('{"kind":"Status","code":503}');
      return;
    }
    const notFound = (): void =>
      void res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
    const pool = /^\/apis\/inference\.networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/inferencepools\/([^/]+)$/.exec(
      url.pathname,
    );
    if (req.method === 'GET' && pool !== null) {
      const found = this.#objects.inferencepools.get(pool[2]!) as InferencePool | undefined;
      if (found === undefined || found.metadata.namespace !== pool[1]) return notFound();
      this.requests.push(`get inferencepool ${pool[2]}`);
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(found));
      return;
    }
    const m =
      /^\/(?:apis\/discovery\.k8s\.io|api|apis\/inference\.networking\.k8s\.io)\/v1\/namespaces\/([^/]+)\/(endpointslices|pods|inferencepools)$/.exec(
        url.pathname,
      );
    if (req.method !== 'GET' || m === null) return notFound();
    const resource = m[2] as Resource;
    const wanted = (url.searchParams.get('labelSelector') ?? '').split(',').filter((p) => p !== '');
    const name = /^metadata\.name=(.+)$/.exec(url.searchParams.get('fieldSelector') ?? '')?.[1];
    const matches = (o: Stored): boolean =>
      (name === undefined || o.metadata.name === name) &&
      wanted.every((p) => {
        const [key, value] = p.split('=');
        return (o.metadata as { labels?: Record<string, string> }).labels?.[key!] === value;
      });
    const prefix = resource === 'endpointslices' ? '' : `${resource} `;
    if (url.searchParams.get('watch') !== '1') {
      this.requests.push(`${prefix}list`);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          kind: { pods: 'PodList', endpointslices: 'EndpointSliceList', inferencepools: 'InferencePoolList' }[resource],
          metadata: { resourceVersion: String(this.#rv) },
          items: [...this.#objects[resource].values()].filter(matches),
        }),
      );
      return;
    }
    const from = Number(url.searchParams.get('resourceVersion') ?? this.#rv);
    this.requests.push(`${prefix}watch@${from}`);
    const answer = (): void => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (from < this.#oldest) {
        res.end(
          `${JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } })}\n`,
        );
        return;
      }
      for (const h of this.#history)
        if (h.rv > from && h.resource === resource && matches(h.event.object))
          res.write(`${JSON.stringify(h.event)}\n`);
      if (this.endWatchesAtOnce) {
        res.end();
        return;
      }
      // An API server answers a watch at once, before its first event.
      res.flushHeaders();
      this.#watchers.set(res, { resource, matches });
      // The server ends a watch cleanly after its `timeoutSeconds`, as a real one does.
      const timeoutS = Number(url.searchParams.get('timeoutSeconds') ?? 0);
      const timer =
        timeoutS > 0
          ? setTimeout(() => {
              if (this.#stalled.has(res)) return;
              this.#watchers.delete(res);
              res.end();
            }, timeoutS * 1000)
          : undefined;
      res.on('close', () => {
        clearTimeout(timer);
        this.#watchers.delete(res);
        this.#stalled.delete(res);
      });
    };
    if (this.holdWatches) this.#held.push(answer);
    else answer();
  }
}
