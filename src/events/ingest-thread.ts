/**
 * The work of one KV-event ingestion thread (its entry is workers/kv-ingest.ts):
 * a ZMQ SUB socket per stream it was given, each message's frames split, its
 * msgpack decoded and its stored blocks' tokens hashed (this thread's own
 * WebAssembly module; with the cache salt it infers, batch-hasher.ts), and
 * the batches of all its streams packed into one buffer (batch-codec.ts)
 * posted to the main thread once per event-loop turn.
 *
 * The thread judges nothing: sequence numbers, gaps, replay, restarts and
 * application stay with each stream's `KvEventStream` on the main thread, fed
 * in the order the socket received. A message that does not split or decode
 * is posted raw, and the stream handles it exactly as it handles one from its
 * own socket (the same decode error, the same seq bookkeeping).
 */
import { Subscriber } from 'zeromq';
import './zmq-sockets.js';
import { BatchPacker, type PackedBatches } from './batch-codec.js';
import { BatchHasher } from './batch-hasher.js';
import { watchConnection, type ConnectionChange } from './connection-watch.js';
import { decodeKvEventBatch, parseEventFrames, type DecodeOptions } from './decode.js';

/** What the main thread asks of an ingestion thread. */
export type IngestRequest =
  | {
      readonly op: 'add';
      readonly id: number;
      readonly endpoint: string;
      readonly topic: string;
      readonly receiveHighWaterMark: number;
      readonly maxMessageBytes: number;
      /** The model reads Eagle bigram events (decode option). */
      readonly eagle: boolean;
      /** Msgpack elements a batch may hold (decode option; `kv_events.max_batch_elements`). */
      readonly maxBatchElements: number;
    }
  | { readonly op: 'remove'; readonly id: number }
  /** Close every socket and end (ingest-thread-runtime.ts): the pool's release, before any `terminate()`. */
  | { readonly op: 'stop' };

/** What an ingestion thread tells the main thread. */
export type IngestReport =
  | { readonly op: 'added'; readonly id: number; readonly error?: string | undefined }
  | { readonly op: 'removed'; readonly id: number }
  | { readonly op: 'ended'; readonly id: number; readonly error: string }
  | { readonly op: 'connection'; readonly id: number; readonly change: ConnectionChange }
  /**
   * The thread failed (an uncaught exception or an unhandled rejection, caught by its runtime's handlers): it
   * closes its sockets, says `stopped` and ends; it takes no request and posts nothing else from now on.
   */
  | {
      readonly op: 'failed';
      readonly reason: 'uncaught_exception' | 'unhandled_rejection';
      readonly error: string;
      readonly stack?: string | undefined;
    }
  /** Every socket of the thread is closed and every receive loop and connection watch has ended: it may end. */
  | { readonly op: 'stopped' }
  | {
      readonly op: 'batches';
      readonly packed: PackedBatches;
      /** Messages that did not split into a decodable batch, for the stream to handle as its own socket's. */
      readonly raw: readonly { readonly id: number; readonly frames: Uint8Array[] }[];
    };

/** Messages received from one socket before the thread yields a turn (and posts what it packed). */
const RECEIVE_PER_TURN = 256;
/** Packed bytes after which the thread posts without waiting for the end of the turn. */
const POST_AFTER_BYTES = 1 << 20;

interface ThreadStream {
  readonly sub: Subscriber;
  readonly decode: DecodeOptions;
  loop: Promise<void>;
  /** The connection watch, ended once the socket closed (connection-watch.ts). */
  readonly watched: Promise<void>;
}

export class IngestThread {
  readonly #send: (report: IngestReport, transfer?: ArrayBuffer[]) => void;
  readonly #streams = new Map<number, ThreadStream>();
  /** Sockets closed whose receive loop or connection watch has not ended yet (`stop` waits for them). */
  readonly #closing = new Set<Promise<void>>();
  readonly #packer = new BatchPacker();
  readonly #hasher = new BatchHasher();
  #raw: { id: number; frames: Uint8Array[] }[] = [];
  #postDue = false;
  #stopping = false;

  /** @param post how a report reaches the main thread (the port's `postMessage`). */
  constructor(post: (report: IngestReport, transfer?: ArrayBuffer[]) => void) {
    this.#send = post;
  }

  /** Subscribes or unsubscribes a stream; nothing once `stop` was called (the thread opens no socket after it). */
  handle(req: IngestRequest): void {
    if (this.#stopping) return;
    if (req.op === 'add') this.#add(req);
    else if (req.op === 'remove') void this.#remove(req.id);
  }

  /**
   * Closes every socket and resolves once every receive loop and connection watch has ended, those of sockets
   * closed earlier too: the thread may end then. zeromq aborts the whole process when a thread ends with a
   * socket open and receiving (zeromq.js issue #411), which a thread that fails or is terminated would.
   * From the call on, the thread posts nothing (what it received and had not posted is dropped: its streams
   * see a gap and replay it) and takes no request. Never rejects; idempotent.
   */
  async stop(): Promise<void> {
    this.#stopping = true;
    for (const [id, stream] of this.#streams) {
      this.#streams.delete(id);
      this.#close(stream);
    }
    while (this.#closing.size > 0) await Promise.allSettled([...this.#closing]);
  }

  /** Closes the stream's socket; `#closing` holds its end (loop and watch) until it comes. */
  #close(stream: ThreadStream): Promise<void> {
    try {
      if (!stream.sub.closed) stream.sub.close();
    } catch {
      // closed meanwhile: its loop and watch end all the same
    }
    return this.#ending(Promise.allSettled([stream.loop, stream.watched]).then(() => undefined));
  }

  #ending(end: Promise<void>): Promise<void> {
    this.#closing.add(end);
    void end.then(() => this.#closing.delete(end));
    return end;
  }

  /** Every report goes through here: none once the thread stops. */
  #post(report: IngestReport, transfer?: ArrayBuffer[]): void {
    if (!this.#stopping) this.#send(report, transfer);
  }

  #add(req: Extract<IngestRequest, { op: 'add' }>): void {
    let sub: Subscriber | undefined;
    let watched = Promise.resolve();
    try {
      // A socket refused (no room for it: the process's open-file limit) is an answer, not the thread's death.
      sub = new Subscriber({
        linger: 0,
        receiveHighWaterMark: req.receiveHighWaterMark,
        maxMessageSize: req.maxMessageBytes,
      });
      watched = watchConnection(sub, req.endpoint, (change) => this.#post({ op: 'connection', id: req.id, change }));
      sub.connect(req.endpoint);
    } catch (err) {
      sub?.close();
      void this.#ending(watched).then(() =>
        this.#post({ op: 'added', id: req.id, error: err instanceof Error ? err.message : String(err) }),
      );
      return;
    }
    sub.subscribe(req.topic);
    const decode = { eagle: req.eagle, maxElements: req.maxBatchElements };
    const stream: ThreadStream = { sub, decode, loop: Promise.resolve(), watched };
    this.#streams.set(req.id, stream);
    stream.loop = this.#receive(req.id, stream);
    this.#post({ op: 'added', id: req.id });
  }

  async #remove(id: number): Promise<void> {
    const stream = this.#streams.get(id);
    this.#streams.delete(id);
    if (stream !== undefined) await this.#close(stream);
    this.#hasher.forget(id);
    // What it received before is posted first: the main thread forgets the stream at 'removed'.
    this.#flush();
    this.#post({ op: 'removed', id });
  }

  async #receive(id: number, stream: ThreadStream): Promise<void> {
    let received = 0;
    try {
      for await (const frames of stream.sub) {
        this.#take(id, stream, frames);
        if (++received >= RECEIVE_PER_TURN) {
          received = 0;
          await new Promise((r) => setImmediate(r));
        }
      }
    } catch (err) {
      if (stream.sub.closed) return;
      this.#post({ op: 'ended', id, error: err instanceof Error ? err.message : String(err) });
      // Nothing reads the socket any more: closed, so ZMQ neither reconnects it nor queues what the engine sends
      // (the stream stays until the main thread removes it, which then waits for its monitor's end).
      stream.sub.close();
    }
  }

  /**
   * One message: packed when it decodes, posted raw when it does not, or when decoding or packing it threw
   * (the stream then reads it itself, and reports what it meets). Whatever one message holds, it never ends
   * the receive loop: that would end the slot's subscription for good over one frame.
   */
  #take(id: number, stream: ThreadStream, frames: Uint8Array[]): void {
    let packed: boolean;
    try {
      packed = this.#pack(id, stream, frames);
    } catch {
      packed = false;
    }
    if (!packed) {
      // Posted behind everything packed before it, so every stream sees its messages in the order received.
      if (this.#packer.batches > 0) this.#flush();
      this.#raw.push({ id, frames });
    }
    if (this.#packer.bytes >= POST_AFTER_BYTES) this.#flush();
    else this.#schedule();
  }

  /** Decodes, hashes and packs a message; false (nothing packed) when it does not split or decode. */
  #pack(id: number, stream: ThreadStream, frames: Uint8Array[]): boolean {
    const split = parseEventFrames(frames);
    const decoded = split.ok ? decodeKvEventBatch(split.value.payload, stream.decode) : undefined;
    if (!split.ok || decoded === undefined || !decoded.ok) return false;
    const batch = decoded.batch;
    const { locals, salts } = this.#hasher.hash(id, batch);
    if (this.#raw.length > 0) this.#flush();
    if (!this.#packer.add(id, split.value.seq, batch, locals, salts)) {
      this.#flush();
      this.#packer.add(id, split.value.seq, batch, locals, salts);
    }
    return true;
  }

  #schedule(): void {
    if (this.#postDue) return;
    this.#postDue = true;
    setImmediate(() => {
      this.#postDue = false;
      this.#flush();
    });
  }

  /**
   * Posts what was packed and received raw, in one message (the main thread hands the packed batches
   * on first; `#take` posts before it switches between the two, so the order received is kept).
   */
  #flush(): void {
    if (this.#packer.batches === 0 && this.#raw.length === 0) return;
    const packed = this.#packer.take();
    const raw = this.#raw;
    this.#raw = [];
    this.#post({ op: 'batches', packed, raw }, [packed.buffer]);
  }
}
