/**
 * One rank's KV-event publisher over ZMQ, as vLLM's ZmqEventPublisher works:
 *
 *   PUB     [topic, seq u64 BE, payload]     seq counts from 0 per publisher start
 *   ROUTER  <- [identity, "", start_seq u64 BE]
 *           -> [identity, "", seq, payload] for each buffered batch with seq >= start
 *           -> [identity, "", ff x 8, ""]   end marker
 *
 * The replay buffer holds the last `bufferSteps` batches, including batches a
 * fault dropped from the PUB stream (a lost PUB message is still in vLLM's
 * buffer). Faults: drop (seq used up, nothing sent), reorder (pairs swapped;
 * a held batch is flushed by the next one or after 50 ms), restart (seq back
 * to 0, buffer emptied, like a restarted engine), garbage (messages with
 * random sequence numbers, never in the replay buffer).
 */
import { Publisher, Router } from 'zeromq';
import type { FaultController } from './faults.js';
import { encodeSeq, REPLAY_END_SEQ } from '../common/index.js';
import { encodeEventBatch, type EventEncodingOptions } from './kv-events.js';
import type { KvEvent } from './engine-types.js';

export interface KvPublisherOptions {
  host: string;
  /** 0 = OS-chosen. */
  port: number;
  /** undefined = no replay socket; 0 = OS-chosen. */
  replayPort: number | undefined;
  topic: string;
  rank: number;
  bufferSteps: number;
  hwm: number;
  encoding: EventEncodingOptions;
  faults: FaultController;
}

const REORDER_FLUSH_MS = 50;
const BIND_RETRIES = 40;

/** Binds, retrying briefly on EADDRINUSE: a just-closed ZMQ socket frees its port asynchronously. */
async function bindWithRetry(sock: Publisher | Router, endpoint: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await sock.bind(endpoint);
      return;
    } catch (err) {
      if (attempt >= BIND_RETRIES || !/in use/i.test((err as Error).message)) throw err;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

function portOf(endpoint: string): number {
  return Number(endpoint.slice(endpoint.lastIndexOf(':') + 1));
}

export class KvEventPublisher {
  readonly endpoint: string;
  readonly port: number;
  readonly replayEndpoint: string | undefined;
  readonly replayPort: number | undefined;
  readonly #opts: KvPublisherOptions;
  readonly #pub: Publisher;
  readonly #router: Router | undefined;
  readonly #topic: Buffer;
  #seq = 0n;
  #buffer: { seq: bigint; payload: Uint8Array }[] = [];
  #sendChain: Promise<void> = Promise.resolve();
  #held: Buffer[] | undefined;
  #heldTimer: NodeJS.Timeout | undefined;
  #closed = false;
  #sent = 0;
  #dropped = 0;

  private constructor(opts: KvPublisherOptions, pub: Publisher, router: Router | undefined) {
    this.#opts = opts;
    this.#pub = pub;
    this.#router = router;
    this.#topic = Buffer.from(opts.topic, 'utf8');
    this.endpoint = pub.lastEndpoint!;
    this.port = portOf(this.endpoint);
    this.replayEndpoint = router?.lastEndpoint ?? undefined;
    this.replayPort = this.replayEndpoint === undefined ? undefined : portOf(this.replayEndpoint);
    if (router !== undefined) void this.#serveReplay(router);
  }

  static async bind(opts: KvPublisherOptions): Promise<KvEventPublisher> {
    const pub = new Publisher({ sendHighWaterMark: opts.hwm, linger: 0 });
    let router: Router | undefined;
    try {
      await bindWithRetry(pub, `tcp://${opts.host}:${opts.port === 0 ? '*' : opts.port}`);
      if (opts.replayPort !== undefined) {
        // A whole buffer fits in the send pipe: ROUTER drops replies beyond its high-water mark.
        router = new Router({ linger: 0, sendHighWaterMark: opts.bufferSteps + 1 });
        await bindWithRetry(router, `tcp://${opts.host}:${opts.replayPort === 0 ? '*' : opts.replayPort}`);
      }
    } catch (err) {
      pub.close();
      router?.close();
      throw err;
    }
    return new KvEventPublisher(opts, pub, router);
  }

  /** The seq the next batch will carry. */
  get nextSeq(): bigint {
    return this.#seq;
  }

  get counts(): { sent: number; dropped: number } {
    return { sent: this.#sent, dropped: this.#dropped };
  }

  /**
   * Publishes one batch (one engine step's events); returns its seq and whether it went out, or
   * undefined when there was nothing to send.
   */
  publish(events: readonly KvEvent[], tsSeconds: number): { seq: bigint; dropped: boolean } | undefined {
    if (this.#closed || events.length === 0) return undefined;
    const seq = this.#seq++;
    const payload = encodeEventBatch(tsSeconds, events, this.#opts.rank, this.#opts.encoding);
    this.#buffer.push({ seq, payload });
    if (this.#buffer.length > this.#opts.bufferSteps)
      this.#buffer.splice(0, this.#buffer.length - this.#opts.bufferSteps);
    const faults = this.#opts.faults;
    if (faults.shouldDropEventBatch()) {
      this.#dropped++;
      return { seq, dropped: true };
    }
    const frames = [this.#topic, encodeSeq(seq), Buffer.from(payload)];
    if (this.#held !== undefined) {
      const held = this.#held;
      this.#clearHeld();
      this.#send(frames);
      this.#send(held);
    } else if (faults.settings.reorderEvents) {
      this.#held = frames;
      this.#heldTimer = setTimeout(() => this.#flushHeld(), REORDER_FLUSH_MS);
      this.#heldTimer.unref();
    } else {
      this.#send(frames);
    }
    return { seq, dropped: false };
  }

  /**
   * Sends `count` garbage messages: random sequence numbers, each an
   * AllBlocksCleared batch (a router that applied one would wipe this
   * worker). Not buffered for replay: the engine never published them.
   * Yields between chunks so the engine keeps serving meanwhile.
   */
  async sendGarbage(count: number): Promise<void> {
    const payload = Buffer.from(encodeEventBatch(0, [{ type: 'cleared' }], this.#opts.rank, this.#opts.encoding));
    for (let i = 0; i < count && !this.#closed; i++) {
      this.#send([this.#topic, encodeSeq(this.#opts.faults.randomSeq()), payload]);
      if (i % 1000 === 999) {
        await this.#sendChain;
        await new Promise((r) => setImmediate(r));
      }
    }
    await this.#sendChain;
  }

  /** Starts the sequence again at 0 and forgets the replay buffer, as a restarted engine would. */
  restartSequence(): void {
    this.#flushHeld();
    this.#seq = 0n;
    this.#buffer = [];
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#clearHeld();
    await this.#sendChain;
    this.#pub.close();
    this.#router?.close();
  }

  #flushHeld(): void {
    const held = this.#held;
    this.#clearHeld();
    if (held !== undefined) this.#send(held);
  }

  #clearHeld(): void {
    if (this.#heldTimer !== undefined) clearTimeout(this.#heldTimer);
    this.#heldTimer = undefined;
    this.#held = undefined;
  }

  // zeromq sockets allow one pending send at a time: chain them.
  #send(frames: Buffer[]): void {
    this.#sent++;
    this.#sendChain = this.#sendChain
      .then(() => (this.#closed ? undefined : this.#pub.send(frames)))
      .catch(() => undefined);
  }

  async #serveReplay(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        const [identity, , start] = frames;
        if (identity === undefined) continue;
        let from: bigint | undefined;
        if (start !== undefined && start.length === 8) from = start.readBigUInt64BE(0);
        if (from !== undefined) {
          for (const b of this.#buffer.slice()) {
            if (b.seq >= from) await router.send([identity, Buffer.alloc(0), encodeSeq(b.seq), Buffer.from(b.payload)]);
          }
        }
        await router.send([identity, Buffer.alloc(0), encodeSeq(REPLAY_END_SEQ), Buffer.alloc(0)]);
      }
    } catch {
      // closed: the loop ends with the socket
    }
  }
}
