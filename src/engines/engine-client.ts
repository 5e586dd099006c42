/**
 * `EngineClient`: the registry of per-worker undici pools and the one way
 * kvgate sends a request to an engine.
 *
 * Ownership: the client owns one keep-alive `Pool` per worker URL, created by
 * `addWorker` and closed by `removeWorker` (graceful: in-flight responses
 * finish; `force`: they fail at once). Discovery decides which workers exist;
 * this class only mirrors that set. A dispatch to a URL that is not
 * registered fails with KVG_ERR_ENGINE_NOT_REGISTERED instead of silently
 * opening a pool, so a removed worker can never come back through a race.
 *
 * `dispatch` serialises the client's body once (plus routing fields; a large
 * body as views of the client's own bytes: request-body.ts), sends
 * it, and resolves at the response headers with either an
 * `EngineEventStream` (SSE, parsed incrementally) or, for non-streaming
 * requests, once the body is read, an `EngineJsonResponse`. Every failure is
 * a KvgateError whose code says how far the request got (see
 * engine-errors.ts), so the router can retry exactly the failures that never
 * reached an engine.
 */
import type { LookupFunction } from 'node:net';
import { Pool, type Dispatcher } from 'undici';
import type { CancelSignal } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { clientAbortedError, type ErrorContext } from './engine-errors.js';
import type { EngineJsonResponse, EngineResponse, EngineEventStream } from './engine-stream.js';
import { ResponseHandler } from './response-handler.js';
import { requestPayload, type JsonObject } from './request-body.js';

export interface EngineClientOptions {
  /** Most concurrent connections (hence in-flight requests) per worker; more wait in the pool's queue. Default 256. */
  connections?: number;
  /** TCP connect timeout. Default 5 000 ms. */
  connectTimeoutMs?: number;
  /** From request sent to response headers. Non-streaming generations answer only when done, so keep it long. Default 300 000 ms. */
  headersTimeoutMs?: number;
  /** Longest silence between two body chunks. Default 300 000 ms. */
  bodyTimeoutMs?: number;
  /** How long an idle keep-alive socket is kept (capped by the engine's own keep-alive hint). Default 4 000 ms. */
  keepAliveTimeoutMs?: number;
  /** Largest non-streaming response body. Default 64 MiB. */
  maxResponseBytes?: number;
  /** How much of an HTTP error body is kept for passthrough. Default 64 KiB. */
  maxErrorBodyBytes?: number;
  /** Largest single SSE event. Default 16 MiB. */
  maxEventBytes?: number;
  /** Unread SSE events buffered per stream before the upstream socket is paused. Default 64. */
  streamHighWaterMark?: number;
  /** Custom DNS resolution for worker host names (passed to `net.connect`). */
  lookup?: LookupFunction;
}

export interface DispatchOptions {
  /** Aborting it aborts the upstream request (socket closed) and fails the dispatch with KVG_ERR_CLIENT_ABORTED. */
  signal?: CancelSignal;
  /** Whether an SSE response is expected. Default: `body.stream === true`. */
  stream?: boolean;
  /** Routing fields laid over the body's top level (see `requestPayload`); `undefined` values remove keys. */
  extraFields?: JsonObject;
  /** Extra request headers (e.g. `x-request-id`, `x-data-parallel-rank`). */
  headers?: Readonly<Record<string, string>>;
  /** Per-request override of the client's `headersTimeoutMs`. */
  headersTimeoutMs?: number;
  /** Per-request override of the client's `bodyTimeoutMs`. */
  bodyTimeoutMs?: number;
  /**
   * From this call to the leg's first output: the first SSE event of a stream, the first body byte
   * of a JSON answer. Expiry fails the leg with KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT (migratable) and
   * aborts the upstream request. Undefined or 0: none (the headers and body timeouts still apply).
   */
  firstByteTimeoutMs?: number;
  /**
   * Streams: the longest silence between two SSE events while the stream is being read (a paused,
   * unread stream does not count). Expiry: KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT (migratable) after the
   * events already received. Undefined or 0: none.
   */
  streamIdleTimeoutMs?: number;
  /**
   * Called once when the request is handed to a connected socket, before its
   * bytes are written: from here on a failure may have reached the engine.
   * (The disaggregated bootstrap path waits for this, not for output.)
   */
  onDispatched?: () => void;
}

export interface WorkerPoolStats {
  worker: string;
  /** Open sockets. */
  connected: number;
  /** Open sockets with no request. */
  free: number;
  /** Requests not yet on a socket: waiting for one (every connection busy), or for a new one to connect. */
  queued: number;
  /** Requests in flight. */
  running: number;
}

/** `EngineClientOptions` with every default applied (piscina's Options / Filled / defaults triple). */
interface FilledEngineClientOptions {
  connections: number;
  connectTimeoutMs: number;
  headersTimeoutMs: number;
  bodyTimeoutMs: number;
  keepAliveTimeoutMs: number;
  maxResponseBytes: number;
  maxErrorBodyBytes: number;
  maxEventBytes: number;
  streamHighWaterMark: number;
  lookup: LookupFunction | undefined;
}

/**
 * The default bound on an engine's unstreamed answer (`maxResponseBytes`), and on an answer kvgate assembles from a
 * stream for a `stream: false` client (routing's assembled-answer.ts): either is held whole before it is sent.
 */
export const DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024 * 1024;

const kDefaultEngineClientOptions: Omit<FilledEngineClientOptions, 'lookup'> = {
  connections: 256,
  connectTimeoutMs: 5_000,
  headersTimeoutMs: 300_000,
  bodyTimeoutMs: 300_000,
  keepAliveTimeoutMs: 4_000,
  maxResponseBytes: DEFAULT_MAX_RESPONSE_BYTES,
  maxErrorBodyBytes: 64 * 1024,
  maxEventBytes: 16 * 1024 * 1024,
  streamHighWaterMark: 64,
};

function resolveOptions(options: EngineClientOptions): FilledEngineClientOptions {
  const out = { ...kDefaultEngineClientOptions, lookup: options.lookup };
  for (const key of Object.keys(kDefaultEngineClientOptions) as (keyof typeof kDefaultEngineClientOptions)[]) {
    const value = options[key];
    if (value === undefined) continue;
    if (!Number.isInteger(value) || value < 1) {
      throw new KvgateError(
        'KVG_ERR_INVALID_CONFIG',
        `engine client option ${key} must be a positive integer, got ${String(value)}`,
        {
          field: key,
          value,
        },
      );
    }
    out[key] = value;
  }
  return out;
}

interface WorkerEntry {
  /** The URL as registered, normalised (origin + base path, no trailing slash). */
  url: string;
  /** Path prefix of the worker URL ('' for none). */
  basePath: string;
  pool: Pool;
}

/** A pool's counts read from undici's `PoolStats` snapshot (`pending`: in its queue, or on a socket still connecting). */
function poolStats({ url, pool }: WorkerEntry): WorkerPoolStats {
  const s = pool.stats;
  return { worker: url, connected: s.connected, free: s.free, queued: s.pending, running: s.running };
}

/**
 * Normalises a worker URL to the registry key: `http(s)://host:port[/base]`.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for a malformed or non-HTTP URL.
 */
function normalizeWorkerUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `worker URL is not a URL: ${url}`, { url });
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `worker URL must be http or https: ${url}`, { url });
  }
  if (parsed.search !== '' || parsed.hash !== '' || parsed.username !== '' || parsed.password !== '') {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `worker URL must have no query, fragment or credentials: ${url}`,
      { url },
    );
  }
  return `${parsed.origin}${parsed.pathname.replace(/\/+$/, '')}`;
}

/**
 * A request's headers as names and values in one flat array (undici takes it as is): no
 * per-request object of request-specific keys. The caller's headers (`extra`) win over the defaults.
 */
function requestHeaders(
  stream: boolean,
  hasBody: boolean,
  extra: Readonly<Record<string, string>> | undefined,
): string[] {
  const headers: string[] = [];
  if (extra?.['accept'] === undefined) headers.push('accept', stream ? 'text/event-stream' : 'application/json');
  // No accept-encoding would accept any coding (RFC 9110); kvgate reads bytes as they come (response-handler.ts).
  if (extra?.['accept-encoding'] === undefined) headers.push('accept-encoding', 'identity');
  if (hasBody && extra?.['content-type'] === undefined) headers.push('content-type', 'application/json');
  if (extra !== undefined) {
    for (const name of Object.keys(extra)) {
      const value = extra[name];
      if (value !== undefined) headers.push(name, value);
    }
  }
  return headers;
}

export class EngineClient {
  readonly #options: FilledEngineClientOptions;
  readonly #workers = new Map<string, WorkerEntry>();
  /** Registered entries by the URL as callers spell it, so a dispatch does not parse it again; emptied on any removal. */
  readonly #byUrl = new Map<string, WorkerEntry>();
  /** Pools being closed (removed workers), awaited by `close()`. */
  readonly #closing = new Set<Promise<void>>();
  #closed: Promise<void> | undefined;

  /** @throws KvgateError KVG_ERR_INVALID_CONFIG for an option that is not a positive integer. */
  constructor(options: EngineClientOptions = {}) {
    this.#options = resolveOptions(options);
  }

  /** The largest unstreamed answer taken (`maxResponseBytes`): an answer assembled for a client is held to it too. */
  get maxResponseBytes(): number {
    return this.#options.maxResponseBytes;
  }

  /** Registered worker URLs (normalised). */
  get workers(): string[] {
    return [...this.#workers.keys()];
  }

  hasWorker(url: string): boolean {
    return this.#workers.has(normalizeWorkerUrl(url));
  }

  /**
   * Registers a worker and opens its pool (sockets connect lazily). Adding a registered worker is a no-op.
   * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for a bad URL; KVG_ERR_ENGINE_NOT_REGISTERED after `close()`.
   */
  addWorker(url: string): void {
    const key = normalizeWorkerUrl(url);
    if (this.#closed !== undefined) {
      throw new KvgateError('KVG_ERR_ENGINE_NOT_REGISTERED', `engine client is closed; cannot add ${key}`, {
        worker: key,
      });
    }
    if (this.#workers.has(key)) return;
    const parsed = new URL(key);
    const o = this.#options;
    const pool = new Pool(parsed.origin, {
      connections: o.connections,
      pipelining: 1,
      keepAliveTimeout: o.keepAliveTimeoutMs,
      keepAliveMaxTimeout: Math.max(o.keepAliveTimeoutMs, 600_000),
      headersTimeout: o.headersTimeoutMs,
      bodyTimeout: o.bodyTimeoutMs,
      connect: { timeout: o.connectTimeoutMs, ...(o.lookup === undefined ? {} : { lookup: o.lookup }) },
    });
    this.#workers.set(key, { url: key, basePath: parsed.pathname === '/' ? '' : parsed.pathname, pool });
  }

  /**
   * Unregisters a worker: new dispatches to it fail at once with KVG_ERR_ENGINE_NOT_REGISTERED.
   * Graceful by default (resolves when its in-flight responses have finished and its sockets are closed);
   * with `force` in-flight requests fail now (KVG_ERR_ENGINE_UNREACHABLE if not yet sent, else
   * KVG_ERR_ENGINE_STREAM_BROKEN / KVG_ERR_ENGINE_DISCONNECTED). Removing an unknown worker resolves at once.
   */
  removeWorker(url: string, options: { force?: boolean } = {}): Promise<void> {
    const key = normalizeWorkerUrl(url);
    const entry = this.#workers.get(key);
    if (entry === undefined) return Promise.resolve();
    this.#workers.delete(key);
    this.#byUrl.clear();
    return this.#track(options.force === true ? entry.pool.destroy() : entry.pool.close());
  }

  /** Snapshot of each worker pool's socket and request counts. */
  stats(): WorkerPoolStats[] {
    return [...this.#workers.values()].map(poolStats);
  }

  /** Snapshot of one registered worker's pool (undici's own counts); undefined for a worker not registered. */
  workerStats(url: string): WorkerPoolStats | undefined {
    const entry = this.#byUrl.get(url) ?? this.#workers.get(normalizeWorkerUrl(url));
    return entry === undefined ? undefined : poolStats(entry);
  }

  /**
   * Closes every pool and refuses new work. Graceful (waits for in-flight responses) unless `force`.
   * Idempotent: later calls return the first call's promise.
   */
  close(options: { force?: boolean } = {}): Promise<void> {
    if (this.#closed !== undefined) return this.#closed;
    const entries = [...this.#workers.values()];
    this.#workers.clear();
    this.#byUrl.clear();
    for (const { pool } of entries) this.#track(options.force === true ? pool.destroy() : pool.close());
    this.#closed = Promise.all([...this.#closing]).then(() => undefined);
    return this.#closed;
  }

  /**
   * Sends `body` (plus `extraFields`) to `path` on the worker: POST with a JSON body, or GET when `body` is undefined.
   * Resolves at the response headers with an `EngineEventStream` when a stream is expected, otherwise
   * with the buffered `EngineJsonResponse`.
   * @throws KvgateError (rejected promise) KVG_ERR_ENGINE_NOT_REGISTERED, KVG_ERR_ENGINE_UNREACHABLE,
   *   KVG_ERR_ENGINE_DISCONNECTED, KVG_ERR_ENGINE_HEADERS_TIMEOUT, KVG_ERR_ENGINE_BODY_TIMEOUT,
   *   KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT, KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT (both migratable, see `isMigratable`),
   *   KVG_ERR_ENGINE_STREAM_BROKEN, KVG_ERR_ENGINE_BAD_RESPONSE, KVG_ERR_CLIENT_ABORTED, KVG_ERR_INVALID_ARGUMENT;
   *   `EngineHttpError` (KVG_ERR_ENGINE_REJECTED for 4xx, KVG_ERR_ENGINE_FAILED for 5xx).
   */
  dispatch(
    workerUrl: string,
    path: string,
    body: JsonObject | undefined,
    options: DispatchOptions & { stream: true },
  ): Promise<EngineEventStream>;
  dispatch(
    workerUrl: string,
    path: string,
    body: JsonObject | undefined,
    options: DispatchOptions & { stream: false },
  ): Promise<EngineJsonResponse>;
  dispatch(
    workerUrl: string,
    path: string,
    body: JsonObject | undefined,
    options?: DispatchOptions,
  ): Promise<EngineResponse>;
  dispatch(
    workerUrl: string,
    path: string,
    body: JsonObject | undefined,
    options: DispatchOptions = {},
  ): Promise<EngineResponse> {
    const startedAt = performance.now();
    let entry: WorkerEntry | undefined;
    let payload: string | Buffer | undefined;
    try {
      entry = this.#registered(workerUrl);
      if (!path.startsWith('/'))
        throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `dispatch path must start with '/': ${path}`, { path });
      payload = body === undefined ? undefined : requestPayload(body, options.extraFields);
    } catch (err) {
      return Promise.reject(err);
    }
    const ctx: ErrorContext = { worker: entry.url, path };
    if (options.signal?.aborted === true) return Promise.reject(clientAbortedError(ctx, options.signal.reason));
    const stream = options.stream ?? (body !== undefined && body['stream'] === true);
    const headers = requestHeaders(stream, payload !== undefined, options.headers);
    const pool = entry.pool;
    const opts = this.#options;
    return new Promise<EngineResponse>((resolve, reject) => {
      const handler = new ResponseHandler({
        ctx,
        stream,
        startedAt,
        signal: options.signal,
        onDispatched: options.onDispatched,
        maxResponseBytes: opts.maxResponseBytes,
        maxErrorBodyBytes: opts.maxErrorBodyBytes,
        maxEventBytes: opts.maxEventBytes,
        highWaterMark: opts.streamHighWaterMark,
        connections: opts.connections,
        firstByteTimeoutMs: options.firstByteTimeoutMs,
        streamIdleTimeoutMs: options.streamIdleTimeoutMs,
        resolve,
        reject,
      });
      const request: Dispatcher.DispatchOptions = {
        path: `${entry.basePath}${path}`,
        method: payload === undefined ? 'GET' : 'POST',
        headers,
        body: payload ?? null,
        blocking: true,
      };
      if (options.headersTimeoutMs !== undefined) request.headersTimeout = options.headersTimeoutMs;
      if (options.bodyTimeoutMs !== undefined) request.bodyTimeout = options.bodyTimeoutMs;
      try {
        pool.dispatch(request, handler);
      } catch (err) {
        handler.onResponseError(undefined, err as Error);
      }
    });
  }

  /**
   * The registered entry of `workerUrl`, found by the caller's spelling once it was seen.
   * @throws KvgateError KVG_ERR_ENGINE_NOT_REGISTERED for a worker not registered (or a closed client).
   */
  #registered(workerUrl: string): WorkerEntry {
    let entry = this.#byUrl.get(workerUrl);
    if (entry === undefined) {
      const key = normalizeWorkerUrl(workerUrl);
      entry = this.#workers.get(key);
      if (entry === undefined) {
        throw new KvgateError(
          'KVG_ERR_ENGINE_NOT_REGISTERED',
          `no engine pool for worker ${key}${this.#closed ? ' (client closed)' : ''}`,
          {
            worker: key,
          },
        );
      }
      this.#byUrl.set(workerUrl, entry);
    }
    return entry;
  }

  #track(closing: Promise<void>): Promise<void> {
    const p = closing.then(
      () => undefined,
      () => undefined,
    );
    this.#closing.add(p);
    void p.then(() => this.#closing.delete(p));
    return p;
  }
}
