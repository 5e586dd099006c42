/**
 * The result types of a dispatch: an SSE stream read incrementally, or a
 * buffered JSON response.
 *
 * `EngineEventStream` is a single-consumer async iterable. Chunks are parsed
 * as they arrive and queued as events; when `highWaterMark` events wait
 * unread, the upstream socket is paused (TCP backpressure reaches the engine)
 * and resumed once the consumer has drained half of them, so a slow client
 * never makes kvgate buffer a whole generation. Ordering on failure: events
 * already received are delivered first, then the iterator throws the typed
 * error (so a gateway can forward every token it got and then end the client
 * stream with an error event). A body that ends inside an event (an
 * unterminated event before `[DONE]`) is such a failure too, not an end: the
 * partial event is dropped and the iterator throws KVG_ERR_ENGINE_STREAM_BROKEN
 * (the handler decides, see `kCutEvent`). A client abort throws at once. Leaving the
 * loop early (`break`, `return()`) or calling `cancel()` aborts the upstream
 * request and closes its socket. A stream must be consumed to its end or
 * cancelled: a paused, abandoned stream holds its socket (the body timeout
 * does not run while kvgate itself is not reading).
 *
 * `batches()` reads the same events a batch at a time: every event parsed
 * from one upstream read in one step (see common's `Batched`); taking a batch
 * empties the queue, so a paused socket resumes then. An event's JSON is
 * parsed only when read (stream-event.ts).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Batched } from '../common/index.js';
import type { KvgateError } from '../errors/index.js';
import { SseParser } from './sse-parser.js';
import { ChunkShape, StreamEvent } from './stream-event.js';

/**
 * Per-request timings, in milliseconds since `startedAt` (a `performance.now()`
 * value). Filled in as the request progresses; undefined until reached.
 */
export interface DispatchTimings {
  readonly startedAt: number;
  /** Until the request was handed to a connected socket: pool queueing plus the TCP connect when a new connection was opened. */
  connectMs: number | undefined;
  /** Until the response status line and headers arrived. */
  headersMs: number | undefined;
  /** Until the first response body byte arrived. */
  firstByteMs: number | undefined;
  /** Streams only: until the first complete SSE event was parsed. */
  firstEventMs: number | undefined;
  /** Until the response body ended (cleanly or not). */
  endMs: number | undefined;
}

/** One SSE event from an engine. */
export interface EngineEvent {
  /** Exact bytes of the event block as the engine sent them (for zero-copy passthrough to the client). */
  readonly raw: Buffer;
  /** The event's data (data lines joined by "\n"). */
  readonly data: string;
  /** The `event:` field; undefined for ordinary message events. */
  readonly event: string | undefined;
  readonly id: string | undefined;
  /** `JSON.parse(data)`; undefined for `[DONE]` and for data that is not JSON. Parsed on first access for a stream's events. */
  readonly json: unknown;
  /** True for the OpenAI end-of-stream sentinel `data: [DONE]`. */
  readonly done: boolean;
}

/** A buffered non-streaming response (2xx). */
export interface EngineJsonResponse {
  readonly kind: 'json';
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** The body bytes as received, for passthrough. */
  readonly body: Buffer;
  /** The parsed body. */
  readonly json: unknown;
  readonly timings: DispatchTimings;
}

export type EngineResponse = EngineEventStream | EngineJsonResponse;

/** Hooks from the stream back into the request that feeds it. */
export interface StreamControl {
  pause(): void;
  resume(): void;
  /** Aborts the upstream request (closing its socket) unless it already ended. */
  cancel(): void;
}

export interface StreamCounters {
  events: number;
  bytes: number;
  /** Bytes of an unterminated final event that SSE semantics discard. */
  discardedTailBytes: number;
  /** Whether `data: [DONE]` was seen. */
  sawDone: boolean;
}

/** Internal entry points used by the dispatcher; not part of the public surface. */
export const kFeed = Symbol('kvgate.engines.feed');
export const kEnd = Symbol('kvgate.engines.end');
export const kCutEvent = Symbol('kvgate.engines.cut-event');
export const kFail = Symbol('kvgate.engines.fail');

type Waiter = { resolve: (r: IteratorResult<EngineEvent>) => void; reject: (err: unknown) => void };
type BatchWaiter = { resolve: (r: IteratorResult<EngineEvent[]>) => void; reject: (err: unknown) => void };

export class EngineEventStream implements Batched<EngineEvent> {
  readonly kind = 'stream' as const;
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly timings: DispatchTimings;
  readonly counters: StreamCounters = { events: 0, bytes: 0, discardedTailBytes: 0, sawDone: false };

  readonly #control: StreamControl;
  readonly #parser: SseParser;
  readonly #highWaterMark: number;
  #queue: EngineEvent[] = [];
  #head = 0;
  #waiter: Waiter | undefined;
  #batchWaiter: BatchWaiter | undefined;
  /** The shape of this stream's plain chunks (stream-event.ts). */
  readonly #shape = new ChunkShape();
  #error: KvgateError | undefined;
  #errorDelivered = false;
  #ended = false;
  #cancelled = false;
  #paused = false;
  #iterated = false;

  constructor(
    init: {
      status: number;
      headers: IncomingHttpHeaders;
      timings: DispatchTimings;
      highWaterMark: number;
      maxEventBytes: number;
    },
    control: StreamControl,
  ) {
    this.status = init.status;
    this.headers = init.headers;
    this.timings = init.timings;
    this.#highWaterMark = init.highWaterMark;
    this.#control = control;
    this.#parser = new SseParser((raw, data, event, id) => this.#onEvent(raw, data, event, id), {
      maxEventBytes: init.maxEventBytes,
    });
  }

  /** True once the stream will yield nothing more (ended, failed or cancelled, and drained). */
  get finished(): boolean {
    return (this.#ended || this.#cancelled || this.#error !== undefined) && this.#head >= this.#queue.length;
  }

  /** Whether the upstream response ended cleanly. */
  get completed(): boolean {
    return this.#ended;
  }

  /** Stops reading and aborts the upstream request; the iterator then reports done. Idempotent. */
  cancel(): void {
    if (this.#cancelled) return;
    this.#cancelled = true;
    this.#queue = [];
    this.#head = 0;
    if (!this.#ended && this.#error === undefined) this.#control.cancel();
    this.#settleWaiter({ value: undefined, done: true });
    this.#wakeBatch();
  }

  [Symbol.asyncIterator](): AsyncIterator<EngineEvent> {
    return this.#iterate(() => this.#next());
  }

  /** The events in batches: each batch every event received and not yet taken (see the file comment). */
  batches(): AsyncIterator<EngineEvent[]> {
    return this.#iterate(() => this.#nextBatch());
  }

  /** The stream's one reader (claimed), taking items with `next`; leaving early cancels the stream. */
  #iterate<T>(next: () => Promise<IteratorResult<T>>): AsyncIterator<T> {
    this.#claim();
    return {
      next,
      return: () => {
        this.cancel();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }

  #claim(): void {
    if (this.#iterated) throw new TypeError('EngineEventStream can be iterated once');
    this.#iterated = true;
  }

  /** @internal Parses one body chunk. Throws the parser's typed error on a protocol violation. */
  [kFeed](chunk: Buffer): void {
    if (this.#cancelled) return;
    this.counters.bytes += chunk.length;
    try {
      this.#parser.push(chunk);
    } finally {
      // The events this read completed go to a batch reader together (also those before a parse error).
      this.#wakeBatch();
    }
    if (!this.#paused && this.#queue.length - this.#head >= this.#highWaterMark) {
      this.#paused = true;
      this.#control.pause();
    }
  }

  /**
   * @internal The body ended: the parser's unterminated tail is discarded (SSE semantics) and counted. Returns
   * its size when it was part of an event and no `[DONE]` came before it: the engine's stream was cut inside an
   * event, and the caller fails the stream (kFail) instead of ending it; 0 otherwise.
   */
  [kCutEvent](): number {
    const partial = !this.counters.sawDone && this.#parser.holdsPartialEvent;
    this.counters.discardedTailBytes = this.#parser.end();
    return partial ? this.counters.discardedTailBytes : 0;
  }

  /** @internal The upstream response ended cleanly (after kCutEvent found no event cut short). */
  [kEnd](): void {
    this.#ended = true;
    // The request is over: never resume a socket that may already carry another request.
    this.#paused = false;
    if (this.#head >= this.#queue.length) this.#settleWaiter({ value: undefined, done: true });
    this.#wakeBatch();
  }

  /**
   * @internal The request failed. With `immediate` (client abort) queued events are dropped;
   * otherwise they are delivered before the error.
   */
  [kFail](err: KvgateError, immediate: boolean): void {
    if (this.#ended || this.#cancelled || this.#error !== undefined) return;
    this.#error = err;
    this.#paused = false;
    if (immediate) {
      this.#queue = [];
      this.#head = 0;
    }
    if (this.#head >= this.#queue.length && this.#waiter !== undefined) {
      const waiter = this.#waiter;
      this.#waiter = undefined;
      this.#errorDelivered = true;
      waiter.reject(err);
    }
    this.#wakeBatch();
  }

  #onEvent(raw: Buffer, data: string, event: string | undefined, id: string | undefined): void {
    const ev = new StreamEvent(raw, data, event, id, this.#shape);
    if (ev.done) this.counters.sawDone = true;
    this.counters.events++;
    if (this.timings.firstEventMs === undefined) this.timings.firstEventMs = performance.now() - this.timings.startedAt;
    if (this.#waiter !== undefined) {
      const waiter = this.#waiter;
      this.#waiter = undefined;
      waiter.resolve({ value: ev, done: false });
      return;
    }
    this.#queue.push(ev);
  }

  #next(): Promise<IteratorResult<EngineEvent>> {
    if (this.#head < this.#queue.length) {
      const ev = this.#queue[this.#head]!;
      this.#queue[this.#head++] = undefined as unknown as EngineEvent;
      if (this.#head === this.#queue.length) {
        this.#queue = [];
        this.#head = 0;
      }
      if (this.#paused && this.#queue.length - this.#head <= this.#highWaterMark >> 1) {
        this.#paused = false;
        this.#control.resume();
      }
      return Promise.resolve({ value: ev, done: false });
    }
    if (this.#error !== undefined) {
      if (this.#errorDelivered) return Promise.resolve({ value: undefined, done: true });
      this.#errorDelivered = true;
      return Promise.reject(this.#error);
    }
    if (this.#ended || this.#cancelled) return Promise.resolve({ value: undefined, done: true });
    if (this.#waiter !== undefined)
      return Promise.reject(new TypeError('EngineEventStream: next() called while a previous next() is pending'));
    return new Promise((resolve, reject) => {
      this.#waiter = { resolve, reject };
    });
  }

  #nextBatch(): Promise<IteratorResult<EngineEvent[]>> {
    if (this.#batchWaiter !== undefined)
      return Promise.reject(new TypeError('EngineEventStream: next() called while a previous next() is pending'));
    return new Promise((resolve, reject) => {
      this.#batchWaiter = { resolve, reject };
      this.#wakeBatch();
    });
  }

  /** Settles a waiting batch reader when there is something to hand it: events, then the error, then the end. */
  #wakeBatch(): void {
    const waiter = this.#batchWaiter;
    if (waiter === undefined) return;
    if (this.#head < this.#queue.length) {
      this.#batchWaiter = undefined;
      const batch = this.#head === 0 ? this.#queue : this.#queue.slice(this.#head);
      this.#queue = [];
      this.#head = 0;
      if (this.#paused) {
        this.#paused = false;
        this.#control.resume();
      }
      waiter.resolve({ value: batch, done: false });
    } else if (this.#error !== undefined) {
      this.#batchWaiter = undefined;
      if (this.#errorDelivered) {
        waiter.resolve({ value: undefined, done: true });
      } else {
        this.#errorDelivered = true;
        waiter.reject(this.#error);
      }
    } else if (this.#ended || this.#cancelled) {
      this.#batchWaiter = undefined;
      waiter.resolve({ value: undefined, done: true });
    }
  }

  #settleWaiter(result: IteratorResult<EngineEvent>): void {
    const waiter = this.#waiter;
    if (waiter === undefined) return;
    this.#waiter = undefined;
    waiter.resolve(result);
  }
}
