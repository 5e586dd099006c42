/**
 * A test double of the push router's one external boundary, the HTTP engine
 * transport (`EngineClient.dispatch`): each dispatch is recorded with what the
 * router sent and waits until the test answers it, with a real
 * `EngineEventStream` the test feeds SSE bytes into, a buffered JSON answer, or
 * a failure. It keeps the real client's contract where the router relies on
 * it: an aborted signal fails a pending dispatch and an open stream at once
 * with KVG_ERR_CLIENT_ABORTED (queued events dropped); leaving a stream early
 * cancels its upstream; a body cut inside an event fails the stream with
 * KVG_ERR_ENGINE_STREAM_BROKEN (`truncated_event`).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { CancelSignal } from '../../../src/common/index.js';
import {
  EngineHttpError,
  type DispatchOptions,
  type EngineClient,
  type EngineResponse,
} from '../../../src/engines/index.js';
import { clientAbortedError, cutEventError, type ErrorContext } from '../../../src/engines/engine-errors.js';
import { EngineEventStream, kCutEvent, kEnd, kFail, kFeed } from '../../../src/engines/engine-stream.js';
import { KvgateError } from '../../../src/errors/index.js';

type JsonObject = Record<string, unknown>;

/** SSE bytes of the given data payloads: an object is sent as JSON, a string as is (`[DONE]`). */
function sse(...data: (JsonObject | string)[]): Buffer {
  return Buffer.from(data.map((d) => `data: ${typeof d === 'string' ? d : JSON.stringify(d)}\n\n`).join(''));
}

/**
 * A vLLM `/v1/completions` stream chunk: `text` with its `token_ids` when given (the engine was asked for them),
 * the prompt's ids on the first chunk when given, `finish_reason` when it is the last.
 */
export function completionChunk(
  text: string,
  opts: { tokenIds?: number[]; promptIds?: number[]; finish?: string } = {},
): JsonObject {
  const choice: JsonObject = { index: 0, text, logprobs: null, finish_reason: opts.finish ?? null };
  if (opts.tokenIds !== undefined) choice['token_ids'] = opts.tokenIds;
  if (opts.promptIds !== undefined) choice['prompt_token_ids'] = opts.promptIds;
  return { id: 'cmpl-1', object: 'text_completion', created: 1, model: 'mock-model', choices: [choice] };
}

/** The usage-only chunk an engine sends last when asked for `stream_options.include_usage`. */
export function usageChunk(prompt: number, completion: number, cached?: number): JsonObject {
  const usage: JsonObject = { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
  if (cached !== undefined) usage['prompt_tokens_details'] = { cached_tokens: cached };
  return { id: 'cmpl-1', object: 'text_completion', created: 1, model: 'mock-model', choices: [], usage };
}

/** One streamed answer the test drives: bytes in, then an end or a failure. */
export class FakeStream {
  readonly stream: EngineEventStream;
  /** The router (or its guard) cancelled the upstream request. */
  cancelled = false;
  readonly #ctx: ErrorContext;

  constructor(ctx: ErrorContext) {
    this.#ctx = ctx;
    this.stream = new EngineEventStream(
      {
        status: 200,
        headers: { 'content-type': 'text/event-stream' },
        timings: {
          startedAt: 0,
          connectMs: 0,
          headersMs: 0,
          firstByteMs: undefined,
          firstEventMs: undefined,
          endMs: undefined,
        },
        highWaterMark: 64,
        maxEventBytes: 1 << 20,
      },
      { pause: () => undefined, resume: () => undefined, cancel: () => (this.cancelled = true) },
    );
  }

  /** One upstream read carrying these events. */
  send(...data: (JsonObject | string)[]): void {
    this.stream[kFeed](sse(...data));
  }

  /** Bytes as they came off the socket (a partial event, for instance). */
  sendRaw(text: string): void {
    this.stream[kFeed](Buffer.from(text));
  }

  /** The body ended: cleanly, or as a broken stream when it stopped inside an event (as the real client decides). */
  end(): void {
    const cut = this.stream[kCutEvent]();
    if (cut > 0) this.stream[kFail](cutEventError(this.#ctx, cut), false);
    else this.stream[kEnd]();
  }

  /** The connection failed mid-body: the events already received, then `err`. */
  fail(err: KvgateError): void {
    this.stream[kFail](err, false);
  }

  /** The client's signal fired: queued events are dropped and the reader gets `err` at once. */
  abort(err: KvgateError): void {
    this.stream[kFail](err, true);
  }
}

/** One dispatch the router made, waiting for the test's answer. */
export class Dispatch {
  readonly url: string;
  readonly path: string;
  readonly body: JsonObject | undefined;
  readonly options: DispatchOptions;
  /** The stream given by `answerStream`. */
  stream: FakeStream | undefined;
  #settled = false;
  readonly #resolve: (r: EngineResponse) => void;
  readonly #reject: (err: unknown) => void;

  constructor(
    url: string,
    path: string,
    body: JsonObject | undefined,
    options: DispatchOptions,
    settle: { resolve: (r: EngineResponse) => void; reject: (err: unknown) => void },
  ) {
    this.url = url;
    this.path = path;
    this.body = body;
    this.options = options;
    this.#resolve = settle.resolve;
    this.#reject = settle.reject;
    const signal = options.signal;
    if (signal === undefined) return;
    // The real client fails the dispatch, or the stream it resolved with, as soon as the client leaves.
    const onAbort = (): void => {
      const err = clientAbortedError(this.context, signal.reason);
      if (this.stream !== undefined) this.stream.abort(err);
      else this.fail(err);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  }

  get context(): ErrorContext {
    return { worker: this.url, path: this.path };
  }

  /** The body as the engine receives it: the client's fields with the router's laid over them. */
  get sentBody(): JsonObject {
    return { ...this.body, ...this.options.extraFields };
  }

  /** Answers 200 with an SSE stream the test then feeds. */
  answerStream(): FakeStream {
    this.#settle();
    this.stream = new FakeStream(this.context);
    this.#resolve(this.stream.stream);
    return this.stream;
  }

  /** Answers 200 with a buffered JSON body (a leg sent with `stream: false`). */
  answerJson(json: JsonObject): void {
    this.#settle();
    const body = Buffer.from(JSON.stringify(json));
    const headers: IncomingHttpHeaders = { 'content-type': 'application/json' };
    const timings = { startedAt: 0, connectMs: 0, headersMs: 0, firstByteMs: 0, firstEventMs: undefined, endMs: 0 };
    this.#resolve({ kind: 'json', status: 200, headers, body, json, timings });
  }

  /** Fails the dispatch before any answer: the error as the real client would raise it. */
  fail(err: unknown): void {
    this.#settle();
    this.#reject(err);
  }

  /** Answers with an HTTP error status (a 4xx refusal, a 5xx failure) and an OpenAI-style error body. */
  answerStatus(status: number, message: string): void {
    const body = Buffer.from(JSON.stringify({ error: { message, type: 'BadRequestError', code: status } }));
    this.fail(new EngineHttpError(this.context, status, { 'content-type': 'application/json' }, body, false));
  }

  /** Fails with the client's own error for a worker it could not connect to (nothing was sent). */
  unreachable(): void {
    this.fail(
      new KvgateError('KVG_ERR_ENGINE_UNREACHABLE', 'cannot connect to the engine (ECONNREFUSED)', {
        ...this.context,
        phase: 'queued',
        cause: 'ECONNREFUSED',
      }),
    );
  }

  #settle(): void {
    if (this.#settled) throw new Error(`dispatch to ${this.url} answered twice`);
    this.#settled = true;
  }
}

/** The engine transport double: every dispatch recorded, in order, until the test answers it. */
export class FakeEngine {
  readonly calls: Dispatch[] = [];
  readonly #waiting = new Map<number, (d: Dispatch) => void>();

  /**
   * The router's view: `EngineClient` is a class with private fields, so no other object has its type;
   * the router calls only `dispatch`, which this double implements with the client's contract.
   */
  get client(): EngineClient {
    const transport: Pick<EngineClient, 'dispatch'> = {
      dispatch: ((url: string, path: string, body: JsonObject | undefined, options: DispatchOptions = {}) =>
        this.#dispatch(url, path, body, options)) as EngineClient['dispatch'],
    };
    return transport as unknown as EngineClient;
  }

  /**
   * The `n`-th dispatch (from 0), once the router has made it. A dispatch that never comes fails the wait after
   * `timeoutMs` (a deadline only: the router dispatches within microtasks of being asked).
   */
  call(n: number, timeoutMs = 2_000): Promise<Dispatch> {
    const made = this.calls[n];
    if (made !== undefined) return Promise.resolve(made);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting.delete(n);
        reject(new Error(`the router made no dispatch #${n} (${this.calls.length} made)`));
      }, timeoutMs);
      timer.unref();
      this.#waiting.set(n, (d) => {
        clearTimeout(timer);
        resolve(d);
      });
    });
  }

  #dispatch(
    url: string,
    path: string,
    body: JsonObject | undefined,
    options: DispatchOptions,
  ): Promise<EngineResponse> {
    const signal: CancelSignal | undefined = options.signal;
    if (signal?.aborted === true) return Promise.reject(clientAbortedError({ worker: url, path }, signal.reason));
    return new Promise((resolve, reject) => {
      const d = new Dispatch(url, path, body, options, { resolve, reject });
      const n = this.calls.push(d) - 1;
      this.#waiting.get(n)?.(d);
      this.#waiting.delete(n);
    });
  }
}
