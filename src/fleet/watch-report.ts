/**
 * How a Kubernetes list-and-watch reports its health, as the etcd source does: `kvgate_discovery_watch_up` 1 while
 * it is live, a `lost` transition (a warning) when a live watch fails, a `resumed` one (an info line with the
 * failed attempts and the time away) when it goes through again, and each failed attempt a retry and an error
 * line. Before it first goes through, failures are retries only.
 */
import type { Logger } from '../common/index.js';
import type { DiscoveryMetrics, WatchSourceKind } from './source.js';

export class WatchReport {
  readonly #model: string;
  readonly #source: WatchSourceKind;
  /** What is watched, for the log ("kubernetes watch of service ns/name"). */
  readonly #what: string;
  #sink: { readonly logger: Logger; readonly metrics: DiscoveryMetrics } | undefined;
  #state: 'starting' | 'live' | 'lost' = 'starting';
  #lostAt = 0;

  constructor(model: string, source: WatchSourceKind, what: string) {
    this.#model = model;
    this.#source = source;
    this.#what = what;
  }

  /** Reports to `logger` and `metrics` from now on; the watch is not live yet. */
  start(logger: Logger, metrics: DiscoveryMetrics): void {
    this.#sink = { logger, metrics };
    this.#up(false);
  }

  /** The list or watch went through (`KubeListWatch`'s `onLive`), after `failures` failed attempts. */
  live(failures: number): void {
    const sink = this.#sink;
    const was = this.#state;
    this.#state = 'live';
    this.#up(true);
    if (sink === undefined || was !== 'lost') return;
    sink.metrics.discoveryWatch.transitions
      .labels({ model: this.#model, source: this.#source, transition: 'resumed' })
      .inc();
    sink.logger.info({ attempts: failures, awayMs: Date.now() - this.#lostAt }, `${this.#what} resumed`);
  }

  /** An attempt failed; the next is in `retryInMs`. */
  failed(err: Error, retryInMs: number, fields: Record<string, unknown>, stays: string): void {
    const sink = this.#sink;
    if (sink === undefined) return;
    sink.metrics.discoveryWatch.retries.labels({ model: this.#model, source: this.#source }).inc();
    if (this.#state === 'live') {
      this.#state = 'lost';
      this.#lostAt = Date.now();
      this.#up(false);
      sink.metrics.discoveryWatch.transitions
        .labels({ model: this.#model, source: this.#source, transition: 'lost' })
        .inc();
      sink.logger.warn({ ...fields, err: err.message }, `${this.#what} lost; ${stays} until it is back`);
    }
    sink.logger.error({ ...fields, retryInMs }, `${this.#what} failed: ${err.message}; ${stays}, retrying`);
  }

  #up(live: boolean): void {
    this.#sink?.metrics.discoveryWatch.up.labels({ model: this.#model, source: this.#source }).set(live ? 1 : 0);
  }
}
