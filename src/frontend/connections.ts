/**
 * The gateway's view of its client connections, for two jobs:
 *
 * - bounding, per client, the requests that are not complete yet (headers or
 *   body still arriving: nginx's slow-client exposure). Who a client is comes
 *   from `limits.client_address` (client-address.ts). By the TCP peer
 *   (`socket`), a connection is pending from accept until its request's body
 *   has arrived or the request was answered, and again from its next request;
 *   a connection accepted while its address is at the bound is marked
 *   refused, and its request is answered 429 and the connection closed.
 *   Behind a proxy (`header`), a request is pending from its headers to its
 *   body's end and is counted as the client its proxy names; one over the
 *   bound is refused alone. With the bound `off`, nothing is counted.
 * - bounding, per client by TCP peer, the connections open in all (idle
 *   keep-alive ones and refused ones included): a connection over
 *   `maxOpenPerClient` is closed at accept, so one address cannot hold the
 *   process's file descriptors (which its engine connections need too).
 * - shutdown: when a connection was last accepted (the listener closes once
 *   none has come for a while), which connections are idle between keep-alive
 *   requests (safe to close) and which were accepted but have not sent a
 *   request yet (they get an answer, not a reset).
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { ClientAddresses } from './client-address.js';

interface ConnState {
  /** The client the pending state is counted as (undefined: not counted). */
  client: string | undefined;
  pending: boolean;
  refused: boolean;
  /** Requests in progress on this connection (dispatched, response not closed). */
  active: number;
  /** Requests completed on this connection. */
  served: number;
}

export class ClientConnections {
  /** Incomplete requests one client may have; a reload may change it. */
  maxPendingPerClient: number;
  /** Connections one client (by TCP peer) may hold open; 0: no bound. A reload may change it. */
  maxOpenPerClient = 0;
  /** Who a client is; a reload may replace it (each connection keeps the client it is counted as until it stops pending). */
  addresses: ClientAddresses;
  /** `performance.now()` of the last accepted connection (0: none yet). */
  lastAcceptedAt = 0;
  readonly #pendingByClient = new Map<string, number>();
  readonly #openByPeer = new Map<string, number>();
  #pending = 0;
  readonly #conns = new Map<Socket, ConnState>();

  constructor(maxPendingPerClient: number, addresses: ClientAddresses) {
    this.maxPendingPerClient = maxPendingPerClient;
    this.addresses = addresses;
  }

  /** A new connection (the server's 'connection' event). False when its client holds `maxOpenPerClient` already: it is destroyed. */
  accepted(socket: Socket): boolean {
    this.lastAcceptedAt = performance.now();
    const client = this.addresses.ofConnection(socket);
    if (client !== undefined && !this.#open(client, socket)) return false;
    const state: ConnState = { client, pending: false, refused: false, active: 0, served: 0 };
    this.#conns.set(socket, state);
    if (client !== undefined && this.#over(client)) state.refused = true;
    else this.#setPending(state, true);
    socket.once('close', () => {
      this.#setPending(state, false);
      this.#conns.delete(socket);
    });
    return true;
  }

  /** Counts `socket` as `client`'s, or destroys it when the client is at its bound of open connections. */
  #open(client: string, socket: Socket): boolean {
    const open = this.#openByPeer.get(client) ?? 0;
    if (this.maxOpenPerClient > 0 && open >= this.maxOpenPerClient) {
      socket.destroy();
      return false;
    }
    this.#openByPeer.set(client, open + 1);
    socket.once('close', () => {
      const n = (this.#openByPeer.get(client) ?? 1) - 1;
      if (n <= 0) this.#openByPeer.delete(client);
      else this.#openByPeer.set(client, n);
    });
    return true;
  }

  /** A request's headers arrived. False when it is refused: its connection was refused at accept, or its client is at the bound. */
  requestStarted(req: IncomingMessage): boolean {
    const state = this.#conns.get(req.socket);
    if (state === undefined) return true;
    state.active++;
    if (state.refused) return false;
    const client = this.addresses.ofRequest(req);
    if (client !== state.client) {
      this.#setPending(state, false);
      state.client = client;
    }
    // By socket the bound was checked at accept; behind a proxy each request may be another client's.
    if (this.addresses.source.kind === 'header' && client !== undefined && !state.pending && this.#over(client))
      return false;
    this.#setPending(state, true);
    return true;
  }

  /**
   * Who the request in progress on `socket` is counted as (`limits.client_address`: its peer, or behind a trusted
   * proxy the client the proxy names); undefined with the bound off. Read once its request started.
   */
  clientOf(socket: Socket): string | undefined {
    return this.#conns.get(socket)?.client;
  }

  /** The request on `socket` has fully arrived (or was answered without reading it). */
  requestArrived(socket: Socket): void {
    const state = this.#conns.get(socket);
    if (state !== undefined) this.#setPending(state, false);
  }

  /** The response to a request on `socket` closed. */
  requestDone(socket: Socket): void {
    const state = this.#conns.get(socket);
    if (state === undefined) return;
    state.active = Math.max(0, state.active - 1);
    state.served++;
    this.#setPending(state, false);
  }

  /** Connections with no request in progress that have served one: idle keep-alive connections, safe to close. */
  idleKeepAlive(): Socket[] {
    return [...this.#conns].filter(([, s]) => s.active === 0 && s.served > 0).map(([socket]) => socket);
  }

  /**
   * Resolves once every connection has sent its first request (or closed), or after `timeoutMs`: at shutdown,
   * connections accepted just before the listener closed get their answer instead of being cut.
   */
  async untilNoFresh(timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while ([...this.#conns.values()].some((s) => s.active === 0 && s.served === 0) && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Connections pending now (every client's, counted or not). */
  get pending(): number {
    return this.#pending;
  }

  #over(client: string): boolean {
    return (this.#pendingByClient.get(client) ?? 0) >= this.maxPendingPerClient;
  }

  #setPending(state: ConnState, pending: boolean): void {
    if (state.pending === pending) return;
    state.pending = pending;
    this.#pending += pending ? 1 : -1;
    const { client } = state;
    if (client === undefined) return;
    const n = (this.#pendingByClient.get(client) ?? 0) + (pending ? 1 : -1);
    if (n <= 0) this.#pendingByClient.delete(client);
    else this.#pendingByClient.set(client, n);
  }
}
