/**
 * The gateway's view of its client connections, for two jobs:
 *
 * - bounding, per client address, the connections that hold no complete
 *   request yet (headers or body still arriving: nginx's slow-client
 *   exposure). A connection is pending from accept until its request's body
 *   has arrived or the request was answered, and again from its next request.
 *   A connection accepted while its address is at the bound is marked
 *   refused: its request is answered 429 and the connection closed.
 * - shutdown: which connections are idle between keep-alive requests (safe to
 *   close) and which were accepted but have not sent a request yet (they get
 *   an answer, not a reset).
 */
import type { Socket } from 'node:net';

interface ConnState {
  readonly address: string;
  pending: boolean;
  refused: boolean;
  /** Requests in progress on this connection (dispatched, response not closed). */
  active: number;
  /** Requests completed on this connection. */
  served: number;
}

export class ClientConnections {
  /** Connections one address may hold without a complete request; a reload may change it. */
  maxPendingPerClient: number;
  readonly #pendingByAddress = new Map<string, number>();
  readonly #conns = new Map<Socket, ConnState>();

  constructor(maxPendingPerClient: number) {
    this.maxPendingPerClient = maxPendingPerClient;
  }

  /** A new connection (the server's 'connection' event). */
  accepted(socket: Socket): void {
    const address = socket.remoteAddress ?? '';
    const state: ConnState = { address, pending: false, refused: false, active: 0, served: 0 };
    this.#conns.set(socket, state);
    if ((this.#pendingByAddress.get(address) ?? 0) >= this.maxPendingPerClient) state.refused = true;
    else this.#setPending(state, true);
    socket.once('close', () => {
      this.#setPending(state, false);
      this.#conns.delete(socket);
    });
  }

  /** A request's headers arrived on `socket`. False when the connection was refused at accept. */
  requestStarted(socket: Socket): boolean {
    const state = this.#conns.get(socket);
    if (state === undefined) return true;
    state.active++;
    if (state.refused) return false;
    this.#setPending(state, true);
    return true;
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

  #setPending(state: ConnState, pending: boolean): void {
    if (state.pending === pending) return;
    state.pending = pending;
    const n = (this.#pendingByAddress.get(state.address) ?? 0) + (pending ? 1 : -1);
    if (n <= 0) this.#pendingByAddress.delete(state.address);
    else this.#pendingByAddress.set(state.address, n);
  }
}
