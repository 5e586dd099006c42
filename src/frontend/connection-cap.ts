/**
 * The gateway-wide bound on client connections (`limits.max_connections`): the public listener holds at most that
 * many open, idle keep-alive ones included, so clients together cannot take the file descriptors and memory the
 * process needs for its engine connections.
 *
 * A connection over it is destroyed as it is accepted, before a byte of it is read (as the per-client bound does):
 * a flood of them costs an accept and a close each. Not Node's `server.maxConnections`: in a `--processes N`
 * cluster a worker at that bound hands each connection back to the primary, which offers it to the worker again
 * at once, a busy loop in both for as long as the bound is reached (Node 20). Nothing of a request is known at
 * accept, so `/health` and `/metrics` on the public listener are refused with the rest (the per-client bound
 * refuses as blindly); the admin listener (`admin.listen`), which serves them too, is not bounded. One client
 * cannot fill the bound alone while the per-client bound (`max_connections_per_client`, by socket) is below it,
 * which the config requires.
 *
 * Each refusal is counted (`kvgate_http_connections_refused_total{limit="max_connections"}`); the log has one line
 * when an episode starts (the first refusal) and one when it ends (the next connection accepted), with its count.
 */
import type { Socket } from 'node:net';
import type { Logger } from 'pino';
import type { KvgateMetrics } from '../metrics/index.js';

export class ConnectionCap {
  /** Connections the listener may hold (0: no bound); a reload may change it (those open over a lower one stay). */
  max: number;
  readonly #logger: Logger;
  readonly #metrics: Pick<KvgateMetrics, 'httpConnectionsRefused'>;
  #open = 0;
  /** Connections refused since the episode started; 0: none going on. */
  #refused = 0;

  constructor(max: number, logger: Logger, metrics: Pick<KvgateMetrics, 'httpConnectionsRefused'>) {
    this.max = max;
    this.#logger = logger;
    this.#metrics = metrics;
  }

  /** A new connection (the listener's 'connection' event). False when the listener holds `max`: it is destroyed. */
  accepted(socket: Socket): boolean {
    if (this.max > 0 && this.#open >= this.max) {
      socket.destroy();
      this.#refuse();
      return false;
    }
    this.#open++;
    socket.once('close', () => this.#open--);
    if (this.#refused > 0) {
      this.#logger.info(
        { refused: this.#refused, maxConnections: this.max },
        'the gateway accepts client connections again, below limits.max_connections',
      );
      this.#refused = 0;
    }
    return true;
  }

  #refuse(): void {
    this.#metrics.httpConnectionsRefused.inc({ limit: 'max_connections' });
    if (this.#refused++ > 0) return;
    this.#logger.warn(
      { maxConnections: this.max },
      'the gateway holds limits.max_connections client connections: new ones are closed at accept until one closes ' +
        '(logged once until then; kvgate_http_connections_refused_total counts each)',
    );
  }
}
