/**
 * The per-request HTTP series the server writes when a response closes
 * (`kvgate_http_requests_total`, `kvgate_request_duration_seconds`), through
 * metrics' fast children kept per label set: the label sets are bounded
 * (routes, statuses and served models), and a child does not hash its labels
 * on every request.
 */
import { FastCounterChild, FastHistogramChild, type KvgateMetrics } from '../metrics/index.js';

export class RequestMetrics {
  readonly #m: KvgateMetrics;
  readonly #served: ReadonlyMap<string, unknown>;
  /** Counters by route, then status; timers by model, then route, then status class (no key string built per request). */
  readonly #counted = new Map<string, Map<number, FastCounterChild>>();
  readonly #timed = new Map<string, Map<string, Map<number, FastHistogramChild>>>();

  /** `served`: the served models by name (kept up to date by the server). */
  constructor(m: KvgateMetrics, served: ReadonlyMap<string, unknown>) {
    this.#m = m;
    this.#served = served;
  }

  /** One finished request; `named` is the body's `model`, whatever the client sent. */
  done(route: string, status: number, named: unknown, seconds: number): void {
    // Only served model names become label values: a client's arbitrary `model` must not grow the series set.
    const model = typeof named === 'string' && this.#served.has(named) ? named : '';
    let byStatus = this.#counted.get(route);
    if (byStatus === undefined) this.#counted.set(route, (byStatus = new Map()));
    let counter = byStatus.get(status);
    if (counter === undefined)
      byStatus.set(status, (counter = new FastCounterChild(this.#m.httpRequests, { route, status: String(status) })));
    counter.inc();
    const statusClass = Math.floor(status / 100);
    let byRoute = this.#timed.get(model);
    if (byRoute === undefined) this.#timed.set(model, (byRoute = new Map()));
    let byClass = byRoute.get(route);
    if (byClass === undefined) byRoute.set(route, (byClass = new Map()));
    let timer = byClass.get(statusClass);
    if (timer === undefined) {
      byClass.set(
        statusClass,
        (timer = new FastHistogramChild(this.#m.requestDuration, {
          model,
          endpoint: route,
          status_class: `${statusClass}xx`,
        })),
      );
    }
    timer.observe(seconds);
  }
}
