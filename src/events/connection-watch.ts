/**
 * A SUB socket's connection to its engine's publisher, watched through ZMQ's socket monitor, on whichever
 * thread holds the socket.
 *
 * - `connected`: the ZMTP handshake with the publisher completed (the first time, and each time again).
 * - `disconnected`: the connection ended: the engine went away, or it broke the protocol. A message over
 *   the socket's `maxMessageSize` is such a break: libzmq drops the message and the connection unread.
 *
 * After a lost TCP connection ZMQ reconnects by itself, and says so (a retry scheduled). After a protocol
 * break it does not: the session ends and the endpoint stays unconnected for good, so that slot would never
 * hear from its engine again. When no retry of ZMQ's follows a disconnection, the watch connects the
 * endpoint again itself, after a back-off that doubles while it keeps happening (a publisher that sends
 * nothing but oversized messages costs a reconnection every few seconds, not a loop).
 */
import { Backoff, type Rng } from '../common/index.js';
import type { Subscriber } from 'zeromq';

export type ConnectionChange = 'connected' | 'disconnected';
export const CONNECTION_CHANGES: readonly ConnectionChange[] = ['connected', 'disconnected'];

/** The first wait before connecting again after a disconnection ZMQ does not retry, and the longest. */
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5_000;

/**
 * Reports `sub`'s connection changes to `onChange` until the socket closes, and connects `endpoint` again
 * when ZMQ will not. Call once per socket, before `connect`. Resolves once the monitor has ended after the
 * socket closed: a thread must not end before (zeromq aborts the process over a monitor still open then).
 */
export function watchConnection(
  sub: Subscriber,
  endpoint: string,
  onChange: (change: ConnectionChange) => void,
  rng: Rng = Math.random,
): Promise<void> {
  const backoff = new Backoff(RECONNECT_MIN_MS, RECONNECT_MAX_MS, rng);
  let connected = false;
  let connectedAt = 0;
  let timer: NodeJS.Timeout | undefined;
  const cancel = (): void => {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  };
  const reconnect = (): void => {
    timer = undefined;
    if (sub.closed || connected) return;
    try {
      sub.disconnect(endpoint);
    } catch {
      // the session ZMQ ended is gone already
    }
    try {
      sub.connect(endpoint);
    } catch {
      // closed meanwhile
    }
  };
  const events = sub.events;
  return (async () => {
    try {
      for await (const ev of events) {
        switch (ev.type) {
          case 'handshake':
            cancel();
            if (!connected) {
              connected = true;
              connectedAt = Date.now();
              onChange('connected');
            }
            break;
          case 'disconnect':
            if (connected) {
              connected = false;
              // A connection that held is a fresh start; one that keeps breaking backs off further.
              if (Date.now() - connectedAt >= RECONNECT_MAX_MS) backoff.reset();
              onChange('disconnected');
            }
            cancel();
            timer = setTimeout(reconnect, backoff.next());
            timer.unref();
            break;
          case 'connect:retry':
          case 'connect:delay':
          case 'connect':
            // ZMQ is reconnecting on its own.
            cancel();
            break;
          case 'end':
            cancel();
            return;
        }
      }
    } catch {
      // the monitor ended with the socket
    } finally {
      cancel();
      if (!events.closed) events.close();
    }
  })();
}
