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
 * (which holds slots too), so both are bounded by `limits.max_concurrent_requests`. How many clients are at the bound
 * (hold `max` or more) is kept as one count, moved as a client reaches or leaves it and recounted when a reload changes
 * `max`, and reported to `atBound` on each change (`kvgate_http_clients_at_request_bound`).
 */
import type { Logger } from 'pino';
import { KvgateError } from '../errors/index.js';

/** Where the bound's episodes are logged and its clients at the bound reported (none: neither). */
export interface ClientRequestsWatch {
  readonly logger?: Logger | undefined;
  /** The clients at the bound now, called on each change. */
  readonly atBound?: ((clients: number) => void) | undefined;
}

export class ClientRequests {
  #max = 0;
  readonly #logger: Logger | undefined;
  readonly #report: ((clients: number) => void) | undefined;
  readonly #held = new Map<string, number>();
  /** Clients refused since they reached the bound, with the requests refused in the episode. */
  readonly #refused = new Map<string, number>();
  /** Clients holding `max` requests or more (0 while there is no bound). */
  #atBound = 0;

  constructor(watch: ClientRequestsWatch = {}) {
    this.#logger = watch.logger;
    this.#report = watch.atBound;
  }

  /** Requests one client may hold in flight; 0: no bound. A reload may change it (requests above a lowered one finish). */
  get max(): number {
    return this.#max;
  }

  set max(max: number) {
    this.#max = max;
    let at = 0;
    for (const held of this.#held.values()) if (this.#isAt(held)) at++;
    this.#setAtBound(at);
  }

  /** Clients at the bound now. */
  get atBound(): number {
    return this.#atBound;
  }

  /**
   * Refuses `client`'s next request while it holds `max` already; counts nothing (`add` does, once the gateway-wide
   * bound admitted the request too).
   * @throws KvgateError KVG_ERR_TOO_MANY_CLIENT_REQUESTS at the bound.
   */
  refuseOver(client: string): void {
    if (this.#max === 0 || (this.#held.get(client) ?? 0) < this.#max) return;
    const refused = (this.#refused.get(client) ?? 0) + 1;
    this.#refused.set(client, refused);
    if (refused === 1) {
      this.#logger?.warn(
        { client, maxConcurrentRequestsPerClient: this.#max },
        'a client holds limits.max_concurrent_requests_per_client requests in flight: its next ones get 429 until ' +
          'one ends (logged once until then; kvgate_http_rejections_total{code="KVG_ERR_TOO_MANY_CLIENT_REQUESTS"} ' +
          'counts each)',
      );
    }
    throw new KvgateError(
      'KVG_ERR_TOO_MANY_CLIENT_REQUESTS',
      `this client holds ${this.#max} requests in flight, its limit; retry once one has ended`,
    );
  }

  /** `client`'s request took a slot. */
  add(client: string): void {
    const held = (this.#held.get(client) ?? 0) + 1;
    this.#held.set(client, held);
    if (this.#isAt(held) && !this.#isAt(held - 1)) this.#setAtBound(this.#atBound + 1);
  }

  /** A slot `client`'s request held was released (its answer closed and its work ended, however it ended). */
  release(client: string): void {
    const before = this.#held.get(client) ?? 0;
    const held = before - 1;
    if (held <= 0) this.#held.delete(client);
    else this.#held.set(client, held);
    if (this.#isAt(before) && !this.#isAt(held)) this.#setAtBound(this.#atBound - 1);
    const refused = this.#refused.get(client);
    if (refused === undefined || (this.#max > 0 && held >= this.#max)) return;
    this.#refused.delete(client);
    this.#logger?.info(
      { client, refused, maxConcurrentRequestsPerClient: this.#max },
      'a client is below limits.max_concurrent_requests_per_client again: its requests are admitted',
    );
  }

  /** Requests `client` holds in flight now. */
  heldBy(client: string): number {
    return this.#held.get(client) ?? 0;
  }

  #isAt(held: number): boolean {
    return this.#max > 0 && held >= this.#max;
  }

  #setAtBound(clients: number): void {
    if (clients === this.#atBound) return;
    this.#atBound = clients;
    this.#report?.(clients);
  }
}
