/**
 * How a discovery source reports its watch on a remote store (etcd, a Kubernetes API server): one reporter for
 * the etcd, Kubernetes Service and InferencePool sources, so `kvgate_discovery_watch_*` and the lines beside it
 * mean the same whatever the source. `kvgate_discovery_watch_up` is 1 while the watch is live; a live watch that
 * fails is a `lost` transition (a warning); live again after that, a `resumed` one (an info line with the attempts
 * and the time away); each failed attempt to list and watch is a retry and a line. Before the watch is first live,
 * failures are retries only. A Kubernetes watch answered 410 Gone and listed again at once is a `relisted` one (a
 * warn line; it stays live).
 *
 * Its `state` is the source's: a source whose logic depends on whether its watch is live (etcd) reads it here
 * rather than keeping a second copy that could disagree with the gauge.
 */
import type { Logger } from '../common/index.js';
import type { DiscoveryMetrics, WatchSourceKind } from './source.js';

/** `starting`: never live yet; `live`: the watch is live; `lost`: it was, and is being established again. */
export type WatchState = 'starting' | 'live' | 'lost';

export interface WatchReportOptions {
  readonly model: string;
  readonly source: WatchSourceKind;
  /** What is watched, each line's start ("kubernetes watch of service ns/name", "etcd watch of /prefix/"). */
  readonly what: string;
  /** On every line: what identifies the watch (`{ service }`, `{ prefix }`). */
  readonly fields: Record<string, unknown>;
  /** What the source keeps meanwhile, for the lines ("the current workers stay"). */
  readonly stays: string;
  /**
   * The level of a failed attempt's line: `error` unless the source expects failed attempts as routine (etcd's,
   * `warn`: a restart of etcd, which registrations ride out on their leases, fails a few by design).
   */
  readonly retryLevel?: 'warn' | 'error';
}

export class WatchReport {
  readonly #opts: WatchReportOptions;
  readonly #retryLevel: 'warn' | 'error';
  #sink: { readonly logger: Logger; readonly metrics: DiscoveryMetrics } | undefined;
  #state: WatchState = 'starting';
  #lostAt = 0;

  constructor(opts: WatchReportOptions) {
    this.#opts = opts;
    this.#retryLevel = opts.retryLevel ?? 'error';
  }

  get state(): WatchState {
    return this.#state;
  }

  /** Reports to `logger` and `metrics` from now on; the watch is not live yet. */
  start(logger: Logger, metrics: DiscoveryMetrics): void {
    this.#sink = { logger, metrics };
    this.#up(false);
  }

  /**
   * The list or watch went through, after `attempts` (as the source counts them: logged as they are). A lost
   * watch is `resumed`; `resumed.fields` and `resumed.detail` (after a colon) add what the source can say of it.
   * Returns the state it leaves, for a source whose own lines depend on it.
   */
  live(attempts: number, resumed?: { fields?: Record<string, unknown>; detail?: string }): WatchState {
    const was = this.#state;
    this.#state = 'live';
    this.#up(true);
    const sink = this.#sink;
    if (sink === undefined || was !== 'lost') return was;
    this.#transition(sink, 'resumed');
    const detail = resumed?.detail === undefined ? '' : `: ${resumed.detail}`;
    sink.logger.info(
      { ...this.#opts.fields, attempts, awayMs: Date.now() - this.#lostAt, ...resumed?.fields },
      `${this.#opts.what} resumed${detail}`,
    );
    return was;
  }

  /**
   * A live watch failed, and the source tries again (a loss that is not itself a failed attempt: etcd lists
   * again after it). Not live: nothing.
   */
  lost(err: Error): void {
    if (this.#state !== 'live') return;
    this.#state = 'lost';
    this.#lostAt = Date.now();
    this.#up(false);
    const sink = this.#sink;
    if (sink === undefined) return;
    this.#transition(sink, 'lost');
    sink.logger.warn(
      { ...this.#opts.fields, err: err.message },
      `${this.#opts.what} lost; ${this.#opts.stays} until it is back`,
    );
  }

  /**
   * An attempt to list or watch failed; the next is in `retryInMs`. Where the watch was live (a Kubernetes watch
   * that fails is such an attempt), it is lost too. `context.fields` go on the line after the watch's own;
   * `context.reason` starts it (what failed and why: `<what> failed: <err>` unless given).
   */
  failed(err: Error, retryInMs: number, context: { fields?: Record<string, unknown>; reason?: string } = {}): void {
    this.lost(err);
    const sink = this.#sink;
    if (sink === undefined) return;
    const { model, source, fields, what, stays } = this.#opts;
    sink.metrics.discoveryWatch.retries.labels({ model, source }).inc();
    sink.logger[this.#retryLevel](
      { ...fields, ...context.fields, retryInMs },
      `${context.reason ?? `${what} failed: ${err.message}`}; ${stays}, retrying`,
    );
  }

  /**
   * The watch fell behind what the server keeps (a Kubernetes 410 Gone) and the source lists again at once: a
   * `relisted` transition and a warn line. The watch stays live: nothing is lost, the listing applies what it missed.
   */
  relisted(err: Error): void {
    const sink = this.#sink;
    if (sink === undefined) return;
    this.#transition(sink, 'relisted');
    sink.logger.warn({ ...this.#opts.fields, err: err.message }, `${this.#opts.what}: ${err.message}; listing again`);
  }

  #transition(sink: { readonly metrics: DiscoveryMetrics }, transition: 'lost' | 'resumed' | 'relisted'): void {
    sink.metrics.discoveryWatch.transitions
      .labels({ model: this.#opts.model, source: this.#opts.source, transition })
      .inc();
  }

  #up(live: boolean): void {
    this.#sink?.metrics.discoveryWatch.up
      .labels({ model: this.#opts.model, source: this.#opts.source })
      .set(live ? 1 : 0);
  }
}
