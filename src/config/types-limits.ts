/**
 * The typed config of the HTTP edge's `limits` section (a part of `GatewayConfig`, re-exported by types.ts): body,
 * prompt and concurrency bounds, the slow-client bounds, the per-client bounds and who one client is.
 */
/**
 * Whose requests `limits.max_pending_connections_per_client` and `limits.max_concurrent_requests_per_client` count
 * together:
 * - `socket`: the TCP peer's address, from the moment a connection is accepted;
 * - `off`: nobody's (no per-client bound; the header and body deadlines still apply);
 * - `header`: the address a trusted proxy put in `header` (lower case), per request once its headers arrived:
 *   the right-most entry not in `trustedProxies` (X-Forwarded-For's rule). A peer outside `trustedProxies`
 *   is itself the client, whatever its header says.
 */
export type ClientAddressSource =
  { readonly kind: 'socket' } | { readonly kind: 'off' } | { readonly kind: 'header'; readonly header: string };

/** A CIDR block of `limits.trusted_proxies` (a single address is a block of its full length). */
export interface AddressBlock {
  readonly address: string;
  readonly prefix: number;
  readonly family: 'ipv4' | 'ipv6';
}

export interface LimitsConfig {
  /** Request bodies above this get 413. */
  readonly maxBodyBytes: number;
  /**
   * The largest answer kvgate holds whole: an engine's unstreamed answer (past it: 502 KVG_ERR_ENGINE_BAD_RESPONSE,
   * `too_large`) and a `stream: false` answer assembled from the engine's stream (502 KVG_ERR_ANSWER_TOO_LARGE).
   * A streamed answer is relayed as the client reads it and is not bounded so. Read at start (the engine client's).
   */
  readonly maxResponseBytes: number;
  /** Prompts above this many tokens get 400 (per-model override in ModelConfig). */
  readonly maxPromptTokens: number;
  /** Chat requests with more messages than this get 400 KVG_ERR_TOO_MANY_MESSAGES (each message costs a template render). */
  readonly maxMessages: number;
  /** Requests in flight (completions and /v1/route) above this get 429 with Retry-After. */
  readonly maxConcurrentRequests: number;
  /**
   * Requests in flight one client (`clientAddress`) may hold of `maxConcurrentRequests`; one more gets 429
   * KVG_ERR_TOO_MANY_CLIENT_REQUESTS with Retry-After. 0: no bound (the default).
   */
  readonly maxConcurrentRequestsPerClient: number;
  /** Deadline of a request once its body has arrived (it then holds a concurrency slot), to the last byte of the answer. */
  readonly requestTimeoutMs: number;
  /** A client that has not sent complete request headers this long after it started gets 408. */
  readonly headerTimeoutMs: number;
  /** A client whose request body pauses longer than this between two chunks gets 408. */
  readonly bodyTimeoutMs: number;
  /** A request body not complete this long after its headers arrived gets 408 (and the connection is closed). */
  readonly bodyDeadlineMs: number;
  /** A streamed answer whose client takes none of what the gateway has buffered for it this long is ended and its booking freed. */
  readonly clientStallTimeoutMs: number;
  /** Connections one client address may hold open without a complete request; more are answered 429 and closed. */
  readonly maxPendingConnectionsPerClient: number;
  /**
   * Connections one client address (by TCP peer: `clientAddress: socket`) may hold open in all, idle keep-alive ones
   * included; one more is closed at once. 0: no bound.
   */
  readonly maxConnectionsPerClient: number;
  /**
   * Client connections the public listener holds open in all (per process), idle keep-alive ones included; one more
   * is closed at accept, before any byte of it is read. 0: no bound. Larger than `maxConnectionsPerClient`, so one
   * client at its own bound leaves room for others.
   */
  readonly maxConnections: number;
  /** What a "client address" of the per-client bounds is. */
  readonly clientAddress: ClientAddressSource;
  /** The proxies whose forwarding header `clientAddress: header` believes. */
  readonly trustedProxies: readonly AddressBlock[];
  /** The Retry-After value sent with 429 and 503. */
  readonly retryAfterSeconds: number;
  /** Longest sticky-session timeout; a longer `session_control.timeout` is clamped to it. */
  readonly maxSessionTimeoutS: number;
  /** Sticky session bindings kept per model and pool; beyond it the least recently used is dropped. */
  readonly maxSessions: number;
}
