/**
 * One ext_proc stream: one HTTP request and its response, in the order Envoy
 * sends them in streamed mode (request_body_mode and response_body_mode
 * FULL_DUPLEX_STREAMED, as GIE configures its gateways):
 *
 *   request_headers (end_of_stream false)      -> nothing yet: the headers' answer waits for the pick
 *   request_body ... request_body (eos)        -> request_headers answer (the pick), then the body streamed back
 *     or request_body ... request_trailers     -> the same, the body not ending the stream, then the trailers' answer
 *   response_headers (+ the served endpoint)   -> response_headers answer (the conformance echo)
 *   response_body ... response_body (eos)      -> each chunk streamed back; the first marks prefill done
 *     or response_body ... response_trailers   -> the same, then the trailers' answer, which ends the response
 *
 * Envoy refuses a FULL_DUPLEX_STREAMED body mode unless the trailer mode on
 * that side is SEND, so trailers are part of the protocol: a message that has
 * them ends its body with them (no chunk has end_of_stream), and each
 * `*_trailers` is answered, unchanged, after the last body chunk. Only the
 * data plane's `end_of_stream` may end a streamed body in an answer: a body
 * followed by trailers is passed on with end_of_stream false.
 *
 * A request on a path the picker does not route (a GET: `/v1/models`, a
 * health probe; a POST with a body: `/v1/embeddings`, `/tokenize`, an audio
 * upload) is not an inference request it scores: as GIE's reference picker
 * does, it is sent to an eligible endpoint (the subset's; fewest requests in
 * flight first, the rest of the answer its fallbacks), neither scored nor
 * booked, and its response passed on as any. The answer to its headers comes
 * at once; its body, if any, is neither waited for nor read nor held: each
 * chunk is streamed back as it comes (the streamed mode lets the answer to the
 * headers precede the body), so `max_body_bytes`, a bound on what the picker
 * holds, does not apply to it. The protocol lets the picker refuse a request
 * only with 503 or 429: such a request through the gateway must reach a pod.
 *
 * The booking is freed exactly once: at the response's end, or when the
 * stream ends first (the client or Envoy reset it), or on an error. A
 * message out of this order, or one with no known member, ends the stream
 * with INVALID_ARGUMENT / FAILED_PRECONDITION and books nothing. A request
 * the picker turns away (an inference request with no body, a body over
 * `max_body_bytes`, a body or model it does not route, no endpoint, shed) is the client's answer, an
 * `ImmediateResponse` with kvgate's error body and code, never a gRPC error
 * (which Envoy answers with a bare 500, or routes past the picker when its
 * failure mode allows); the request's messages Envoy sent before reading
 * that answer (body chunks, trailers) are dropped. So is a request the picker
 * fails on before its pick (an internal error, a 500): answered with kvgate
 * serve's fixed sentence and the request id, its cause logged under that id.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { status as GrpcStatus, type ServerDuplexStream } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { errorBody, type Rng } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import {
  asKvgateError,
  errorOf,
  type BodyOutcome,
  type EndpointKind,
  type Preprocessor,
  type PublicErrors,
} from '../frontend/index.js';
import type { EndpointPicker } from './endpoint-picker.js';
import {
  EPP,
  headerText,
  immediate,
  metadataStrings,
  pickedHeaders,
  responseHeaders,
  streamedBody,
  trailersAnswer,
  type ProcessingRequest,
  type ProcessingResponse,
} from './protocol.js';

/** What every stream of one picker shares. */
export interface ExchangeOptions {
  readonly picker: EndpointPicker;
  readonly preprocessor: Preprocessor;
  readonly modelView: Parameters<Preprocessor['runBody']>[0]['models'][number];
  readonly maxBodyBytes: number;
  readonly maxMessages: number;
  /** Endpoints in an answer: the pick and its fallbacks. */
  readonly fallbacks: number;
  /** Honour the GIE conformance hooks (`inference_pool.conformance_hooks`; off: a client could pick its own pod). */
  readonly conformanceHooks: boolean;
  /** Breaks ties between endpoints as loaded when a request with no body is passed on. */
  readonly rng: Rng;
  readonly logger: Logger;
  /** What a client may see of a failure: kvgate serve's view (its fixed sentence for an internal error). */
  readonly publicErrors: PublicErrors;
  readonly nextRequestId: () => string;
  readonly count: (outcome: PickOutcome) => void;
}

export type PickOutcome =
  'picked' | 'passed' | 'no_endpoint' | 'shed' | 'bad_request' | 'internal_error' | 'protocol_error' | 'reset';

type Phase = 'start' | 'request_body' | 'picking' | 'response' | 'response_body' | 'done';

const PATHS: Readonly<Record<string, EndpointKind>> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completion',
  '/v1/messages': 'messages',
  '/v1/responses': 'responses',
};

class ProtocolError extends Error {
  constructor(
    readonly code: GrpcStatus,
    message: string,
  ) {
    super(message);
  }
}

export class Exchange {
  readonly #env: ExchangeOptions;
  readonly #call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>;
  #phase: Phase = 'start';
  #headers: IncomingHttpHeaders = {};
  #subset: string[] | undefined;
  /** What the request's path names; undefined: a path the picker does not route (the request is passed on). */
  #kind: EndpointKind | undefined;
  /** A passed request's body is still coming: its chunks and trailers are answered as they come, unread. */
  #passing = false;
  #chunks: Buffer[] = [];
  #bytes = 0;
  /** Named at the request's headers: an internal error's answer gives it, the log line that explains it carries it. */
  #requestId = '';
  /** The request is picked and booked under `#requestId`: freed at the end of the response, or of the stream. */
  #booked = false;
  #ended = false;
  /** The request was answered with an ImmediateResponse: its messages still in flight are dropped. */
  #refused = false;

  constructor(env: ExchangeOptions, call: ServerDuplexStream<ProcessingRequest, ProcessingResponse>) {
    this.#env = env;
    this.#call = call;
    call.on('data', (m: ProcessingRequest) => this.#onMessage(m));
    call.on('end', () => this.#finish('end'));
    call.on('error', () => this.#finish('reset'));
    call.on('cancelled', () => this.#finish('reset'));
  }

  /** Bytes of the request's body this stream holds (`kvgate picker`'s `bufferedBytes`: what open streams cost). */
  get bufferedBytes(): number {
    return this.#chunks.reduce((n, c) => n + c.length, 0);
  }

  #onMessage(m: ProcessingRequest): void {
    try {
      this.#handle(m);
    } catch (err) {
      this.#fail(err);
    }
  }

  #handle(m: ProcessingRequest): void {
    const requestBody = m.request === 'request_body' || m.request === 'request_trailers';
    if (this.#refused && requestBody) return;
    if (this.#passing && requestBody) return this.#passBody(m);
    switch (m.request) {
      case 'request_headers':
        return this.#requestHeaders(m);
      case 'request_body':
        return this.#requestBody(m);
      case 'response_headers':
        return this.#responseHeaders(m);
      case 'response_body':
        return this.#responseBody(m);
      case 'request_trailers':
        return this.#requestTrailers();
      case 'response_trailers':
        return this.#responseTrailers();
      default:
        throw new ProtocolError(GrpcStatus.INVALID_ARGUMENT, 'a ProcessingRequest with no request member');
    }
  }

  #expect(phase: Phase, what: string): void {
    if (this.#phase !== phase)
      throw new ProtocolError(GrpcStatus.FAILED_PRECONDITION, `${what} out of order (the stream is at ${this.#phase})`);
  }

  #requestHeaders(m: ProcessingRequest): void {
    this.#expect('start', 'request_headers');
    this.#requestId = this.#env.nextRequestId();
    for (const h of m.request_headers?.headers?.headers ?? []) {
      const key = h.key.toLowerCase();
      const value = headerText(h);
      const prior = this.#headers[key];
      this.#headers[key] = prior === undefined ? value : `${String(prior)},${value}`;
    }
    const hint = m.metadata_context?.filter_metadata?.[EPP.subsetNamespace]?.fields?.[EPP.subsetKey];
    this.#subset = metadataStrings(hint);
    const test = this.#env.conformanceHooks ? this.#headers[EPP.conformanceSelection] : undefined;
    if (typeof test === 'string' && test.trim() !== '') this.#subset = metadataStrings({ stringValue: test });
    this.#phase = 'request_body';
    this.#kind = PATHS[String(this.#headers[':path'] ?? '').split('?')[0]!];
    const bodyless = m.request_headers?.end_of_stream === true;
    if (this.#kind === undefined) return this.#pass(bodyless);
    if (bodyless)
      this.#answer(
        new KvgateError('KVG_ERR_INVALID_REQUEST', 'the request has no body; kvgate routes requests with a JSON body'),
      );
  }

  /**
   * A request on a path the picker does not route: sent to an eligible endpoint at its headers, neither scored nor
   * booked. Its body, if any, is not waited for: each chunk is streamed back as it comes (`#passBody`), never held.
   */
  #pass(bodyless: boolean): void {
    let endpoints: string[];
    try {
      endpoints = passEndpoints(this.#env, this.#subset);
    } catch (err) {
      return this.#answer(err);
    }
    this.#phase = 'response';
    this.#passing = !bodyless;
    this.#env.count('passed');
    this.#env.logger.debug({ requestId: this.#requestId, endpoints, path: this.#headers[':path'] }, 'passed on');
    this.#send(pickedHeaders(endpoints));
  }

  /**
   * A chunk of a passed request's body, or its trailers, answered at once: the chunk streamed back unread (its
   * `end_of_stream` kept), the trailers unchanged. The response may have begun meanwhile (an engine may answer before
   * the body ends): its messages are handled as any response's.
   */
  #passBody(m: ProcessingRequest): void {
    if (m.request === 'request_trailers') {
      this.#passing = false;
      return this.#send(trailersAnswer('request_trailers'));
    }
    const eos = m.request_body?.end_of_stream === true;
    if (eos) this.#passing = false;
    for (const r of streamedBody('request_body', m.request_body?.body ?? Buffer.alloc(0), eos)) this.#send(r);
  }

  #requestBody(m: ProcessingRequest): void {
    this.#expect('request_body', 'request_body');
    const chunk = m.request_body?.body ?? Buffer.alloc(0);
    this.#bytes += chunk.length;
    if (this.#bytes > this.#env.maxBodyBytes) {
      const limit = this.#env.maxBodyBytes;
      this.#chunks = [];
      const message = `the request body is larger than the limit of ${limit} bytes`;
      return this.#answer(new KvgateError('KVG_ERR_BODY_TOO_LARGE', message, { limit }));
    }
    this.#chunks.push(chunk);
    if (m.request_body?.end_of_stream === true) this.#bodyDone(false);
  }

  /** The request's trailers: its body is complete (none of its chunks ended the stream). */
  #requestTrailers(): void {
    this.#expect('request_body', 'request_trailers');
    this.#bodyDone(true);
  }

  /**
   * The whole body is here: picked on it, then answered (the trailers' answer last when they ended it). The chunks
   * are let go at once: the stream lives on for the whole response, and only the pick needs the body (one buffer,
   * dropped once passed on).
   */
  #bodyDone(trailers: boolean): void {
    this.#phase = 'picking';
    const body = this.#chunks.length === 1 ? this.#chunks[0]! : Buffer.concat(this.#chunks, this.#bytes);
    this.#chunks = [];
    void this.#pick(body, trailers).catch((err: unknown) => this.#fail(err));
  }

  async #pick(body: Buffer, trailers: boolean): Promise<void> {
    const kind = this.#kind!;
    let outcome: BodyOutcome;
    try {
      outcome = await this.#env.preprocessor.runBody({
        kind: 'body',
        endpoint: kind,
        // A pool thread may take (move) the bytes it is given: it gets a copy, the body stays ours to pass on. The
        // main thread only reads them.
        bytes: this.#env.preprocessor.mode === 'pool' ? new Uint8Array(body) : body,
        maxMessages: this.#env.maxMessages,
        headers: this.#headers,
        models: [this.#env.modelView],
      });
      // Rebuilt with its detail and, for an unexpected failure, the error as the thread threw it (the log's cause).
      if (outcome.result === undefined)
        throw errorOf(outcome.promptError ?? { code: 'KVG_ERR_INTERNAL', message: 'preprocessing returned no result' });
    } catch (err) {
      return this.#answer(err);
    }
    if (this.#ended) return;
    const requestId = this.#requestId;
    let endpoints: string[];
    try {
      endpoints = this.#env.picker.pick({
        requestId,
        tokenIds: outcome.result.tokenIds,
        hashes: outcome.result.hashes,
        hints: outcome.hints,
        subset: this.#subset,
      });
    } catch (err) {
      return this.#answer(err);
    }
    this.#booked = true;
    this.#phase = 'response';
    this.#env.count('picked');
    this.#env.logger.debug({ requestId, endpoints }, 'picked');
    this.#send(pickedHeaders(endpoints));
    for (const r of streamedBody('request_body', body, !trailers)) this.#send(r);
    if (trailers) this.#send(trailersAnswer('request_trailers'));
  }

  /**
   * A request the picker turns away, or fails: the data plane answers the client with the error's status and body.
   * The client sees what kvgate serve shows it (error-answer.ts): an internal error (anything not a KvgateError, and
   * KVG_ERR_INTERNAL, whose text is for the log) as a fixed sentence with the request id, its cause logged under that
   * id; the picker's own failures are never counted as the client's.
   */
  #answer(err: unknown): void {
    const requestId = this.#requestId;
    const internal = asKvgateError(err, requestId);
    const e = this.#env.publicErrors.of(internal);
    const status = e.code === 'KVG_ERR_TOO_MANY_REQUESTS' ? 429 : e.statusCode;
    const outcome: PickOutcome =
      status === 429
        ? 'shed'
        : e.code === 'KVG_ERR_NO_WORKERS'
          ? 'no_endpoint'
          : status >= 500
            ? 'internal_error'
            : 'bad_request';
    if (outcome === 'internal_error') this.#env.logger.error({ requestId, code: e.code, err }, 'internal error');
    else this.#env.logger.debug({ requestId, code: e.code, status }, 'request refused');
    this.#env.count(outcome);
    // The gateway's error body, `param` included: one shape whichever front end refused the request.
    const body = JSON.stringify(errorBody(e));
    this.#phase = 'done';
    this.#refused = true;
    this.#send(immediate(status, body, e.code));
  }

  #responseHeaders(m: ProcessingRequest): void {
    this.#expect('response', 'response_headers');
    const requestId = this.#requestId;
    const lb = m.metadata_context?.filter_metadata?.[EPP.lbNamespace]?.fields?.[EPP.servedKey];
    const served = metadataStrings(lb)?.[0];
    if (served !== undefined) this.#env.picker.served(requestId, served);
    const echo: Record<string, string> =
      served === undefined || !this.#env.conformanceHooks ? {} : { [EPP.conformanceServed]: served };
    this.#send(responseHeaders(echo));
    if (m.response_headers?.end_of_stream === true) this.#endRequest();
    else this.#phase = 'response_body';
  }

  #responseBody(m: ProcessingRequest): void {
    this.#expect('response_body', 'response_body');
    const chunk = m.response_body?.body ?? Buffer.alloc(0);
    const eos = m.response_body?.end_of_stream === true;
    if (chunk.length > 0) this.#env.picker.firstToken(this.#requestId);
    for (const r of streamedBody('response_body', chunk, eos)) this.#send(r);
    if (eos) this.#endRequest();
  }

  /** The response's trailers end it (after response headers that did not): answered unchanged, the booking freed. */
  #responseTrailers(): void {
    this.#expect('response_body', 'response_trailers');
    this.#send(trailersAnswer('response_trailers'));
    this.#endRequest();
  }

  #endRequest(): void {
    this.#phase = 'done';
    if (this.#booked) this.#env.picker.end(this.#requestId);
  }

  #send(r: ProcessingResponse): void {
    if (!this.#ended) this.#call.write(r);
  }

  #fail(err: unknown): void {
    if (this.#ended) return;
    const code = err instanceof ProtocolError ? err.code : GrpcStatus.INTERNAL;
    const message = err instanceof ProtocolError ? err.message : 'internal error';
    if (!(err instanceof ProtocolError)) this.#env.logger.error({ err }, 'picker stream failed');
    else this.#env.logger.warn({ code, reason: message }, 'picker stream refused');
    this.#env.count('protocol_error');
    this.#release();
    this.#call.emit('error', { code, details: message });
  }

  /** The stream is over, however it ended: the booking, if any, is freed. */
  #finish(how: 'end' | 'reset'): void {
    if (this.#ended) return;
    if (how === 'reset' && this.#phase !== 'done') this.#env.count('reset');
    this.#release();
    if (how === 'end') this.#call.end();
  }

  #release(): void {
    this.#ended = true;
    this.#chunks = [];
    if (this.#booked) this.#env.picker.end(this.#requestId);
  }
}

/**
 * The endpoints for a request the picker passes on unscored (a path it does not route): those the subset allows (all
 * when there is none), fewest requests in flight first, ties in random order, as many as an answer holds.
 * @throws KvgateError KVG_ERR_NO_WORKERS when none is eligible.
 */
function passEndpoints(env: ExchangeOptions, subset: readonly string[] | undefined): string[] {
  const eligible = [...env.picker.eligible(subset).keys()];
  const loads = env.picker.loads();
  const inFlight = (e: string): number => loads[e]?.activeRequests ?? 0;
  const order = eligible.map((e) => ({ e, load: inFlight(e), tie: env.rng() }));
  order.sort((a, b) => a.load - b.load || a.tie - b.tie);
  return order.slice(0, Math.max(1, env.fallbacks)).map((o) => o.e);
}
