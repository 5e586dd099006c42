/**
 * The ZMQ SUB sockets that start receiving in this thread from now on, so that a test can make libzmq itself
 * fail one of kvgate's (private to their owners): `receiveTimeout`, which kvgate never sets, makes the socket's
 * next receive reject (EAGAIN, "Operation was not possible or timed out") while the socket stays open, a
 * failure a receive loop does not survive. The receive in flight when it is set still waits without a limit.
 * Only zeromq's method is wrapped, to note the socket; zeromq still does the receiving.
 */
import { Subscriber } from 'zeromq';

export interface ReceivingSubscribers {
  /** In the order of their first receive. */
  readonly sockets: Subscriber[];
  /** Unwraps zeromq's `receive`. */
  restore(): void;
}

export function watchSubscribers(): ReceivingSubscribers {
  const sockets: Subscriber[] = [];
  const inherited = Subscriber.prototype.receive;
  Object.defineProperty(Subscriber.prototype, 'receive', {
    configurable: true,
    writable: true,
    value: function receive(this: Subscriber) {
      if (!sockets.includes(this)) sockets.push(this);
      return inherited.call(this);
    },
  });
  return {
    sockets,
    restore: () => {
      delete (Subscriber.prototype as { receive?: unknown }).receive;
    },
  };
}
