/**
 * One dispatch's undici handler: tracks how far the request got (for error
 * mapping, see engine-errors.ts), feeds body chunks to the SSE stream or the
 * JSON buffer, and wires the client's AbortSignal to the request.
 *
 * Contract: the dispatch promise settles exactly once, at the response
 * headers for a stream or at the end of the body for JSON; after that, a
 * failure reaches the stream (never the settled promise).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from 'undici';
import type { CancelSignal } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import {
  EngineHttpError,
  badResponseError,
  clientAbortedError,
  contentEncodingError,
  contentTypeError,
  cutEventError,
  transportError,
  type DispatchPhase,
  type ErrorContext,
} from './engine-errors.js';
import {
  EngineEventStream,
  kCutEvent,
  kEnd,
  kFail,
  kFeed,
  type DispatchTimings,
  type EngineResponse,
} from './engine-stream.js';
import { LegTimers, expiredIn } from './leg-timers.js';

/** What one dispatch hands its handler. */
export interface ResponseHandlerOptions {
  ctx: ErrorContext;
  stream: boolean;
  startedAt: number;
  signal: CancelSignal | undefined;
  onDispatched: (() => void) | undefined;
  maxResponseBytes: number;
  maxErrorBodyBytes: number;
  maxEventBytes: number;
  highWaterMark: number;
  /** The worker pool's bound on connections (what a request that waited for one is told). */
  connections: number;
  /** Dispatch to first output (first SSE event, or first JSON body byte); undefined or 0: none. */
  firstByteTimeoutMs: number | undefined;
  /** Streams: longest silence between two SSE events while kvgate reads; undefined or 0: none. */
  streamIdleTimeoutMs: number | undefined;
  resolve: (r: EngineResponse) => void;
  reject: (err: unknown) => void;
}

type Mode = 'pending' | 'stream' | 'json' | 'error';

/**
 * One request's undici handler (new handler API). Tracks the phase for error
 * mapping, feeds body chunks to the stream or the JSON buffer, and wires the
 * client's AbortSignal to the request's controller.
 */
export class ResponseHandler implements Dispatcher.DispatchHandler {
  readonly #init: ResponseHandlerOptions;
  readonly #timings: DispatchTimings;
  #phase: DispatchPhase = 'queued';
  #mode: Mode = 'pending';
  #controller: Dispatcher.DispatchController | undefined;
  /** The promise was resolved or rejected. */
  #settled = false;
  /** Nothing more to do: ended, failed, aborted or cancelled. */
  #finished = false;
  #abortError: KvgateError | undefined;
  #stream: EngineEventStream | undefined;
  #status = 0;
  #headers: IncomingHttpHeaders = {};
  #chunks: Buffer[] = [];
  #bytes = 0;
  #truncated = false;
  readonly #onAbort: (() => void) | undefined;
  readonly #timers: LegTimers;

  constructor(init: ResponseHandlerOptions) {
    this.#init = init;
    this.#timers = new LegTimers(
      init.ctx,
      init.firstByteTimeoutMs,
      init.stream ? init.streamIdleTimeoutMs : undefined,
      (err) => this.#fail(expiredIn(err, this.#phase, init.connections), true),
    );
    this.#timings = {
      startedAt: init.startedAt,
      connectMs: undefined,
      headersMs: undefined,
      firstByteMs: undefined,
      firstEventMs: undefined,
      endMs: undefined,
    };
    if (init.signal !== undefined) {
      const signal = init.signal;
      this.#onAbort = () => this.#abort(signal.reason);
      signal.addEventListener('abort', this.#onAbort, { once: true });
    }
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#finished) {
      // Aborted (or cancelled) while waiting for a socket: never write the request.
      controller.abort(this.#abortError ?? clientAbortedError(this.#init.ctx, undefined));
      return;
    }
    this.#phase = 'sent';
    this.#timings.connectMs = performance.now() - this.#timings.startedAt;
    this.#init.onDispatched?.();
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number, headers: IncomingHttpHeaders): void {
    if (this.#finished || statusCode < 200) return; // 1xx: informational, the real response follows
    this.#phase = 'body';
    this.#timings.headersMs = performance.now() - this.#timings.startedAt;
    this.#status = statusCode;
    this.#headers = headers;
    const ctx = this.#init.ctx;
    if (statusCode >= 400) {
      // An error answer is the engine's answer: its body follows at once (bounded by the body timeout).
      this.#timers.stop();
      this.#mode = 'error';
      return;
    }
    if (statusCode >= 300) {
      // What the way to this worker answered (an ingress sending http to https): nothing read, nothing reached the
      // client, another worker may answer (migratable, as a wrong content type).
      this.#fail(
        badResponseError(ctx, 'redirect', `unexpected redirect ${statusCode}`, {
          upstreamStatus: statusCode,
          location: headers['location'],
          migratable: true,
        }),
        true,
      );
      return;
    }
    // Checked before any body byte is read or any event reaches the client (an HTML page is not an empty stream).
    const wrongType =
      contentTypeError(ctx, this.#init.stream, headers['content-type']) ??
      contentEncodingError(ctx, headers['content-encoding']);
    if (wrongType !== undefined) {
      this.#fail(wrongType, true);
      return;
    }
    if (!this.#init.stream) {
      this.#mode = 'json';
      return;
    }
    this.#mode = 'stream';
    this.#stream = new EngineEventStream(
      {
        status: statusCode,
        headers,
        timings: this.#timings,
        highWaterMark: this.#init.highWaterMark,
        maxEventBytes: this.#init.maxEventBytes,
      },
      {
        pause: () => {
          this.#timers.pause();
          controller.pause();
        },
        resume: () => {
          controller.resume();
          this.#timers.resume();
        },
        cancel: () => this.#cancel(),
      },
    );
    this.#settled = true;
    this.#init.resolve(this.#stream);
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#finished) return;
    if (this.#timings.firstByteMs === undefined)
      this.#timings.firstByteMs = performance.now() - this.#timings.startedAt;
    switch (this.#mode) {
      case 'stream':
        try {
          const events = this.#stream!.counters.events;
          this.#stream![kFeed](chunk);
          if (this.#stream!.counters.events > events) this.#timers.progress();
        } catch (err) {
          this.#fail(err instanceof KvgateError ? err : transportError(err, 'body', this.#init.ctx), true);
        }
        return;
      case 'json':
        this.#timers.progress();
        this.#bytes += chunk.length;
        if (this.#bytes > this.#init.maxResponseBytes) {
          this.#fail(
            badResponseError(this.#init.ctx, 'too_large', `response body exceeds ${this.#init.maxResponseBytes} bytes`),
            true,
          );
          return;
        }
        this.#chunks.push(chunk);
        return;
      case 'error': {
        const room = this.#init.maxErrorBodyBytes - this.#bytes;
        if (chunk.length > room) {
          // Keep what fits and stop reading: an oversized error body is not worth the socket.
          this.#chunks.push(chunk.subarray(0, room));
          this.#bytes += room;
          this.#truncated = true;
          this.#failHttp();
          return;
        }
        this.#chunks.push(chunk);
        this.#bytes += chunk.length;
        return;
      }
      default:
        return;
    }
  }

  onResponseEnd(): void {
    if (this.#finished) return;
    this.#timings.endMs = performance.now() - this.#timings.startedAt;
    const ctx = this.#init.ctx;
    switch (this.#mode) {
      case 'stream': {
        // A body cut inside an event is a broken stream, not an end: the events before it, then the error.
        const cut = this.#stream![kCutEvent]();
        if (cut > 0) {
          this.#fail(cutEventError(ctx, cut), false);
          return;
        }
        this.#finish();
        this.#stream![kEnd]();
        return;
      }
      case 'json': {
        // A small answer comes in one read: kept as it is (undici hands each read over, so it is not reused).
        const body = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#bytes);
        this.#chunks = [];
        let json: unknown;
        try {
          json = JSON.parse(body.toString('utf8'));
        } catch {
          this.#fail(
            badResponseError(ctx, 'not_json', 'response body is not JSON', {
              bodyPrefix: body.toString('utf8', 0, 200),
            }),
            false,
          );
          return;
        }
        this.#finish();
        this.#settled = true;
        this.#init.resolve({
          kind: 'json',
          status: this.#status,
          headers: this.#headers,
          body,
          json,
          timings: this.#timings,
        });
        return;
      }
      case 'error':
        this.#failHttp();
        return;
      default:
        // An end without a final response (only 1xx seen) is a protocol violation.
        this.#fail(badResponseError(ctx, 'no_final_status', 'response ended without a final status'), false);
    }
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, err: Error): void {
    if (this.#finished) return;
    this.#fail(transportError(err, this.#phase, this.#init.ctx), false);
  }

  #failHttp(): void {
    const body = Buffer.concat(this.#chunks, this.#bytes);
    this.#chunks = [];
    this.#fail(
      new EngineHttpError(this.#init.ctx, this.#status, this.#headers, body, this.#truncated),
      this.#truncated,
    );
  }

  /** Client abort: fail now (the stream drops queued events) and abort the upstream request. */
  #abort(reason: unknown): void {
    if (this.#finished) return;
    const err = clientAbortedError(this.#init.ctx, reason);
    this.#abortError = err;
    this.#finish();
    this.#controller?.abort(err);
    if (!this.#settled) {
      this.#settled = true;
      this.#init.reject(err);
    } else {
      this.#stream?.[kFail](err, true);
    }
  }

  /** The consumer stopped reading the stream. */
  #cancel(): void {
    if (this.#finished) return;
    this.#finish();
    this.#controller?.abort(clientAbortedError(this.#init.ctx, 'stream cancelled by its consumer'));
  }

  /** Ends the request with `err`; `abortUpstream` closes the socket when the response is still being received. */
  #fail(err: KvgateError, abortUpstream: boolean): void {
    if (this.#finished) return;
    this.#finish();
    if (abortUpstream) this.#controller?.abort(err);
    if (!this.#settled) {
      this.#settled = true;
      this.#init.reject(err);
    } else {
      this.#stream?.[kFail](err, false);
    }
  }

  #finish(): void {
    this.#finished = true;
    this.#timers.stop();
    this.#timings.endMs ??= performance.now() - this.#timings.startedAt;
    if (this.#onAbort !== undefined) this.#init.signal!.removeEventListener('abort', this.#onAbort);
  }
}
