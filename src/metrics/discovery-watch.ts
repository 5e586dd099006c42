/**
 * The state of each model's discovery watch (`kvgate_discovery_watch_*`;
 * `source` is `etcd`, `kubernetes` (a Service's EndpointSlices) or
 * `inference_pool` (an InferencePool's pods, in `kvgate picker`)): whether it is live, when it was lost and resumed, and
 * the failed attempts to list and watch again. Registered with every
 * gateway's metrics, so /metrics lists them whether or not a model uses etcd.
 */
import { Counter, Gauge, type Registry } from 'prom-client';

export interface DiscoveryWatchMetrics {
  readonly up: Gauge<'model' | 'source'>;
  readonly transitions: Counter<'model' | 'source' | 'transition'>;
  readonly retries: Counter<'model' | 'source'>;
}

export function discoveryWatchMetrics(registers: Registry[]): DiscoveryWatchMetrics {
  return {
    up: new Gauge({
      name: 'kvgate_discovery_watch_up',
      labelNames: ['model', 'source'],
      registers,
      help:
        "1 while a discovery source's watch (source=etcd, kubernetes or inference_pool) is live; 0 while kvgate is " +
        'listing and watching again.',
    }),
    transitions: new Counter({
      name: 'kvgate_discovery_watch_transitions_total',
      labelNames: ['model', 'source', 'transition'],
      registers,
      help:
        "A discovery source's watch (source=etcd, kubernetes or inference_pool) lost (the current workers stay) or " +
        'resumed (through again, the difference applied), or relisted (a Kubernetes watch answered 410 Gone: listed ' +
        'again at once).',
    }),
    retries: new Counter({
      name: 'kvgate_discovery_watch_retries_total',
      labelNames: ['model', 'source'],
      registers,
      help:
        'Failed attempts to list and watch a discovery source (source=etcd, kubernetes or inference_pool), each ' +
        'followed by a wait that doubles.',
    }),
  };
}
