/**
 * The port between the HTTP frontend and routing. The frontend validates,
 * authenticates, tokenizes and hashes; a `ModelRouterPort` (one per model,
 * implemented in src/routing) chooses the worker(s), books the request,
 * dispatches it and hands back the engine's answer. Nothing else crosses.
 *
 * Contract, in order of a request's life:
 * 1. `canServe()` is false: the frontend answers with `unavailable()` (503
 *    KVG_ERR_MODEL_UNAVAILABLE, or KVG_ERR_PREFILL_NOT_ACTIVATED for a model that
 *    must serve disaggregated, by `enforce_disagg` or because its decode workers are
 *    decode-only, and has no prefill worker) and hides the model from /v1/models;
 *    `route`/`query` are not called.
 * 2. `route(req)` resolves once the upstream response has started (status and
 *    headers known), and settles promptly when `req.signal` fires (the frontend
 *    then answers with the signal's reason: 504 on timeout, nothing on a client
 *    gone). Rejecting means nothing is booked: reject with a KvgateError
 *    (its `statusCode` becomes the HTTP status: KVG_ERR_UNKNOWN_WORKER 400,
 *    KVG_ERR_NO_WORKERS 503, ...); any other error is answered as a 500.
 * 3. An SSE body is iterated to its end by the frontend, which writes each event
 *    untouched (its raw bytes, or `data: <payload>\n\n`), including the final
 *    `[DONE]`, which the iterable must yield if the engine sent it. If the client disconnects, the
 *    frontend fires `req.signal` and then calls `return()` on the iterator; the
 *    port frees its bookkeeping on every exit: end, throw, return, abort.
 *    An error thrown mid-stream is sent to the client as a final
 *    `data: {"error": {...}}` event.
 * 4. `query(req)` (query-only mode, `POST /v1/route` or the `query_instance_id:`
 *    annotation) chooses as `route` would but books nothing and dispatches nothing.
 * 5. `close()` on shutdown, after in-flight requests drained or were aborted.
 */
import type { CancelSignal, RoutingHints, WorkerRank } from '../common/index.js';
import type { KvgateError } from '../errors/index.js';
import type { PromptHashes } from '../wasm/index.js';

export type { RoutingHints };

/**
 * Which endpoint a request came in on (the port dispatches to the same one): OpenAI's chat and completions, the
 * APIs coding agents speak, Anthropic's Messages and OpenAI's Responses (forwarded to the engine's own), and
 * OpenAI's embeddings (routed by load alone: embeddings.ts).
 */
export type EndpointKind = 'chat' | 'completion' | 'messages' | 'responses' | 'embeddings';

/** A request ready to route: validated, tokenized, hashed. Immutable. */
export interface PreparedRequest {
  /** `x-request-id` from the client when well-formed, else a generated UUID; echoed on the response. */
  readonly requestId: string;
  readonly model: string;
  readonly endpoint: EndpointKind;
  /**
   * The client's JSON body as sent, minus `nvext` (a routing extension engines do not
   * know). Forward it as is; add only what dispatch needs (dp rank, P/D fields).
   */
  readonly body: Readonly<Record<string, unknown>>;
  readonly stream: boolean;
  /**
   * The prompt's token ids (chat template applied). Empty when the port's `readsTokenIds` is false and the answer
   * does not show them: a long prompt's ids then stay on the preprocessing thread that made them.
   */
  readonly tokenIds: Uint32Array;
  /** The prompt's length in tokens, whether or not `tokenIds` holds them. */
  readonly promptTokens: number;
  /** The local block hashes and chained sequence hashes of the complete blocks (`blockSize` tokens each). */
  readonly hashes: PromptHashes;
  /** Milliseconds spent computing the hashes (reported as the routing overhead's block_hashing stage). */
  readonly hashingMs?: number | undefined;
  /** True when the tokens come from the fallback tokenizer (model without tokenizer): hashes approximate the engine's. */
  readonly approximate: boolean;
  /** Validated once by the frontend (the router-config override included) and carried unchanged to the scheduler. */
  readonly hints: RoutingHints;
  /** Query-only (`query_instance_id:` annotation or /v1/route): `query` is called instead of `route`. */
  readonly queryOnly: boolean;
  /** Fires on client disconnect, request timeout or forced shutdown; `signal.reason` is a KvgateError. */
  readonly signal: CancelSignal;
  /** `performance.now()` when the request arrived (for TTFT measured from arrival). */
  readonly receivedAt: number;
}

/**
 * One SSE event of the engine's stream. src/engines' `EngineEvent` satisfies it,
 * so an engine stream can be handed over as is.
 */
export interface SseEvent {
  /** The exact bytes of the event block (terminating blank line included): written untouched when present. */
  readonly raw?: Uint8Array | undefined;
  /** The event's data (multi-line data joined by `\n`): written as `data: <data>\n\n` when `raw` is absent. */
  readonly data: Uint8Array | string;
}

export type RoutedBody =
  | { readonly kind: 'sse'; readonly events: AsyncIterable<SseEvent> }
  | { readonly kind: 'json'; readonly bytes: Uint8Array | string };

export interface RoutedResponse {
  /** The worker serving the request (decode worker when disaggregated): the `x-kvgate-worker` header. */
  readonly worker: WorkerRank;
  /** The prefill worker when disaggregated: the `x-kvgate-prefill-worker` header. */
  readonly prefillWorker?: WorkerRank | undefined;
  /**
   * A model with a prefill pool: the disaggregation policy's decision and reason (`disaggregated; reason=long_input`),
   * the `x-kvgate-disagg` header.
   */
  readonly disagg?: string | undefined;
  /** The engine's HTTP status, passed to the client (an engine 4xx as its message in kvgate's error object, engines' `refusalBody`). */
  readonly status: number;
  readonly body: RoutedBody;
}

/** The routing decision of a query-only request. */
export interface QueryResult {
  /** Decode (or aggregated) worker. */
  readonly worker: WorkerRank;
  readonly prefillWorker?: WorkerRank | undefined;
  /** Blocks of the prompt the chosen worker already holds (per the index). */
  readonly overlapBlocks: number;
  readonly prefillOverlapBlocks?: number | undefined;
}

/** One configured worker as /admin/models shows it. */
export interface WorkerStatus {
  readonly id: number;
  /** Routable now. */
  readonly up: boolean;
  /**
   * The health prober's view: up, down (ejected on failed probes), ejected (for consecutive errors on dispatch),
   * kept (failing, beyond the ejection limit), model_mismatch, unknown.
   */
  readonly health: string;
  /** KV events: live, stale, never (none yet), down (worker down), off (none configured). */
  readonly kvEvents: string;
  /** Of the worker's dp ranks, those whose KV-event publisher kvgate is connected to now (undefined: no KV events). */
  readonly kvEventRanksConnected: number | undefined;
  /** ISO time of the last usable KV-event batch. */
  readonly lastEventAt: string | undefined;
  readonly lastProbeAt: string | undefined;
  /** Why the last failing health probe failed. */
  readonly lastError: string | undefined;
}

export interface ModelRouterPort {
  readonly model: string;
  /** Must equal the model's configured block size (the frontend hashes with it). */
  readonly blockSize: number;
  /**
   * False when the port reads a request's `promptTokens` and hashes, never its `tokenIds`: the frontend then hands it
   * the ids only when the answer shows them. Absent means true.
   */
  readonly readsTokenIds?: boolean | undefined;
  /** At least one worker is available to serve (cheap; called per request and by /v1/models and /ready). */
  canServe(): boolean;
  /** The 503 error to answer with while `canServe()` is false; undefined while it is true. */
  unavailable(): KvgateError | undefined;
  /**
   * The LoRA adapters of this model that can be served now (cheap; called per request naming an
   * unknown model, and by /v1/models). A request for one carries it in `hints.loraName`.
   */
  adapters(): readonly string[];
  /** Each configured worker's state (for /admin/models); absent on ports that do not track workers. */
  workerStatus?(): readonly WorkerStatus[];
  route(req: PreparedRequest): Promise<RoutedResponse>;
  query(req: PreparedRequest): Promise<QueryResult>;
  close(): Promise<void>;
}
