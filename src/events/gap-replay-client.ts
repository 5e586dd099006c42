/**
 * Client of a vLLM/SGLang replay endpoint (a ZMQ ROUTER), over a DEALER.
 *
 * Request: `[<empty>, start_seq u64 BE]` (a DEALER must send the empty
 * delimiter a REQ socket would add). Reply: one `[<empty>, seq, payload]` per
 * buffered batch with seq >= start, then `[<empty>, 0xFFFFFFFFFFFFFFFF, b""]`.
 * A DEALER, not a REQ, because one request gets many replies.
 *
 * Requests are serialised: a late reply to an abandoned request would be
 * mistaken for the next one, so a request that times out or is aborted (a
 * newer one superseded it) also closes the socket, and the next request
 * opens a fresh one.
 *
 * An answer is held whole before the stream applies it, and the endpoint is
 * the engine's (or whatever answers there): each message is bounded as the
 * live SUB's are (`maxMessageBytes`: ZMQ drops a larger one with the
 * connection, so the request times out), and the answer's total by
 * `maxReplyBytes` and `maxBatches`. Past either the request fails and the
 * socket is closed (which frees what ZMQ had queued behind it).
 */
import { setImmediate as nextTurn } from 'node:timers/promises';
import { Dealer } from 'zeromq';
import './zmq-sockets.js';
import { KvgateError } from '../errors/index.js';
import { REPLAY_END_SEQ, encodeSeq, parseEventFrames, type SequencedPayload } from './decode.js';
import type { GapReplayReply, GapReplaySource } from './gap-replay.js';
import type { KvEventDecodeError } from './types.js';

export interface ZmqGapReplayClientOptions {
  /** Longest wait for the next reply message (and for sending the request), ms. Default 2000. */
  timeoutMs?: number;
  /** Replies beyond this many batches fail the request (a publisher that never ends). Default 1,000,000. */
  maxBatches?: number;
  /** The largest reply message taken, bytes (the SUB's `maxMessageBytes`); ZMQ drops a larger one unread. Default 64 MiB. */
  maxMessageBytes?: number;
  /** Payload bytes of one answer at most; past them the request fails. Default 512 MiB (see `kDefaultSubscriberOptions`). */
  maxReplyBytes?: number;
}

const EMPTY = Buffer.alloc(0);
const YIELD_EVERY = 256;

function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}

export class ZmqGapReplayClient implements GapReplaySource {
  readonly endpoint: string;
  readonly #timeoutMs: number;
  readonly #maxBatches: number;
  readonly #maxMessageBytes: number;
  readonly #maxReplyBytes: number;
  #dealer: Dealer | undefined;
  #queue: Promise<unknown> = Promise.resolve();
  #closed = false;

  constructor(endpoint: string, opts: ZmqGapReplayClientOptions = {}) {
    this.endpoint = endpoint;
    this.#timeoutMs = opts.timeoutMs ?? 2000;
    this.#maxBatches = opts.maxBatches ?? 1_000_000;
    this.#maxMessageBytes = opts.maxMessageBytes ?? 64 * 2 ** 20;
    this.#maxReplyBytes = opts.maxReplyBytes ?? 512 * 2 ** 20;
  }

  /**
   * Every buffered batch with seq >= `fromSeq`, in publisher order.
   * @throws KvgateError KVG_ERR_KV_EVENT_REPLAY on timeout, socket error, abort or close.
   */
  replay(fromSeq: bigint, signal?: AbortSignal): Promise<GapReplayReply> {
    const run = this.#queue.then(() => this.#request(fromSeq, signal));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #request(fromSeq: bigint, signal: AbortSignal | undefined): Promise<GapReplayReply> {
    if (this.#closed) throw this.#error(fromSeq, 'client closed');
    if (signal?.aborted === true) throw this.#error(fromSeq, 'superseded');
    const dealer = (this.#dealer ??= this.#open());
    const onAbort = (): void => {
      if (this.#dealer === dealer) this.#discard();
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const batches: SequencedPayload[] = [];
    const errors: KvEventDecodeError[] = [];
    let bytes = 0;
    try {
      await dealer.send([EMPTY, encodeSeq(fromSeq)]);
      for (;;) {
        const frames = await dealer.receive();
        const r = parseEventFrames(frames);
        if (!r.ok) {
          errors.push(r.error);
          continue;
        }
        if (r.value.seq === REPLAY_END_SEQ) return { batches, errors };
        bytes += r.value.payload.byteLength;
        // Checked before the batch is kept: what was held is dropped with the failed request.
        if (bytes > this.#maxReplyBytes) throw new Error(`answer over ${this.#maxReplyBytes} bytes`);
        batches.push(r.value);
        // A long reply must not hold the event loop (zeromq resolves at once while messages are buffered).
        if (batches.length % YIELD_EVERY === 0) await nextTurn();
        if (batches.length > this.#maxBatches) throw new Error(`more than ${this.#maxBatches} batches`);
      }
    } catch (err) {
      if (this.#dealer === dealer) this.#discard();
      if (this.#closed) throw this.#error(fromSeq, 'client closed');
      // (read through a function: TypeScript narrowed `aborted` at the top of the request)
      if (isAborted(signal)) throw this.#error(fromSeq, 'superseded');
      const code = (err as { code?: unknown }).code;
      throw this.#error(
        fromSeq,
        code === 'EAGAIN'
          ? // ZMQ drops a message over the limit with the connection: to the client it is a reply that never came.
            `no reply within ${this.#timeoutMs} ms (or a reply message over ${this.#maxMessageBytes} bytes)`
          : err instanceof Error
            ? err.message
            : String(err),
        err,
      );
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /**
   * No receive high-water mark: a full pipe would make the engine's ROUTER drop replies. The answer is bounded
   * instead by `maxBatches` and `maxReplyBytes` as it is read, and each message by `maxMessageSize`.
   */
  #open(): Dealer {
    const d = new Dealer({
      linger: 0,
      maxMessageSize: this.#maxMessageBytes,
      receiveTimeout: this.#timeoutMs,
      sendTimeout: this.#timeoutMs,
      receiveHighWaterMark: 0,
    });
    d.connect(this.endpoint);
    return d;
  }

  #discard(): void {
    const d = this.#dealer;
    this.#dealer = undefined;
    if (d !== undefined && !d.closed) d.close();
  }

  #error(fromSeq: bigint, why: string, cause?: unknown): KvgateError {
    return new KvgateError(
      'KVG_ERR_KV_EVENT_REPLAY',
      `KV event replay from ${this.endpoint} (seq ${fromSeq}) failed: ${why}`,
      { endpoint: this.endpoint, fromSeq: String(fromSeq) },
      cause === undefined ? undefined : { cause },
    );
  }

  /** Closes the socket; a request in flight rejects. Idempotent. */
  close(): void {
    this.#closed = true;
    this.#discard();
  }
}
