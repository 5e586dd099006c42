/**
 * The message bus replica sync runs on. `NatsTransport` is the one for
 * replicas on several hosts: the official NATS client, reconnecting forever
 * (a replica keeps routing on its own knowledge while NATS is away); should the
 * client close the connection for good all the same (it gave up reconnecting, or
 * the server refused it), kvgate opens a new one, with back-off.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import diagnosticsChannel from 'node:diagnostics_channel';
import type { Socket } from 'node:net';
import { Backoff } from '../common/index.js';
import {
  InvalidArgumentError,
  NatsConnectionImpl,
  NoRespondersError,
  RequestError,
  connect,
  type NatsConnection,
} from '@nats-io/transport-node';

/** How long after a failed first connection attempt the next one starts. */
const FIRST_CONNECT_RETRY_MS = 250;
/** How long `close` waits for the server to take the connection's end. */
const CLOSE_ACK_MS = 2000;

/**
 * The state of the bus: `closed` is a connection the client closed for good (it gave up reconnecting, or the
 * server refused it): nothing more comes from it, and the transport opens a new one (as `connected` says).
 */
export type TransportStatus = 'connected' | 'disconnected' | 'closed';

export interface NatsTransportOptions {
  /** Reconnect attempts of the client after a connection is lost before it closes it for good (default -1: forever). */
  readonly maxReconnectAttempts?: number;
  /** Wait between the client's reconnect attempts to one server (default 250 ms). */
  readonly reconnectTimeWaitMs?: number;
  /** Client pings this far apart (default 5 s): a server that stops answering without closing is noticed by them. */
  readonly pingIntervalMs?: number;
  /** Unanswered pings after which the connection is taken as lost and reconnected (default 2). */
  readonly maxPingsOut?: number;
  /** How long a connection attempt waits for the server's handshake (default 20 s). */
  readonly connectTimeoutMs?: number;
  /** Back-off between kvgate's attempts at a new connection once the client closed one for good (default 250 ms to 30 s). */
  readonly reopenMinMs?: number;
  readonly reopenMaxMs?: number;
}

/** A subscriber: a message and, for a request, how to answer it. */
export type SyncHandler = (data: Uint8Array, reply: ((data: Uint8Array) => void) | undefined) => void;

export interface SyncTransport {
  /** Sends now, or throws when it cannot (not connected): the caller counts the loss. */
  publish(subject: string, data: Uint8Array): void;
  /**
   * Delivers every message on `subject`; `reply` answers a request. With `queue`, subscribers of the
   * same queue share the messages (one of them gets each), where the bus supports it (NATS).
   * Contract: `onMessage` and `reply` must not throw out of the handler: the NATS client runs it inside
   * its reader, which stops on a throw (the connection reads nothing more until its pings go stale).
   */
  subscribe(subject: string, onMessage: SyncHandler, queue?: string): void;
  /** One request, one answer; rejects on timeout, or with `NoResponders` when the bus knows nobody listens. */
  request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array>;
  readonly connected: boolean;
  /** The largest message the bus takes now, in bytes (NATS: the server's `max_payload`); undefined when unbounded or not known yet. */
  readonly maxPayload: number | undefined;
  /** Told of each connection change (after the first connect too). */
  onStatus: ((status: TransportStatus, detail: string) => void) | undefined;
  /**
   * Closes the bus; resolves to false when the bus did not acknowledge in time and the connection was abandoned (a
   * NATS server that stopped answering never does, and a shutdown must end regardless).
   */
  close(): Promise<boolean>;
}

type Subscriber = [string, SyncHandler, string | undefined];

/** Nobody subscribes to the subject asked (NATS says so at once, rather than letting the request time out). */
export class NoResponders extends Error {}

export class NatsTransport implements SyncTransport {
  onStatus: ((status: TransportStatus, detail: string) => void) | undefined;
  #nc: NatsConnection | undefined;
  #connected = false;
  #closed = false;
  /** The sockets of kvgate's connection attempt in progress, first or reopening (see `connectReleasingSockets`). */
  #attempt: Set<Socket> | undefined;
  readonly #subs: Subscriber[] = [];
  readonly #ready: Promise<void>;
  readonly #servers: readonly string[];
  readonly #name: string;
  readonly #opts: NatsTransportOptions;

  /**
   * Starts connecting (in the background: the first server may come up later). Until the first connection, kvgate
   * retries itself (every `FIRST_CONNECT_RETRY_MS`, on a timer that keeps no process alive) rather than the
   * client's `waitOnFirstConnect`: that loop cannot be stopped, so a gateway whose NATS never came up did not exit
   * after its shutdown. `close` stops the retries. Only a configuration error (a bad URL or option) ends them,
   * reported through `onStatus`; routing goes on alone.
   */
  constructor(servers: readonly string[], name: string, opts: NatsTransportOptions = {}) {
    this.#servers = servers;
    this.#name = name;
    this.#opts = opts;
    this.#ready = this.#firstConnect();
    this.#ready.catch((err: unknown) => this.onStatus?.('disconnected', `cannot connect: ${(err as Error).message}`));
  }

  #options(): Parameters<typeof connect>[0] {
    return {
      servers: [...this.#servers],
      name: this.#name,
      maxReconnectAttempts: this.#opts.maxReconnectAttempts ?? -1,
      reconnectTimeWait: this.#opts.reconnectTimeWaitMs ?? 250,
      pingInterval: this.#opts.pingIntervalMs ?? 5000,
      maxPingOut: this.#opts.maxPingsOut ?? 2,
      timeout: this.#opts.connectTimeoutMs ?? 20_000,
    };
  }

  /**
   * Connects, trying again after any failure but a configuration error: a server not up yet (refused), one that
   * accepts the connection but does not greet it in `connectTimeoutMs` (hung, paused, cut off), a name not
   * resolved yet, a refusal the server's operator may mend. The first failure is reported (`disconnected`, its
   * reason in the detail: the bus status logs it at warn and counts it) and the others are not (one every
   * `FIRST_CONNECT_RETRY_MS` for as long as NATS is away); the connection, when it comes, is reported `connected`.
   */
  async #firstConnect(): Promise<void> {
    let nc: NatsConnection | undefined;
    let reported = false;
    while (nc === undefined) {
      if (this.#closed) return;
      try {
        nc = await this.#attemptConnect();
      } catch (err) {
        if (isConfigurationError(err)) throw err;
        if (!reported && !this.#closed)
          this.onStatus?.('disconnected', `cannot connect yet, retrying: ${(err as Error).message}`);
        reported = true;
        await new Promise((resolve) => setTimeout(resolve, FIRST_CONNECT_RETRY_MS).unref());
      }
    }
    this.#use(nc, `connected to ${nc.getServer()}`);
  }

  /** One connection attempt: its sockets closed should it fail, or `close` be called while it waits. */
  async #attemptConnect(): Promise<NatsConnection> {
    const attempt = new Set<Socket>();
    this.#attempt = attempt;
    try {
      return await connectReleasingSockets(this.#options(), attempt);
    } finally {
      if (this.#attempt === attempt) this.#attempt = undefined;
    }
  }

  /** Takes `nc` as the connection: the subscriptions made on it, its changes and its closing watched. */
  #use(nc: NatsConnection, detail: string): void {
    if (this.#closed) {
      void nc.close();
      return;
    }
    this.#nc = nc;
    for (const s of this.#subs) this.#sub(nc, s);
    this.#set(true, detail);
    void this.#watch(nc);
    void nc.closed().then((err) => this.#closedForGood(nc, err));
  }

  /**
   * The client closed `nc` for good (not by `close`): it gave up reconnecting (`maxReconnectAttempts`), or the
   * server refused it (an authorization error). Reported (`closed`: the bus status logs it as an error), then
   * a new connection is opened with back-off, for as long as the transport is open. Not a crash: replica
   * sync is an accelerator, and a gateway that exited because NATS stayed away would turn a NATS outage into
   * a routing outage; the operator sees the bus down (`kvgate_replica_sync_bus_up` 0, the transition
   * `closed` counted, the error line) while the replica routes on its own knowledge, and the replica comes
   * back by itself once NATS does, as after any outage (its peers' snapshots fetched afresh).
   */
  #closedForGood(nc: NatsConnection, err: void | Error): void {
    if (this.#closed || this.#nc !== nc) return;
    this.#nc = undefined;
    this.#connected = false;
    this.onStatus?.('closed', `connection closed by the NATS client${err ? `: ${err.message}` : ''}`);
    void this.#reopen();
  }

  async #reopen(): Promise<void> {
    const backoff = new Backoff(this.#opts.reopenMinMs ?? 250, this.#opts.reopenMaxMs ?? 30_000, Math.random);
    while (!this.#closed) {
      await new Promise((resolve) => setTimeout(resolve, backoff.next()).unref());
      if (this.#closed) return;
      try {
        const nc = await this.#attemptConnect();
        this.#use(nc, `reconnected to ${nc.getServer()} after the connection was closed`);
        return;
      } catch {
        // Not up yet, or refused again: the next attempt waits longer (the closing was logged once).
      }
    }
  }

  get connected(): boolean {
    return this.#connected;
  }

  get maxPayload(): number | undefined {
    return this.#nc?.info?.max_payload;
  }

  /** Resolves once the first connection is up. */
  ready(): Promise<void> {
    return this.#ready;
  }

  async #watch(nc: NatsConnection): Promise<void> {
    for await (const s of nc.status()) {
      if (this.#nc !== nc) return;
      if (s.type === 'disconnect') this.#set(false, `disconnected from ${s.server}`);
      else if (s.type === 'reconnect') this.#set(true, `reconnected to ${s.server}`);
    }
  }

  #set(up: boolean, detail: string): void {
    if (this.#connected === up) return;
    this.#connected = up;
    this.onStatus?.(up ? 'connected' : 'disconnected', detail);
  }

  #sub(nc: NatsConnection, [subject, onMessage, queue]: Subscriber): void {
    nc.subscribe(subject, {
      ...(queue === undefined ? {} : { queue }),
      callback: (err, msg) => {
        if (err !== null) return;
        onMessage(msg.data, msg.reply === undefined || msg.reply === '' ? undefined : (data) => msg.respond(data));
      },
    });
  }

  publish(subject: string, data: Uint8Array): void {
    if (this.#nc === undefined || !this.#connected) throw new Error('not connected to NATS');
    this.#nc.publish(subject, data);
  }

  subscribe(subject: string, onMessage: Subscriber[1], queue?: string): void {
    const s: Subscriber = [subject, onMessage, queue];
    this.#subs.push(s);
    if (this.#nc !== undefined) this.#sub(this.#nc, s);
  }

  async request(subject: string, data: Uint8Array, timeoutMs: number): Promise<Uint8Array> {
    if (this.#nc === undefined || !this.#connected) throw new Error('not connected to NATS');
    try {
      return (await this.#nc.request(subject, data, { timeout: timeoutMs })).data;
    } catch (err) {
      if (err instanceof NoRespondersError || (err instanceof RequestError && err.isNoResponders()))
        throw new NoResponders(`no replica answers on ${subject}`);
      throw err;
    }
  }

  async close(): Promise<boolean> {
    this.#closed = true;
    // An attempt waiting on a silent server would hold its socket (and the process) until its timeout: it fails
    // at once instead.
    for (const socket of this.#attempt ?? []) socket.destroy();
    const nc = this.#nc;
    this.#nc = undefined;
    this.#connected = false;
    if (nc === undefined) return true;
    // A server that is hung or cut off never acknowledges: the client would wait until it answers again.
    let timer: NodeJS.Timeout | undefined;
    const abandoned = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), CLOSE_ACK_MS)));
    const acknowledged = await Promise.race([nc.close().then(() => true), abandoned]);
    clearTimeout(timer);
    dropReconnectAttempt(nc);
    return acknowledged;
  }
}

/**
 * Closes the socket of the reconnect attempt that `nc.close()` leaves open. The client's close ends a transport
 * only once it finished its handshake (before, the transport's close returns at once), and it cancels the
 * attempt's connect timeout without settling it: an attempt on a silent server (a paused process's kernel still
 * accepts the TCP connection) waits for the server's INFO for as long as the server says nothing, its socket keeping
 * the process alive after shutdown. `discard` is the transport's own release (the client calls it on the previous
 * transport before each attempt); on a transport that closed it is not called. Pinned to the client's version: a
 * client whose connection is not this class leaves the attempt to the process's exit guard (src/cli/serve.ts).
 */
function dropReconnectAttempt(nc: NatsConnection): void {
  if (!(nc instanceof NatsConnectionImpl)) return;
  const transport = nc.protocol.transport;
  if (!transport.isClosed) transport.discard();
}

/**
 * A client error that trying again will not mend: its options or a server URL refused before any connection. Any
 * other failure of a first connection (refused, timed out, a name not resolved, the server's refusal) is retried.
 */
function isConfigurationError(err: unknown): boolean {
  return err instanceof InvalidArgumentError || (err as { code?: unknown } | undefined)?.code === 'ERR_INVALID_URL';
}

/** Which sockets `connectReleasingSockets` records: those created in its async context. */
const attemptSockets = new AsyncLocalStorage<Set<Socket>>();

/**
 * The client's `connect`, closing the sockets of an attempt that failed. An attempt that timed out waiting for the
 * server's greeting (a hung server: its kernel accepted the connection) leaves its socket open, for as long as the
 * server stays silent and after (the client's transport close does nothing before the handshake), so each retry
 * on a hung server added one. The transport's own `discard` (as `dropReconnectAttempt` uses) is out of reach
 * here: a failed `connect` keeps its connection object and transport to itself, and building them outside it
 * would copy the client's connect (a private constructor, a transport factory its package does not export).
 * Node names each socket a client creates on the `net.client.socket` diagnostics channel, synchronously, in the
 * async context that created it: those of this call (and only those: other connections run in theirs) go into
 * `sockets`, destroyed when the attempt fails (destroying a socket already closed does nothing). Destroying one
 * while the attempt waits (`close`) fails the attempt at once. On success they belong to the connection; none of
 * the connection's later sockets (its reconnects, created in this context too) is recorded, the channel
 * unsubscribed by then.
 */
async function connectReleasingSockets(
  options: Parameters<typeof connect>[0],
  sockets: Set<Socket>,
): Promise<NatsConnection> {
  const record = (message: unknown): void => {
    if (attemptSockets.getStore() === sockets) sockets.add((message as { socket: Socket }).socket);
  };
  diagnosticsChannel.subscribe('net.client.socket', record);
  try {
    return await attemptSockets.run(sockets, () => connect(options));
  } catch (err) {
    for (const socket of sockets) socket.destroy();
    throw err;
  } finally {
    diagnosticsChannel.unsubscribe('net.client.socket', record);
  }
}
