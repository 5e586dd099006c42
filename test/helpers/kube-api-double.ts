/**
 * A protocol double of the Kubernetes API server's EndpointSlice list + watch
 * (no API server can run on our machines): GET .../endpointslices lists the
 * slices matching `labelSelector` with the current resourceVersion; with
 * `watch=1` it streams JSON-line events (ADDED, MODIFIED, DELETED) after the
 * given resourceVersion, replaying those it still keeps, or one ERROR event
 * with code 410 (Gone) for a version compacted away, as the real server does.
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
type Event = { type: 'ADDED' | 'MODIFIED' | 'DELETED'; object: Slice };

export class KubeApiDouble {
  readonly #server: Server;
  readonly #slices = new Map<string, Slice>();
  readonly #history: { rv: number; event: Event }[] = [];
  readonly #watchers = new Set<ServerResponse>();
  readonly #held: (() => void)[] = [];
  #rv = 100;
  /** Versions before this are compacted: a watch from them gets 410 (the current one is always watchable). */
  #oldest = 0;
  /** New watch requests wait (unanswered) while true. */
  holdWatches = false;
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
    const type = this.#slices.has(slice.metadata.name) ? 'MODIFIED' : 'ADDED';
    this.#emit({ type, object: slice }, silent);
  }

  delete(name: string): void {
    const slice = this.#slices.get(name);
    if (slice !== undefined) this.#emit({ type: 'DELETED', object: slice }, false);
  }

  /** Forgets every version up to now and ends open watches with 410 Gone. */
  compact(): void {
    this.#oldest = this.#rv;
    for (const w of this.#watchers)
      w.end(
        `${JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } })}\n`,
      );
    this.#watchers.clear();
  }

  /** Cuts every open watch connection (no clean end). */
  dropWatches(): void {
    for (const w of this.#watchers) w.socket?.destroy();
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

  #emit(event: Event, silent: boolean): void {
    this.#rv++;
    const object = { ...event.object, metadata: { ...event.object.metadata, resourceVersion: String(this.#rv) } };
    if (event.type === 'DELETED') this.#slices.delete(object.metadata.name);
    else this.#slices.set(object.metadata.name, object);
    if (silent) {
      this.#oldest = this.#rv;
      return;
    }
    const e = { type: event.type, object };
    this.#history.push({ rv: this.#rv, event: e });
    for (const w of this.#watchers) w.write(`${JSON.stringify(e)}\n`);
  }

  #serve(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const m = /^\/apis\/discovery\.k8s\.io\/v1\/namespaces\/([^/]+)\/endpointslices$/.exec(url.pathname);
    if (req.method !== 'GET' || m === null) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"kind":"Status","code":404}');
      return;
    }
    const [key, value] = (url.searchParams.get('labelSelector') ?? '').split('=');
    const matches = (s: Slice): boolean => key === '' || s.metadata.labels[key!] === value;
    if (url.searchParams.get('watch') !== '1') {
      this.requests.push('list');
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          kind: 'EndpointSliceList',
          metadata: { resourceVersion: String(this.#rv) },
          items: [...this.#slices.values()].filter(matches),
        }),
      );
      return;
    }
    const from = Number(url.searchParams.get('resourceVersion') ?? this.#rv);
    this.requests.push(`watch@${from}`);
    const answer = (): void => {
      res.writeHead(200, { 'content-type': 'application/json' });
      if (from < this.#oldest) {
        res.end(
          `${JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 410, reason: 'Expired', message: 'too old resource version' } })}\n`,
        );
        return;
      }
      for (const h of this.#history)
        if (h.rv > from && matches(h.event.object)) res.write(`${JSON.stringify(h.event)}\n`);
      this.#watchers.add(res);
      res.on('close', () => this.#watchers.delete(res));
    };
    if (this.holdWatches) this.#held.push(answer);
    else answer();
  }
}
