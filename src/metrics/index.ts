/**
 * Every Prometheus metric kvgate exports, defined once, named after the
 * Prometheus naming guide: one `kvgate_` prefix, base units (`_seconds`),
 * `_total` on counters only; Node's process metrics keep their standard
 * names (`process_*`, `nodejs_*`). docs/metrics.md lists each one, and a test
 * keeps that table equal to what `/metrics` exports.
 *
 * A `KvgateMetrics` owns its own Registry so several gateways or routers can
 * live in one process (tests, embedding); the HTTP edge serves
 * `registry.metrics()`. The series themselves are the table in definitions.ts.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { kvgateVersion } from '../version.js';
import { discoveryWatchMetrics, type DiscoveryWatchMetrics } from './discovery-watch.js';
import { httpEdgeMetrics } from './http.js';
import { replicaMetrics, type ReplicaMetrics } from './replicas.js';
import { METRIC_DEFINITIONS, type DefinedMetrics, type MetricDefinition } from './definitions.js';
import { removeWorkerSeries } from './worker-series.js';

export type { ReplicaMetrics } from './replicas.js';
export { FastCounterChild, FastHistogramChild } from './fast-children.js';

export interface KvgateMetricsOptions {
  registry?: Registry;
  /** Also export Node.js process metrics (CPU, memory, event loop lag) under their standard names. Default true. */
  processMetrics?: boolean;
}

function build(def: MetricDefinition, registers: Registry[], collect: () => void): Counter | Gauge | Histogram {
  const common = { name: def.name, help: def.help, labelNames: def.labelNames, registers };
  switch (def.kind) {
    case 'counter':
      return new Counter(common);
    case 'gauge':
      return new Gauge(def.scraped === true ? { ...common, collect } : common);
    case 'histogram':
      return new Histogram({ ...common, buckets: [...def.buckets] });
  }
}

/** The table's metrics appear as typed fields of the class (declaration merging); the constructor builds them. */
export interface KvgateMetrics extends DefinedMetrics {}

export class KvgateMetrics {
  readonly registry: Registry;
  /** Writers of the per-worker load gauges, run at each scrape (see `onScrape`). */
  readonly #scrapeHooks = new Set<() => void>();
  #textSource: (() => Promise<string>) | undefined;

  // Built outside the table: families with helpers of their own.
  readonly discoveryWatch: DiscoveryWatchMetrics;
  readonly httpRequests: Counter<'route' | 'status'>;
  readonly httpRejections: Counter<'code'>;
  readonly httpClientAddressFallbacks: Counter<'reason'>;
  readonly httpConnectionsRefused: Counter<'limit'>;
  readonly httpPendingConnections: Gauge;
  readonly httpClientsAtRequestBound: Gauge;
  readonly inflight: Gauge;
  readonly replicas: ReplicaMetrics;

  constructor(opts: KvgateMetricsOptions = {}) {
    const registers = [(this.registry = opts.registry ?? new Registry())];
    // ---- process and build
    if (opts.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
    // The per-worker load gauges are read from the router's bookkeeping when scraped, never left at a stale value.
    const collect = (): void => {
      for (const hook of this.#scrapeHooks) hook();
    };
    const fields = this as unknown as Record<string, unknown>;
    for (const [key, def] of Object.entries(METRIC_DEFINITIONS)) fields[key] = build(def, registers, collect);
    this.buildInfo.set({ version: kvgateVersion(), node_version: process.version }, 1);
    this.discoveryWatch = discoveryWatchMetrics(registers);
    // ---- HTTP edge
    ({
      requests: this.httpRequests,
      rejections: this.httpRejections,
      clientAddressFallbacks: this.httpClientAddressFallbacks,
      connectionsRefused: this.httpConnectionsRefused,
      pendingConnections: this.httpPendingConnections,
      clientsAtRequestBound: this.httpClientsAtRequestBound,
      inflight: this.inflight,
    } = httpEdgeMetrics(registers, collect));
    this.replicas = replicaMetrics(registers);
  }

  /**
   * Runs `hook` whenever the per-worker load gauges are scraped (it writes them
   * from the bookkeeping). Returns the function that removes it.
   */
  onScrape(hook: () => void): () => void {
    this.#scrapeHooks.add(hook);
    return () => this.#scrapeHooks.delete(hook);
  }

  /**
   * The worker is gone from the fleet (left and drained, or a picker endpoint that left): every series labelled
   * with its id goes, so ids that come and go (pods, registrations) do not pile up series. Returns how many went.
   */
  forgetWorker(workerId: number): number {
    return removeWorkerSeries(this.registry, workerId);
  }

  /**
   * Serves `text()` from `source` instead of this registry alone (a `--processes N` cluster: the series
   * of every process, gathered by the primary).
   */
  textFrom(source: () => Promise<string>): void {
    this.#textSource = source;
  }

  /** Prometheus text exposition of every metric. */
  async text(): Promise<string> {
    return this.#textSource !== undefined ? this.#textSource() : this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
