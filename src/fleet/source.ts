/**
 * What every discovery source of workers is: a model's workers file, its etcd
 * prefix or its Kubernetes Service. Each brings workers of one model into the
 * fleet at runtime, and takes them out, through `FleetMembers` (membership.ts),
 * the one path for joins and leaves.
 */
import type { Logger } from 'pino';

/** Where a worker came from: the config file (at start or on reload), a model's workers file, etcd, or Kubernetes. */
export type WorkerSourceKind = 'static' | 'file' | 'etcd' | 'kubernetes';

/** The kinds a discovery source can be (the config file is not one: a reload applies it). */
export type DiscoveryKind = Exclude<WorkerSourceKind, 'static'>;

/** Where discovery is counted: the gateway's metrics fit this shape. */
export interface DiscoveryMetrics {
  /** Worker sets a source reported, by outcome. */
  readonly discoveryUpdates: {
    labels(l: {
      model: string;
      /** `inference_pool`: the pods `kvgate picker` chooses from (not a source of workers). */
      source: DiscoveryKind | 'inference_pool';
      outcome: 'applied' | 'unchanged' | 'rejected';
    }): { inc(): void };
  };
  /**
   * Endpoints a Kubernetes source handed from one listed pod to another, and pods it does not route because a newer
   * pod is listed with their endpoint (`EndpointOwners`; joins and leaves are `FleetMembers`' to count).
   */
  readonly workerMembership: {
    labels(l: { model: string; source: 'kubernetes' | 'inference_pool'; change: 'handed_over' | 'shadowed' }): {
      inc(n: number): void;
    };
  };
  /** The state of a source's watch on a remote store (etcd, a Kubernetes API server). */
  readonly discoveryWatch: {
    readonly transitions: {
      labels(l: { model: string; source: WatchSourceKind; transition: 'lost' | 'resumed' | 'relisted' }): {
        inc(): void;
      };
    };
    readonly retries: { labels(l: { model: string; source: WatchSourceKind }): { inc(): void } };
    readonly up: { labels(l: { model: string; source: WatchSourceKind }): { set(v: number): void } };
  };
}

/** The sources that watch a remote store: etcd, and a Kubernetes API server (a Service's EndpointSlices, an InferencePool's pods). */
export type WatchSourceKind = 'etcd' | 'kubernetes' | 'inference_pool';

/**
 * A discovery source of one model's workers.
 *
 * Contract: `start` begins watching (once; later calls do nothing) and reports to `logger` and `metrics`
 * from then on; every worker set it sees is applied whole (joins and leaves through `FleetMembers` with its
 * `kind`) or refused whole with every problem logged (the workers it brought before stay). `close` stops
 * watching; the workers it brought stay in the fleet (the gateway is shutting down). Neither throws.
 */
export interface WorkerSource {
  readonly kind: DiscoveryKind;
  start(logger: Logger, metrics: DiscoveryMetrics): void;
  close(): void | Promise<void>;
}
