/**
 * The per-client bound on requests in flight (`limits.max_concurrent_requests_per_client`), inside the gateway-wide
 * one (concurrency.ts, which asks this one first): a client holds at most `max` of the concurrency slots, so it
 * cannot take those that belong to others. A client is who `limits.client_address` says (the identity the
 * pending-connection bound counts by: connections.ts's `clientOf`); a request with none (`off`) is not counted.
 *
 * A request over it is refused with 429 KVG_ERR_TOO_MANY_CLIENT_REQUESTS (counted by code in
 * `kvgate_http_rejections_total`, error-answer.ts); its connection stays open. The log has two lines per client and
 * episode, not one per refusal: when its first request is refused, and when a slot it held is released below the
 * bound, with the episode's count. State: one entry per client holding a slot, and one per client in an episode
 * (which holds slots too), so both are bounded by `limits.max_concurrent_requests`.
 */
import type { Logger } from 'pino';
import { KvgateError } from '../errors/index.js';

export class ClientRequests {
  /** Requests one client may hold in flight; 0: no bound. A reload may change it (requests above a lowered one finish). */
  max = 0;
  readonly #logger: Logger | undefined;
  readonly #held = new Map<string, number>();
  /** Clients refused since they reached the bound, with the requests refused in the episode. */
  readonly #refused = new Map<string, number>();

  constructor(logger: Logger | undefined) {
    this.#logger = logger;
  }

  /**
   * Refuses `client`'s next request while it holds `max` already; counts nothing (`add` does, once the gateway-wide
   * bound admitted the request too).
   * @throws KvgateError KVG_ERR_TOO_MANY_CLIENT_REQUESTS at the bound.
   */
  refuseOver(client: string): void {
    if (this.max === 0 || (this.#held.get(client) ?? 0) < this.max) return;
    const refused = (this.#refused.get(client) ?? 0) + 1;
    this.#refused.set(client, refused);
    if (refused === 1) {
      this.#logger?.warn(
        { client, maxConcurrentRequestsPerClient: this.max },
        'a client holds limits.max_concurrent_requests_per_client requests in flight: its next ones get 429 until ' +
          'one ends (logged once until then; kvgate_http_rejections_total{code="KVG_ERR_TOO_MANY_CLIENT_REQUESTS"} ' +
          'counts each)',
      );
    }
    throw new KvgateError(
      'KVG_ERR_TOO_MANY_CLIENT_REQUESTS',
      `this client holds ${this.max} requests in flight, its limit; retry once one has ended`,
    );
  }

  /** `client`'s request took a slot. */
  add(client: string): void {
    this.#held.set(client, (this.#held.get(client) ?? 0) + 1);
  }

  /** A slot `client`'s request held was released (its answer closed and its work ended, however it ended). */
  release(client: string): void {
    const held = (this.#held.get(client) ?? 1) - 1;
    if (held <= 0) this.#held.delete(client);
    else this.#held.set(client, held);
    const refused = this.#refused.get(client);
    if (refused === undefined || (this.max > 0 && held >= this.max)) return;
    this.#refused.delete(client);
    this.#logger?.info(
      { client, refused, maxConcurrentRequestsPerClient: this.max },
      'a client is below limits.max_concurrent_requests_per_client again: its requests are admitted',
    );
  }

  /** Requests `client` holds in flight now. */
  heldBy(client: string): number {
    return this.#held.get(client) ?? 0;
  }
}
