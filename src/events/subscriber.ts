/**
 * A ZMQ SUB socket on one engine publisher (one worker's dp rank), feeding
 * its `KvEventStream`, with an optional replay client.
 *
 * The SUB connects (engines bind their PUB) and subscribes to the topic
 * prefix; ZMQ reconnects by itself when the engine restarts, and the stream
 * notices the restart from the sequence numbers. `close()` closes both
 * sockets and resolves once the receive loop has ended. A receive that fails
 * (an error ZMQ does not recover from) ends the subscription for good: the
 * SUB is closed, and the end counted and logged (`ConnectionReporter.ended`).
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Subscriber } from 'zeromq';
import './zmq-sockets.js';
import type { Logger, WorkerRank } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { KvEventStream } from './event-stream.js';
import {
  fillOptions,
  kDefaultSubscriberOptions,
  type IngestContext,
  type KvEventSubscriberOptions,
} from './options.js';
import { ZmqGapReplayClient } from './gap-replay-client.js';
import { watchConnection, type ConnectionChange } from './connection-watch.js';

/**
 * One subscription target: where one (worker, dp rank) publishes. Discovery's
 * `KvEventEndpoints` (a worker's configured endpoints, every rank) expands to
 * one target per rank.
 */
export interface KvEventTarget extends WorkerRank {
  /** The engine's PUB endpoint as the router reaches it, e.g. `tcp://10.0.0.5:5557` (see `dpRankEndpoint`). */
  endpoint: string;
  /** The engine's replay ROUTER endpoint, e.g. `tcp://10.0.0.5:5558`; without it gaps clear the slot. */
  replayEndpoint?: string | undefined;
  /** Topic prefix to subscribe to; "" (every message) by default. */
  topic?: string | undefined;
}

/**
 * Messages received per event-loop turn at most. zeromq resolves a receive at
 * once while messages are buffered, so without a yield a flood would keep the
 * loop in microtasks; receiving is cheap (the stream only queues), applying
 * is paced by the scheduler.
 */
const RECEIVE_PER_TURN = 256;

/**
 * One slot's subscription as the manager sees it: its stream, fed either by its own SUB socket on the
 * main thread (`KvEventSubscriber`) or by an ingestion thread (`ThreadedSubscriber`).
 */
export interface SlotSubscription {
  readonly source: Readonly<KvEventTarget>;
  readonly stream: KvEventStream;
  /** Whether the socket is connected to its publisher now (connection-watch.ts); never again once the subscription ended. */
  readonly connected: boolean;
  /** Connects, subscribes and starts receiving. @throws KvgateError KVG_ERR_INVALID_ARGUMENT when ZMQ refuses the endpoint. */
  start(): void | Promise<void>;
  /** Closes the sockets and waits until nothing more reaches the stream. Idempotent. */
  close(): Promise<void>;
}

/** @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an invalid worker id, rank or endpoint. */
export function checkTarget(source: KvEventTarget): void {
  const { workerId, dpRank, endpoint } = source;
  if (!Number.isSafeInteger(workerId) || workerId < 0 || !Number.isInteger(dpRank) || dpRank < 0 || dpRank > 0xffff) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `invalid KV event source (worker ${workerId}, dp rank ${dpRank})`,
      { workerId, dpRank },
    );
  }
  if (typeof endpoint !== 'string' || !/^(tcp|ipc|inproc):\/\/./.test(endpoint)) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `KV event endpoint ${JSON.stringify(endpoint)} is not a tcp://, ipc:// or inproc:// address`,
      { workerId, dpRank },
    );
  }
}

/**
 * What a slot's connection changes become, whichever thread watches its socket: a count (`onConnection`), a
 * line, and `connected`, the state now. The first connection is a debug line (a fleet's start would be one line
 * per rank); a lost one is a warning, and its return an info line. The subscription's end (`ended`) is final:
 * counted and logged once, and the slot is not connected from then on, whatever its socket's watch still says.
 */
export class ConnectionReporter {
  readonly #ctx: IngestContext;
  readonly #source: KvEventTarget;
  readonly #slot: WorkerRank;
  readonly #reconnected: () => void;
  #lost = 0;
  #connected = false;
  #ended = false;

  /** @param reconnected called when the socket connects again after a loss (the stream's `reconnected`). */
  constructor(ctx: IngestContext, source: KvEventTarget, reconnected: () => void) {
    this.#ctx = ctx;
    this.#source = source;
    this.#slot = { workerId: source.workerId, dpRank: source.dpRank };
    this.#reconnected = reconnected;
  }

  /** Whether the slot's socket is connected to its publisher now. */
  get connected(): boolean {
    return this.#connected;
  }

  /**
   * The watch's callback (connection-watch.ts), bound; `cause`, where the caller knows why a connection was lost,
   * replaces the usual guess in the log line. Ignored once the subscription ended.
   */
  readonly report = (change: ConnectionChange, cause?: string): void => {
    if (this.#ended) return;
    const { workerId, dpRank, endpoint } = this.#source;
    this.#connected = change === 'connected';
    this.#ctx.hooks.onConnection?.(this.#slot, change);
    const at = { workerId, dpRank, endpoint };
    if (change === 'disconnected') {
      this.#lost++;
      this.#ctx.logger.warn(
        at,
        `worker ${workerId} rank ${dpRank}: KV event publisher disconnected ` +
          `(${cause ?? 'it went away, or sent a message over the size limit'}); reconnecting, and what it ` +
          'publishes meanwhile is replayed',
      );
    } else if (this.#lost > 0) {
      this.#ctx.logger.info(
        { ...at, lost: this.#lost },
        `worker ${workerId} rank ${dpRank}: KV event publisher connected again`,
      );
      this.#reconnected();
    } else {
      this.#ctx.logger.debug(at, `worker ${workerId} rank ${dpRank}: KV event publisher connected`);
    }
  };

  /**
   * Bound: the subscription gave up for good. Its socket's receive failed with `error`, which ZMQ does not
   * recover from, and nothing subscribes again. No longer connected, counted (`onConnection`: `ended`) and
   * logged once; later calls and connection reports change nothing. The owner closes the socket.
   */
  readonly ended = (error: string): void => {
    if (this.#ended) return;
    this.#ended = true;
    this.#connected = false;
    this.#ctx.hooks.onConnection?.(this.#slot, 'ended');
    const { workerId, dpRank, endpoint } = this.#source;
    this.#ctx.logger.warn(
      { workerId, dpRank, endpoint, err: error },
      `worker ${workerId} rank ${dpRank}: KV event subscription ended (its socket failed): the slot hears no more ` +
        'events and routes approximately until its subscription is replaced',
    );
  };

  /**
   * Bound: the ingestion thread that replaced a failed one refused to subscribe the slot again (`error`, ZMQ's).
   * Final as `ended` is: no longer connected, counted as a refused subscription (`onResubscribeRefused`) and
   * logged once; later calls and connection reports change nothing.
   */
  readonly refused = (error: string): void => {
    if (this.#ended) return;
    this.#ended = true;
    this.#connected = false;
    this.#ctx.hooks.onResubscribeRefused?.(this.#slot, error);
    const { workerId, dpRank, endpoint } = this.#source;
    this.#ctx.logger.warn(
      { workerId, dpRank, endpoint, err: error },
      `worker ${workerId} rank ${dpRank}: KV events not subscribed again after its ingestion thread restarted: ` +
        'the slot hears no more events and routes approximately until its subscription is replaced',
    );
  };
}

/** ZMQ's refusal of an endpoint (or of a socket for it) as the error `start()` and the constructor throw. */
export function refusedEndpoint(source: KvEventTarget, err: unknown): KvgateError {
  const { workerId, dpRank, endpoint } = source;
  return new KvgateError(
    'KVG_ERR_INVALID_ARGUMENT',
    `cannot connect to KV event endpoint ${endpoint}: ${err instanceof Error ? err.message : String(err)}`,
    { workerId, dpRank, endpoint },
    { cause: err },
  );
}

export class KvEventSubscriber implements SlotSubscription {
  readonly source: Readonly<KvEventTarget>;
  readonly stream: KvEventStream;
  readonly #sub: Subscriber;
  readonly #replay: ZmqGapReplayClient | undefined;
  readonly #logger: Logger;
  readonly #connection: ConnectionReporter;
  /** The connection watch, ended once the socket closed. */
  #watched: Promise<void> | undefined;
  #loop: Promise<void> | undefined;
  #closing: Promise<void> | undefined;

  /**
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an invalid worker id, rank or endpoint, or a socket the
   * process has no room for.
   */
  constructor(source: KvEventTarget, ctx: IngestContext, options?: KvEventSubscriberOptions) {
    checkTarget(source);
    const { workerId, dpRank } = source;
    const opts = fillOptions(kDefaultSubscriberOptions, options);
    this.source = Object.freeze({ ...source });
    this.#logger = ctx.logger;
    this.#connection = new ConnectionReporter(ctx, source, () => this.stream.reconnected());
    try {
      this.#sub = new Subscriber({
        linger: 0,
        receiveHighWaterMark: opts.receiveHighWaterMark,
        maxMessageSize: opts.maxMessageBytes,
      });
    } catch (err) {
      // No room for the socket (the process's open-file limit): refused like an endpoint ZMQ will not take.
      throw refusedEndpoint(source, err);
    }
    this.#replay = source.replayEndpoint
      ? new ZmqGapReplayClient(source.replayEndpoint, {
          timeoutMs: opts.replayTimeoutMs,
          maxMessageBytes: opts.maxMessageBytes,
          maxReplyBytes: opts.maxReplyBytes,
        })
      : undefined;
    this.stream = new KvEventStream({ workerId, dpRank }, ctx, this.#replay, opts);
  }

  get connected(): boolean {
    return this.#connection.connected;
  }

  /**
   * Connects, subscribes and starts receiving. Idempotent.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT when ZMQ refuses the endpoint (the sockets are closed).
   */
  start(): void {
    if (this.#loop !== undefined || this.#closing !== undefined) return;
    this.#watched = watchConnection(this.#sub, this.source.endpoint, this.#connection.report);
    try {
      this.#sub.connect(this.source.endpoint);
    } catch (err) {
      void this.close();
      throw refusedEndpoint(this.source, err);
    }
    this.#sub.subscribe(this.source.topic ?? '');
    this.#loop = this.#receive();
  }

  async #receive(): Promise<void> {
    const { workerId, dpRank } = this.source;
    let received = 0;
    try {
      for await (const frames of this.#sub) {
        try {
          this.stream.onFrames(frames);
        } catch (err) {
          // A bug on the apply path must not stop the subscription of this worker.
          this.#logger.warn(
            { workerId, dpRank, err: err instanceof Error ? err.message : String(err) },
            'KV event handling failed',
          );
        }
        if (++received >= RECEIVE_PER_TURN) {
          received = 0;
          await nextTurn();
        }
      }
    } catch (err) {
      if (this.#sub.closed) return;
      // Nothing reads the socket any more: closed, so ZMQ neither reconnects it nor queues what the engine sends.
      this.#connection.ended(err instanceof Error ? err.message : String(err));
      this.#sub.close();
    }
  }

  /** Closes the SUB and replay sockets and waits for the receive loop. Idempotent. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.stream.close();
      this.#replay?.close();
      if (!this.#sub.closed) this.#sub.close();
      await this.#loop;
      await this.#watched;
    })();
    return this.#closing;
  }
}
