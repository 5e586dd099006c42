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
  readonly #counted = new Map<string, FastCounterChild>();
  readonly #timed = new Map<string, FastHistogramChild>();

  /** `served`: the served models by name (kept up to date by the server). */
  constructor(m: KvgateMetrics, served: ReadonlyMap<string, unknown>) {
    this.#m = m;
    this.#served = served;
  }

  /** One finished request; `named` is the body's `model`, whatever the client sent. */
  done(route: string, status: number, named: unknown, seconds: number): void {
    // Only served model names become label values: a client's arbitrary `model` must not grow the series set.
    const model = typeof named === 'string' && this.#served.has(named) ? named : '';
    const statusText = String(status);
    const countKey = `${route}\n${statusText}`;
    let counter = this.#counted.get(countKey);
    if (counter === undefined) this.#counted.set(countKey, (counter = new FastCounterChild(this.#m.httpRequests, { route, status: statusText })));
    counter.inc();
    const statusClass = `${Math.floor(status / 100)}xx`;
    const timeKey = `${model}\n${route}\n${statusClass}`;
    let timer = this.#timed.get(timeKey);
    if (timer === undefined) this.#timed.set(timeKey, (timer = new FastHistogramChild(this.#m.requestDuration, { model, endpoint: route, status_class: statusClass })));
    timer.observe(seconds);
  }
}
