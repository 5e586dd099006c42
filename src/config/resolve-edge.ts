/**
 * The HTTP edge's sections: the public listener (address and listen backlog)
 * and `limits` (body, prompt and concurrency bounds, the slow-client bounds and
 * who counts as one client behind a proxy).
 */
import { isIP } from 'node:net';
import { checkHost } from './checks.js';
import { defaultListenBacklog, GATEWAY_DEFAULTS, kernelBacklogCap } from './defaults.js';
import { show, type ConfigReader } from './reader.js';
import type { AddressBlock, ClientAddressSource, GatewayConfig, ListenAddress } from './types.js';

/** The `listen` section: the public listener's address, and its backlog (`listenBacklog`). */
export function readListen(
  r: ConfigReader | undefined,
  warnings: string[],
): { listen: ListenAddress; listenBacklog: number } {
  const D = GATEWAY_DEFAULTS;
  r?.allowOnly(['host', 'port', 'backlog']);
  const listenBacklog = r?.int('backlog', defaultListenBacklog(), { min: 1, max: 65_535 }) ?? defaultListenBacklog();
  const cap = kernelBacklogCap();
  if (cap !== undefined && listenBacklog > cap) {
    warnings.push(
      `listen.backlog ${listenBacklog} is above the kernel's net.core.somaxconn (${cap}), which caps it; ` +
        'raise net.core.somaxconn to use it',
    );
  }
  const listen = {
    host: r?.str('host', D.host, checkHost) ?? D.host,
    port: r?.int('port', D.port, { min: 0, max: 65535 }) ?? D.port,
  };
  return { listen, listenBacklog };
}

/**
 * The warning for admin endpoints any client can reach: on the public listener (no `admin.port`), bound beyond
 * loopback, with no API keys. They show the resolved config and every worker's URL and reload the config file, so
 * kvgate serves them (an operator may mean it, on a private network) but says so at start.
 */
export function adminExposure(
  admin: GatewayConfig['admin'],
  listen: ListenAddress,
  apiKeys: readonly string[],
): string | undefined {
  if (!admin.enabled || admin.listen !== undefined || apiKeys.length > 0) return undefined;
  const host = listen.host.replace(/^\[|\]$/g, '');
  if (host === 'localhost' || host === '::1' || (isIP(host) === 4 && host.startsWith('127.'))) return undefined;
  return (
    `admin.enabled without admin.port or API keys: the admin endpoints (/admin/config, /admin/models with every ` +
    `worker's URL, POST /admin/reload) are served to any client that reaches ${listen.host}:${listen.port}; set ` +
    'admin.port (a separate listener on a private address) or auth.api_keys'
  );
}

/** RFC 9110's token: what a header name may be made of. */
export const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

function readClientAddress(lim: ConfigReader): ClientAddressSource {
  const raw = lim.node.client_address;
  if (raw === undefined || raw === null || raw === 'socket') return { kind: 'socket' };
  if (raw === 'off') return { kind: 'off' };
  const header =
    typeof raw === 'string' && raw.startsWith('header:') ? raw.slice('header:'.length).trim().toLowerCase() : undefined;
  if (header === undefined || !TOKEN.test(header)) {
    lim.problem(
      'client_address',
      `must be socket, off or header:<name> (e.g. header:X-Forwarded-For), got ${show(raw)}`,
    );
    return { kind: 'socket' };
  }
  if (header === 'forwarded') {
    lim.problem(
      'client_address',
      'names Forwarded (RFC 7239), whose for= syntax kvgate does not read; use X-Forwarded-For or a header that carries the address',
    );
  }
  return { kind: 'header', header };
}

/** `10.0.0.0/8`, `fd00::/8` or a single address, as a block; a reason when it is neither. */
function addressBlock(s: string): AddressBlock | string {
  const [address = '', length, ...rest] = s.trim().split('/');
  const version = isIP(address);
  const max = version === 4 ? 32 : 128;
  const prefix = length === undefined ? max : /^\d{1,3}$/.test(length) ? Number(length) : Number.NaN;
  if (version === 0 || rest.length > 0 || !(prefix <= max))
    return 'must be an IP address or a CIDR block such as 10.0.0.0/8 or fd00::/8';
  return { address, prefix, family: version === 4 ? 'ipv4' : 'ipv6' };
}

function readTrustedProxies(lim: ConfigReader, source: ClientAddressSource): AddressBlock[] {
  const blocks: AddressBlock[] = [];
  lim.list('trusted_proxies')?.forEach((v, i) => {
    const block = typeof v === 'string' ? addressBlock(v) : 'must be a string';
    if (typeof block === 'string') lim.problemAt([...lim.path, 'trusted_proxies', i], `${block}, got ${show(v)}`);
    else blocks.push(block);
  });
  if (source.kind === 'header' && !lim.has('trusted_proxies')) {
    lim.problem(
      'trusted_proxies',
      `is required with client_address header:${source.header}: the proxies whose header is believed, e.g. [10.0.0.0/8]`,
    );
  } else if (source.kind !== 'header' && lim.has('trusted_proxies')) {
    lim.problem('trusted_proxies', 'applies only with client_address: header:<name>');
  }
  return blocks;
}

/**
 * `limits.max_connections`: by default room for `clientsAtConnectionBound` clients each at its own bound (the one in
 * force, or its default where it is off), so no existing setup of the per-client bound is refused by the new one.
 * Set by hand, it must exceed the per-client bound where that bound applies (by socket, not 0): one client could
 * hold every connection otherwise.
 */
function readMaxConnections(
  lim: ConfigReader | undefined,
  perClient: number,
  perClientDefault: number,
  source: ClientAddressSource,
): number {
  const fallback = GATEWAY_DEFAULTS.clientsAtConnectionBound * Math.max(perClient, perClientDefault);
  const n = lim?.int('max_connections', fallback, { min: 0, max: 1 << 22 }) ?? fallback;
  // By socket the per-client bound applies at accept; behind proxies (or off) it counts no connections.
  if (lim?.has('max_connections') === true && source.kind === 'socket' && n > 0 && perClient > 0 && n <= perClient) {
    lim.problem(
      'max_connections',
      `(${n}) must be larger than max_connections_per_client (${perClient}): one client could hold every ` +
        'connection; lower max_connections_per_client or raise max_connections',
    );
  }
  return n;
}

/**
 * `limits.max_concurrent_requests_per_client` (0, the default: off). Set, it must leave room for another client
 * below `max_concurrent_requests` (at or above it, one client could still hold every slot), and it needs a client
 * identity to count by (`client_address: off` names none).
 */
function readPerClientRequests(lim: ConfigReader | undefined, total: number, source: ClientAddressSource): number {
  const D = GATEWAY_DEFAULTS.maxConcurrentRequestsPerClient;
  const n = lim?.int('max_concurrent_requests_per_client', D, { min: 0, max: 1 << 20 }) ?? D;
  if (n === 0 || lim === undefined) return n;
  if (n >= total) {
    lim.problem(
      'max_concurrent_requests_per_client',
      `(${n}) must be smaller than max_concurrent_requests (${total}): one client could hold every request slot; ` +
        'lower it, raise max_concurrent_requests, or set 0 for no per-client bound',
    );
  }
  if (source.kind === 'off') {
    lim.problem(
      'max_concurrent_requests_per_client',
      'counts requests per client, and client_address: off names no client; set client_address (socket or ' +
        'header:<name>) or max_concurrent_requests_per_client: 0',
    );
  }
  return n;
}

export function readLimits(root: ConfigReader): GatewayConfig['limits'] {
  const lim = root.child('limits');
  lim?.allowOnly([
    'max_body_bytes',
    'max_response_bytes',
    'max_prompt_tokens',
    'max_messages',
    'max_concurrent_requests',
    'max_concurrent_requests_per_client',
    'request_timeout_ms',
    'retry_after_seconds',
    'header_timeout_ms',
    'body_timeout_ms',
    'body_deadline_ms',
    'client_stall_timeout_ms',
    'max_pending_connections_per_client',
    'max_connections_per_client',
    'max_connections',
    'client_address',
    'trusted_proxies',
    'max_session_timeout_s',
    'max_sessions',
  ]);
  const D = GATEWAY_DEFAULTS;
  const clientAddress = lim !== undefined ? readClientAddress(lim) : { kind: 'socket' as const };
  const maxConcurrentRequests =
    lim?.int('max_concurrent_requests', D.maxConcurrentRequests, { min: 1, max: 1 << 20 }) ?? D.maxConcurrentRequests;
  // A proxy in front holds one connection per request it streams: the default leaves it twice the concurrency bound.
  const perClientDefault = Math.max(D.maxConnectionsPerClient, 2 * maxConcurrentRequests);
  const maxConnectionsPerClient =
    lim?.int('max_connections_per_client', perClientDefault, { min: 0, max: 1 << 20 }) ?? perClientDefault;
  return {
    maxBodyBytes: lim?.int('max_body_bytes', D.maxBodyBytes, { min: 1024, max: 1 << 30 }) ?? D.maxBodyBytes,
    // A V8 string holds at most 2^29 characters: an answer past 512 MiB could not be sent whole anyway.
    maxResponseBytes:
      lim?.int('max_response_bytes', D.maxResponseBytes, { min: 64 * 1024, max: 1 << 29 }) ?? D.maxResponseBytes,
    maxPromptTokens: lim?.int('max_prompt_tokens', D.maxPromptTokens, { min: 1, max: 1 << 26 }) ?? D.maxPromptTokens,
    maxMessages: lim?.int('max_messages', D.maxMessages, { min: 1, max: 1 << 24 }) ?? D.maxMessages,
    maxConcurrentRequests,
    maxConcurrentRequestsPerClient: readPerClientRequests(lim, maxConcurrentRequests, clientAddress),
    requestTimeoutMs:
      lim?.int('request_timeout_ms', D.requestTimeoutMs, { min: 1, max: 86_400_000 }) ?? D.requestTimeoutMs,
    retryAfterSeconds:
      lim?.int('retry_after_seconds', D.retryAfterSeconds, { min: 0, max: 3600 }) ?? D.retryAfterSeconds,
    headerTimeoutMs: lim?.int('header_timeout_ms', D.headerTimeoutMs, { min: 1, max: 3_600_000 }) ?? D.headerTimeoutMs,
    bodyTimeoutMs: lim?.int('body_timeout_ms', D.bodyTimeoutMs, { min: 1, max: 3_600_000 }) ?? D.bodyTimeoutMs,
    bodyDeadlineMs: lim?.int('body_deadline_ms', D.bodyDeadlineMs, { min: 1, max: 3_600_000 }) ?? D.bodyDeadlineMs,
    clientStallTimeoutMs:
      lim?.int('client_stall_timeout_ms', D.clientStallTimeoutMs, { min: 1, max: 3_600_000 }) ?? D.clientStallTimeoutMs,
    maxPendingConnectionsPerClient:
      lim?.int('max_pending_connections_per_client', D.maxPendingConnectionsPerClient, { min: 1, max: 1 << 20 }) ??
      D.maxPendingConnectionsPerClient,
    maxConnectionsPerClient,
    maxConnections: readMaxConnections(lim, maxConnectionsPerClient, perClientDefault, clientAddress),
    clientAddress,
    trustedProxies: lim !== undefined ? readTrustedProxies(lim, clientAddress) : [],
    maxSessionTimeoutS:
      lim?.int('max_session_timeout_s', D.maxSessionTimeoutS, { min: 1, max: 30 * 86_400 }) ?? D.maxSessionTimeoutS,
    maxSessions: lim?.int('max_sessions', D.maxSessions, { min: 1, max: 1 << 24 }) ?? D.maxSessions,
  };
}
