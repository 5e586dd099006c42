/**
 * One slot's subscription whose SUB socket lives on an ingestion thread
 * (ingest-pool.ts): the thread receives, decodes and hashes; this side owns
 * the slot's `KvEventStream` (sequence judgement, gaps, replay, application)
 * and its replay client, exactly as `KvEventSubscriber` does, so every
 * behaviour of a slot is the same whichever thread holds its socket.
 */
import type { Logger } from '../common/index.js';
import { KvEventStream } from './event-stream.js';
import { ZmqGapReplayClient } from './gap-replay-client.js';
import type { IngestPool } from './ingest-pool.js';
import {
  fillOptions,
  kDefaultSubscriberOptions,
  type IngestContext,
  type KvEventSubscriberOptions,
} from './options.js';
import {
  checkTarget,
  ConnectionReporter,
  refusedEndpoint,
  type KvEventTarget,
  type SlotSubscription,
} from './subscriber.js';

export class ThreadedSubscriber implements SlotSubscription {
  readonly source: Readonly<KvEventTarget>;
  readonly stream: KvEventStream;
  readonly #pool: IngestPool;
  readonly #replay: ZmqGapReplayClient | undefined;
  readonly #logger: Logger;
  readonly #receiveHighWaterMark: number;
  readonly #maxMessageBytes: number;
  readonly #connection: ConnectionReporter;
  readonly #eagle: boolean;
  readonly #maxBatchElements: number;
  #id: Promise<number | undefined> | undefined;
  #closing: Promise<void> | undefined;

  /** @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an invalid worker id, rank or endpoint. */
  constructor(source: KvEventTarget, ctx: IngestContext, pool: IngestPool, options?: KvEventSubscriberOptions) {
    checkTarget(source);
    const opts = fillOptions(kDefaultSubscriberOptions, options);
    this.source = Object.freeze({ ...source });
    this.#pool = pool;
    this.#logger = ctx.logger;
    this.#receiveHighWaterMark = opts.receiveHighWaterMark;
    this.#maxMessageBytes = opts.maxMessageBytes;
    this.#connection = new ConnectionReporter(ctx, source, () => this.stream.reconnected());
    this.#eagle = ctx.applier.eagle;
    this.#maxBatchElements = opts.maxBatchElements;
    this.#replay = source.replayEndpoint
      ? new ZmqGapReplayClient(source.replayEndpoint, {
          timeoutMs: opts.replayTimeoutMs,
          maxMessageBytes: opts.maxMessageBytes,
          maxReplyBytes: opts.maxReplyBytes,
        })
      : undefined;
    this.stream = new KvEventStream({ workerId: source.workerId, dpRank: source.dpRank }, ctx, this.#replay, opts);
  }

  get connected(): boolean {
    return this.#connection.connected;
  }

  /**
   * Subscribes on an ingestion thread; resolves once its socket is connected. Idempotent.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT when ZMQ refuses the endpoint (the replay socket is closed).
   */
  async start(): Promise<void> {
    if (this.#id !== undefined || this.#closing !== undefined) {
      await this.#id;
      return;
    }
    const { workerId, dpRank, endpoint } = this.source;
    const sink = {
      stream: this.stream,
      ended: this.#connection.ended,
      refused: this.#connection.refused,
      connection: this.#connection.report,
      failed: (err: unknown) =>
        this.#logger.warn(
          { workerId, dpRank, err: err instanceof Error ? err.message : String(err) },
          'KV event handling failed',
        ),
    };
    const subscription = {
      endpoint,
      topic: this.source.topic ?? '',
      receiveHighWaterMark: this.#receiveHighWaterMark,
      maxMessageBytes: this.#maxMessageBytes,
      eagle: this.#eagle,
      maxBatchElements: this.#maxBatchElements,
    };
    let refused: unknown;
    this.#id = this.#pool.attach(subscription, sink).catch((err: unknown) => {
      refused = err;
      return undefined;
    });
    if ((await this.#id) !== undefined) return;
    void this.close();
    throw refusedEndpoint(this.source, refused);
  }

  /** Unsubscribes on the thread and closes the replay socket; resolves once nothing more reaches the stream. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      this.stream.close();
      this.#replay?.close();
      const id = await this.#id;
      if (id !== undefined) await this.#pool.detach(id);
    })();
    return this.#closing;
  }
}
