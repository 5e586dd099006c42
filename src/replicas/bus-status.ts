/**
 * The sync bus's connection as an operator sees it: each change a log line (connected at info, lost at warn,
 * closed for good by the client at error: the transport opens a new one) and a count
 * (`kvgate_replica_sync_bus_transitions_total`), and `kvgate_replica_sync_bus_up` following it.
 *
 * The transport starts connecting while the fleet is built, before the gateway's logger and metrics are known
 * (`bind`, when the first model's router is built), and usually connects before then. The changes before
 * `bind` are kept (a count per transition and the last one, so bounded) and reported at `bind`: each counted,
 * and the state they left logged once, marked `early: true`.
 */
import type { Logger } from 'pino';
import type { ReplicaMetrics } from '../metrics/index.js';
import type { TransportStatus } from './transport.js';

export class BusStatus {
  #logger: Logger | undefined;
  #metrics: ReplicaMetrics | undefined;
  /** The changes before `bind`: how many of each, and the last with its detail. Undefined once bound. */
  #unbound: { counts: Map<TransportStatus, number>; last: [TransportStatus, string] | undefined } | undefined = {
    counts: new Map(),
    last: undefined,
  };

  /** Where changes are logged and counted (set once); `connected` is the bus's state now, the gauge's start. */
  bind(logger: Logger, metrics: ReplicaMetrics, connected: boolean): void {
    this.#logger ??= logger;
    this.#metrics ??= metrics;
    this.#metrics.busUp.set(connected ? 1 : 0);
    const unbound = this.#unbound;
    this.#unbound = undefined;
    if (unbound === undefined) return;
    for (const [transition, n] of unbound.counts) this.#metrics.busTransitions.labels({ transition }).inc(n);
    if (unbound.last !== undefined) this.#log(...unbound.last, { early: true });
  }

  /** The transport's connection changed. */
  changed(status: TransportStatus, detail: string): void {
    const unbound = this.#unbound;
    if (unbound !== undefined) {
      unbound.counts.set(status, (unbound.counts.get(status) ?? 0) + 1);
      unbound.last = [status, detail];
      return;
    }
    this.#metrics?.busUp.set(status === 'connected' ? 1 : 0);
    this.#metrics?.busTransitions.labels({ transition: status }).inc();
    this.#log(status, detail, {});
  }

  #log(status: TransportStatus, detail: string, extra: { early?: true }): void {
    if (status === 'connected') this.#logger?.info({ detail, ...extra }, 'replica sync bus connected');
    else if (status === 'closed')
      this.#logger?.error(
        { detail, ...extra },
        'replica sync bus connection closed for good: opening a new one with back-off; ' +
          "routing on this replica's own knowledge until it is back",
      );
    else
      this.#logger?.warn(
        { detail, ...extra },
        "replica sync bus unavailable: routing on this replica's own knowledge until it is back",
      );
  }
}
