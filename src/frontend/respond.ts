/**
 * Writing a routed or query-only answer to the client: the worker headers,
 * the JSON or SSE body, and the per-request context both the server and
 * these writers fill in for the access log.
 *
 * Contract of `pipeRouted`: once the SSE head is written, a failure becomes a
 * final error event (never a second status line), and a client that leaves
 * early makes it return the upstream iterator so the router frees its booking.
 * Routed and query-only answers and SSE batches leave at the end of their
 * event-loop turn (turn-end.ts): the writers may return before their last
 * bytes are written.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { Counter } from 'prom-client';
import { batchesOf, requestFailed, type CancelSignal, type WorkerRank } from '../common/index.js';
import type { ModelConfig } from '../config/index.js';
import { MESSAGES_ROUTE, anthropicErrorFrame, anthropicRefusal } from './anthropic-error.js';
import {
  RESPONSES_ROUTE,
  asKvgateError,
  responsesErrorFrame,
  sendBytes,
  sendJson,
  sseErrorFrame,
  sseFrame,
  whenFinished,
  whenWritable,
} from './http-io.js';
import { queryCompletionBody, queryCompletionChunk, routeResponseBody } from './query-response.js';
import type { PublicErrors } from './public-error.js';
import type { EndpointKind, PreparedRequest, QueryResult, RoutedResponse, SseEvent } from './router-port.js';
import type { Tenant } from './tenants.js';
import { atTurnEnd } from './turn-end.js';

/** One request as the server handles it. */
export interface RequestContext {
  req: IncomingMessage;
  res: ServerResponse;
  requestId: string;
  route: string;
  startedAt: number;
  /** Fires on client disconnect, timeout or forced shutdown; its reason is a KvgateError. */
  signal: CancelSignal;
  /** Filled in as the request progresses, for the access log line. */
  logFields: Record<string, unknown>;
  /** Who the request belongs to (the `tenants` config), once its API key was checked. */
  tenant?: Tenant | undefined;
  /** Its client by `limits.client_address` (the per-client bounds' and the preprocessing queue's key); undefined: off. */
  client?: string | undefined;
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
};
const SSE_HEADER_NAMES = Object.keys(SSE_HEADERS) as (keyof typeof SSE_HEADERS)[];

/** The x-kvgate-worker* response headers naming who served the request. */
export function workerHeaders(worker: WorkerRank, prefill: WorkerRank | undefined): Record<string, string> {
  const h: Record<string, string> = {
    'x-kvgate-worker': String(worker.workerId),
    'x-kvgate-worker-dp-rank': String(worker.dpRank),
  };
  if (prefill !== undefined) {
    h['x-kvgate-prefill-worker'] = String(prefill.workerId);
    h['x-kvgate-prefill-worker-dp-rank'] = String(prefill.dpRank);
  }
  return h;
}

/**
 * A query-only answer: `/v1/route`'s body, or Dynamo's query-only completion (JSON or one SSE chunk). Built now
 * (a failure is still the request's error answer), written at the end of the turn with the other answers.
 */
export function sendQueryAnswer(
  ctx: RequestContext,
  kind: EndpointKind | 'route',
  req: PreparedRequest,
  q: QueryResult,
  model: ModelConfig,
  headers: Record<string, string>,
  createdSec: number,
): void {
  const res = ctx.res;
  let write: () => void;
  if (kind === 'route') {
    const body = JSON.stringify(routeResponseBody(req, q, model.blockSize));
    write = () => sendJson(res, 200, body, headers);
  } else if (!req.stream) {
    // Dynamo-compatible query-only answer on the OpenAI endpoint (Dynamo's): nvext.worker_id and nvext.token_ids, no choices.
    const body = JSON.stringify(queryCompletionBody(req, q, createdSec));
    write = () => sendJson(res, 200, body, headers);
  } else {
    const chunk = `data: ${JSON.stringify(queryCompletionChunk(req, q, createdSec))}\n\n`;
    write = () => {
      if (res.destroyed) return;
      res.writeHead(200, { ...SSE_HEADERS, ...headers });
      res.write(chunk);
      res.end('data: [DONE]\n\n');
    };
  }
  atTurnEnd(write, (err) => res.destroy(err as Error));
}

/**
 * Batches a stream's SSE frames per event-loop turn: the frames that arrive in
 * one turn go out as one chunk in one writev, at the end of that turn with the
 * other clients' writes (turn-end.ts), instead of a chunk (and a syscall)
 * each. No frame waits for a later turn; the head goes with the first batch,
 * or alone at the end of the first turn when no event came yet; the end of the
 * stream goes with its turn's batch.
 */
class TurnBatch {
  readonly #ctx: RequestContext;
  readonly #res: ServerResponse;
  readonly #env: RelayOptions;
  #frames: Buffer[] = [];
  #bytes = 0;
  #scheduled = false;
  /** `end()` was called: the response ends at the end of the turn, with `#last` after the batch. */
  #ending = false;
  #last: Buffer | undefined;
  readonly #onTurn = (): void => {
    this.#scheduled = false;
    if (this.#ending) this.#end();
    else if (this.#frames.length > 0) this.flush();
    // (headersSent is true from writeHead on; flushHeaders sends the head only if nothing did yet.)
    else if (!this.#res.destroyed) this.#res.flushHeaders();
  };
  readonly #onFail = (err: unknown): void => {
    this.#res.destroy(err as Error);
  };

  constructor(ctx: RequestContext, env: RelayOptions) {
    this.#ctx = ctx;
    this.#res = ctx.res;
    this.#env = env;
  }

  schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    atTurnEnd(this.#onTurn, this.#onFail);
  }

  /**
   * Queues the events' frames for the end of the turn (at most BATCH_MAX_BYTES are held before a write).
   * Whether the writer should wait before reading more is the response's own state, read when it asks
   * (`whenWritable`), never a flag kept from an earlier write: the socket may have drained since.
   */
  addAll(events: readonly SseEvent[]): void {
    for (const ev of events) {
      const frame = sseFrame(ev);
      this.#frames.push(frame);
      this.#bytes += frame.length;
      if (this.#bytes >= BATCH_MAX_BYTES) this.flush();
    }
    if (this.#frames.length > 0) this.schedule();
  }

  /**
   * Writes what is queued now, in one writev. Frames passed through unchanged are views of the upstream read
   * that carried them: a run of them back to back is written as one view of that read (no copy). A batch of
   * at most MAX_RUNS such runs (a dropped usage chunk splits a stream's read in two) goes as one write per
   * run; a batch more scattered than that is copied into one buffer (fewer HTTP chunks for the client to read).
   */
  flush(): void {
    if (this.#frames.length === 0 || this.#res.destroyed) return;
    const frames = this.#frames;
    const bytes = this.#bytes;
    this.#frames = [];
    this.#bytes = 0;
    const res = this.#res;
    if (frames.length === 1) {
      res.write(frames[0]!);
      return;
    }
    const runs = runsOf(frames);
    if (runs === undefined) {
      res.write(Buffer.concat(frames, bytes));
      return;
    }
    if (runs.length === 1) {
      res.write(runs[0]!);
      return;
    }
    res.cork();
    for (const r of runs) res.write(r);
    res.uncork();
  }

  /** Ends the response at the end of this turn: what is queued, then `last`, in one writev. */
  end(last?: Buffer): void {
    this.#ending = true;
    this.#last = last;
    this.schedule();
  }

  #end(): void {
    if (this.#res.destroyed) return;
    this.#res.cork();
    this.flush();
    // end() uncorks the socket, sending the batch, the last frame and the chunked terminator together.
    this.#res.end(this.#last);
    // What the socket did not take is waiting for the client. One that never reads it would hold the
    // connection and its concurrency slot forever: see `cutUnlessFinished`.
    if (this.#res.writableLength > 0) cutUnlessFinished(this.#ctx, this.#env);
  }
}

/** Runs of back-to-back frames written as views of their read; a batch with more runs is copied whole. */
const MAX_RUNS = 4;

/** The frames as views of the reads that carried them, one per run of back-to-back frames; undefined past MAX_RUNS runs. */
function runsOf(frames: readonly Buffer[]): Buffer[] | undefined {
  const runs: Buffer[] = [];
  let first = frames[0]!;
  let end = first.byteOffset + first.length;
  for (let i = 1; i <= frames.length; i++) {
    const f = frames[i];
    if (f !== undefined && f.buffer === first.buffer && f.byteOffset === end) {
      end += f.length;
      continue;
    }
    if (runs.length === MAX_RUNS) return undefined;
    runs.push(Buffer.from(first.buffer, first.byteOffset, end - first.byteOffset));
    if (f === undefined) break;
    first = f;
    end = f.byteOffset + f.length;
  }
  return runs;
}

/** A batch written before the turn ends once it holds this many bytes. */
const BATCH_MAX_BYTES = 64 * 1024;

/** How long an aborted stream's last bytes (its error event) may wait for the client before the response is cut. */
const ABORTED_LINGER_MS = 1000;

/**
 * Bounds how long an ended response may wait for its client to read what is buffered: it is destroyed when the
 * request's signal fires (its deadline, shutdown: the access log gets that code), after ABORTED_LINGER_MS when it
 * already has (the stream ended with that error event), and otherwise once its client has taken nothing for the
 * stall bound (`whenFinished`; counted and logged).
 */
function cutUnlessFinished(ctx: RequestContext, env: RelayOptions): void {
  const { res, signal } = ctx;
  if (signal.aborted) {
    const timer = setTimeout(() => res.destroy(), Math.min(env.clientStallMs, ABORTED_LINGER_MS));
    timer.unref();
    res.once('close', () => clearTimeout(timer));
    return;
  }
  void whenFinished(res, signal, env.clientStallMs).then((state) => {
    if (state === 'ready' || state === 'closed' || res.writableFinished || res.destroyed) return;
    if (state === 'aborted') ctx.logFields.code ??= asKvgateError(signal.reason, ctx.requestId).code;
    res.destroy();
    if (state === 'stalled') stalled(ctx, env);
  });
}

/** What relaying a routed answer needs of the server besides the request (rebuilt when the config is reloaded). */
export interface RelayOptions {
  readonly logger: Logger;
  readonly publicErrors: PublicErrors;
  /** `limits.client_stall_timeout_ms`: a stream whose client takes nothing of its buffered answer this long is cut. */
  readonly clientStallMs: number;
  /** `kvgate_http_rejections_total`, which counts the streams cut for a stalled client. */
  readonly rejections: Counter<'code'>;
}

/** Counts and logs a stream cut because its client read nothing for the stall bound (the response is destroyed). */
function stalled(ctx: RequestContext, env: RelayOptions): void {
  ctx.logFields.code = 'KVG_ERR_CLIENT_STALLED';
  requestFailed('KVG_ERR_CLIENT_STALLED', 408);
  env.rejections.inc({ code: 'KVG_ERR_CLIENT_STALLED' });
  env.logger.warn(
    { reqId: ctx.requestId, model: ctx.logFields.model, worker: ctx.logFields.worker, stallMs: env.clientStallMs },
    'stream cut: its client read none of the buffered answer within limits.client_stall_timeout_ms',
  );
}

/**
 * A routed answer: the engine's JSON bytes, or its SSE events piped through with backpressure. The stream waits
 * for the client while the response's buffer is full (`whenWritable`), at most `clientStallMs` without the
 * client taking anything: then it is cut and counted (counted and logged). The request's signal (its timeout,
 * shutdown) ends the wait too, and the stream then ends with that error event.
 */
export async function pipeRouted(
  ctx: RequestContext,
  routed: RoutedResponse,
  headers: Record<string, string>,
  env: RelayOptions,
): Promise<void> {
  const { res } = ctx;
  ctx.logFields.upstreamStatus = routed.status;
  if (routed.body.kind === 'json') {
    const own = routed.body.bytes;
    const bytes =
      routed.status >= 400 && ctx.route === MESSAGES_ROUTE ? anthropicRefusal(routed.status, own, ctx.requestId) : own;
    atTurnEnd(
      () => sendBytes(res, routed.status, bytes, 'application/json', headers),
      (err) => res.destroy(err as Error),
    );
    return;
  }
  // Read in batches: the events of one upstream read are framed together (common's `Batched`).
  const iterator = batchesOf(routed.body.events)[Symbol.asyncIterator]();
  let finished = false;
  // The caller's headers object is completed, not copied (its own values win).
  for (const name of SSE_HEADER_NAMES) headers[name] ??= SSE_HEADERS[name];
  res.writeHead(routed.status, headers);
  const batch = new TurnBatch(ctx, env);
  batch.schedule();
  let events = 0;
  try {
    for (;;) {
      const next = await iterator.next();
      if (next.done === true) {
        finished = true;
        break;
      }
      if (res.destroyed) break;
      events += next.value.length;
      batch.addAll(next.value);
      if (!res.writableNeedDrain) continue;
      const state = await whenWritable(res, ctx.signal, env.clientStallMs);
      if (state === 'closed') break;
      if (state === 'aborted') throw ctx.signal.reason;
      if (state === 'stalled') {
        res.destroy();
        stalled(ctx, env);
        break;
      }
    }
    ctx.logFields.events = events;
    batch.end();
  } catch (err) {
    const internal = asKvgateError(ctx.signal.aborted ? ctx.signal.reason : err, ctx.requestId);
    // The client gets the code and the worker id; the engine's URL and its own text go to the log.
    const e = env.publicErrors.of(internal, routed.worker.workerId);
    ctx.logFields.code = e.code;
    requestFailed(e.code, e.statusCode);
    ctx.logFields.events = events;
    if (e.code === 'KVG_ERR_INTERNAL') env.logger.error({ reqId: ctx.requestId, err }, 'stream failed');
    else if (e !== internal)
      env.logger.warn(
        { reqId: ctx.requestId, code: e.code, workerId: routed.worker.workerId, err: internal },
        'engine error mid-stream',
      );
    // Each API ends its stream with its own error event: Anthropic's, the Responses API's, or chat's data line.
    batch.end(
      ctx.route === MESSAGES_ROUTE
        ? anthropicErrorFrame(e, ctx.requestId)
        : ctx.route === RESPONSES_ROUTE
          ? responsesErrorFrame(e, events)
          : sseErrorFrame(e),
    );
  } finally {
    // Left early (client gone or stalled), or failed: tell the port so it stops the upstream and frees its booking.
    // A failure is not always the upstream's own (which closed it): the client leaving while the relay waits for
    // it aborts the request's signal, and that iterator is still open. Returning a closed one does nothing.
    if (!finished) await iterator.return?.().catch(() => undefined);
  }
}
