/**
 * The edge's settings (issue 23, section 2): `listen.backlog`,
 * `limits.body_deadline_ms`, `limits.client_address` and
 * `limits.trusted_proxies`, `limits.max_concurrent_requests_per_client`,
 * validated with a reason an operator can act on;
 * which of them a reload may change; `--max-concurrent-requests-per-client`.
 */
import { describe, expect, it } from 'vitest';
import {
  configChanges,
  loadGatewayConfig,
  parseServeFlags,
  reloadProblems,
  serveUsage,
  type ConfigProblem,
  type GatewayConfig,
} from '../../src/config/index.js';
import { DEFAULT_MAX_RESPONSE_BYTES } from '../../src/engines/index.js';
import { isKvgateError } from '../../src/errors/index.js';

const MODELS = [
  { name: 'm', tokenizer: 'demo', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://127.0.0.1:1' }] },
];

function load(doc: Record<string, unknown>): GatewayConfig {
  return loadGatewayConfig({ base: { models: MODELS, ...doc }, env: {} });
}

function problems(doc: Record<string, unknown>): Record<string, string> {
  try {
    load(doc);
  } catch (err) {
    expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
    return Object.fromEntries(
      (err as { detail: { problems: ConfigProblem[] } }).detail.problems.map((p) => [p.path, p.reason]),
    );
  }
  throw new Error('expected the config to be rejected');
}

describe('edge settings', () => {
  it("defaults: the kernel's backlog cap, a 60 s body deadline, the per-client bound by socket address", () => {
    const c = load({});
    expect(c.listenBacklog).toBeGreaterThanOrEqual(1);
    expect(c.limits.bodyDeadlineMs).toBe(60_000);
    expect(c.limits.clientAddress).toEqual({ kind: 'socket' });
    expect(c.limits.trustedProxies).toEqual([]);
  });

  it('reads a proxy setup: the header name in lower case, CIDR blocks and single addresses', () => {
    const c = load({
      listen: { port: 0, backlog: 128 },
      limits: {
        body_deadline_ms: 5000,
        client_address: 'header:X-Forwarded-For',
        trusted_proxies: ['10.0.0.0/8', '192.0.2.7', 'fd00::/8'],
      },
    });
    expect(c.listenBacklog).toBe(128);
    expect(c.limits.bodyDeadlineMs).toBe(5000);
    expect(c.limits.clientAddress).toEqual({ kind: 'header', header: 'x-forwarded-for' });
    expect(c.limits.trustedProxies).toEqual([
      { address: '10.0.0.0', prefix: 8, family: 'ipv4' },
      { address: '192.0.2.7', prefix: 32, family: 'ipv4' },
      { address: 'fd00::', prefix: 8, family: 'ipv6' },
    ]);
    expect(load({ limits: { client_address: 'off' } }).limits.clientAddress).toEqual({ kind: 'off' });
  });

  it('refuses what it cannot honour, each with its field and reason', () => {
    expect(problems({ limits: { client_address: 'x-forwarded-for' } })['limits.client_address']).toMatch(
      /must be socket, off or header:<name>/,
    );
    expect(problems({ limits: { client_address: 'header:' } })['limits.client_address']).toMatch(
      /must be socket, off or header:<name>/,
    );
    expect(
      problems({ limits: { client_address: 'header:Forwarded', trusted_proxies: ['10.0.0.0/8'] } })[
        'limits.client_address'
      ],
    ).toMatch(/RFC 7239/);
    // A header believed from anyone would let every client choose who it is counted as.
    expect(problems({ limits: { client_address: 'header:X-Real-IP' } })['limits.trusted_proxies']).toMatch(
      /is required with client_address header:x-real-ip/,
    );
    expect(problems({ limits: { trusted_proxies: ['10.0.0.0/8'] } })['limits.trusted_proxies']).toMatch(
      /applies only with client_address: header/,
    );
    const bad = problems({
      limits: { client_address: 'header:X-Forwarded-For', trusted_proxies: ['10.0.0.0/33', 'lb.internal', 7] },
    });
    expect(bad['limits.trusted_proxies[0]']).toMatch(/CIDR block/);
    expect(bad['limits.trusted_proxies[1]']).toMatch(/CIDR block/);
    expect(bad['limits.trusted_proxies[2]']).toMatch(/must be a string/);
    expect(problems({ listen: { backlog: 0 } })['listen.backlog']).toMatch(/integer in \[1, 65535\]/);
    expect(problems({ limits: { body_deadline_ms: 0 } })['limits.body_deadline_ms']).toMatch(
      /integer in \[1, 3600000\]/,
    );
  });

  it('a reload may change the body deadline, the client address and the trusted proxies, not the backlog', () => {
    const before = load({ listen: { port: 0, backlog: 128 } });
    const after = load({
      listen: { port: 0, backlog: 128 },
      limits: { body_deadline_ms: 5000, client_address: 'header:X-Forwarded-For', trusted_proxies: ['10.0.0.0/8'] },
    });
    expect(reloadProblems(before, after)).toEqual([]);
    expect(configChanges(before, after).map((c) => c.path)).toEqual([
      'limits.body_deadline_ms',
      'limits.client_address',
      'limits.trusted_proxies',
    ]);
    expect(reloadProblems(before, load({ listen: { port: 0, backlog: 256 } })).map((p) => p.path)).toEqual([
      'listen.backlog',
    ]);
  });

  it('limits.max_connections: by default room for four clients at their own bound; set, above the per-client bound', () => {
    expect(load({}).limits).toMatchObject({ maxConnectionsPerClient: 2048, maxConnections: 8192 });
    // The per-client default follows the concurrency bound, and the gateway's follows it; a larger per-client bound too.
    expect(load({ limits: { max_concurrent_requests: 4096 } }).limits.maxConnections).toBe(32_768);
    expect(load({ limits: { max_connections_per_client: 100_000 } }).limits.maxConnections).toBe(400_000);
    // The per-client bound off: the gateway's still follows its default.
    expect(load({ limits: { max_connections_per_client: 0 } }).limits.maxConnections).toBe(8192);
    expect(load({ limits: { max_connections: 0 } }).limits.maxConnections).toBe(0);
    expect(load({ limits: { max_connections: 500, max_connections_per_client: 50 } }).limits.maxConnections).toBe(500);
    expect(problems({ limits: { max_connections: 2048 } })['limits.max_connections']).toMatch(
      /\(2048\) must be larger than max_connections_per_client \(2048\): one client could hold every connection/,
    );
    expect(problems({ limits: { max_connections: -1 } })['limits.max_connections']).toMatch(/integer in \[0, /);
    // Behind proxies the per-client bound counts no connections: nothing to be larger than.
    const proxied = { client_address: 'header:X-Forwarded-For', trusted_proxies: ['10.0.0.0/8'], max_connections: 64 };
    expect(load({ limits: proxied }).limits.maxConnections).toBe(64);
    const before = load({});
    const after = load({ limits: { max_connections: 10_000 } });
    expect(reloadProblems(before, after)).toEqual([]);
    expect(configChanges(before, after).map((c) => c.path)).toEqual(['limits.max_connections']);
  });

  it('limits.max_concurrent_requests_per_client: off by default; set, below the gateway-wide bound and with a client to count', () => {
    expect(load({}).limits.maxConcurrentRequestsPerClient).toBe(0);
    expect(load({ limits: { max_concurrent_requests_per_client: 64 } }).limits.maxConcurrentRequestsPerClient).toBe(64);
    const proxied = { client_address: 'header:X-Forwarded-For', trusted_proxies: ['10.0.0.0/8'] };
    expect(
      load({ limits: { ...proxied, max_concurrent_requests: 100, max_concurrent_requests_per_client: 99 } }).limits,
    ).toMatchObject({ maxConcurrentRequests: 100, maxConcurrentRequestsPerClient: 99 });
    const key = 'limits.max_concurrent_requests_per_client';
    expect(problems({ limits: { max_concurrent_requests_per_client: 1024 } })[key]).toMatch(
      /\(1024\) must be smaller than max_concurrent_requests \(1024\): one client could hold every request slot/,
    );
    expect(problems({ limits: { max_concurrent_requests: 8, max_concurrent_requests_per_client: 16 } })[key]).toMatch(
      /must be smaller than max_concurrent_requests \(8\)/,
    );
    expect(problems({ limits: { max_concurrent_requests_per_client: -1 } })[key]).toMatch(/integer in \[0, /);
    expect(problems({ limits: { max_concurrent_requests_per_client: 1.5 } })[key]).toMatch(/integer/);
    // With client_address off there is no client to count by; 0 is accepted there.
    expect(problems({ limits: { client_address: 'off', max_concurrent_requests_per_client: 8 } })[key]).toMatch(
      /client_address: off names no client/,
    );
    expect(load({ limits: { client_address: 'off', max_concurrent_requests_per_client: 0 } }).limits).toMatchObject({
      maxConcurrentRequestsPerClient: 0,
    });
    const before = load({});
    const after = load({ limits: { max_concurrent_requests_per_client: 32 } });
    expect(reloadProblems(before, after)).toEqual([]);
    expect(configChanges(before, after).map((c) => c.path)).toEqual([key]);
  });
});

describe('--max-concurrent-requests-per-client', () => {
  const FLAG = '--max-concurrent-requests-per-client';
  const withFlags = (argv: string[]): GatewayConfig =>
    loadGatewayConfig({ base: { models: MODELS }, overrides: parseServeFlags(argv).overrides, env: {} });
  /** The problems `argv` is refused with, as [source, path, reason]. */
  function refused(argv: string[]): [string | undefined, string, string][] {
    try {
      withFlags(argv);
    } catch (err) {
      expect(isKvgateError(err, 'KVG_ERR_INVALID_CONFIG')).toBe(true);
      const problems = (err as { detail: { problems: ConfigProblem[] } }).detail.problems;
      return problems.map((p) => [p.source, p.path, p.reason]);
    }
    throw new Error('expected the flags to be refused');
  }

  it('sets limits.max_concurrent_requests_per_client, over the file, beside --max-concurrent-requests', () => {
    expect(withFlags([FLAG, '8']).limits.maxConcurrentRequestsPerClient).toBe(8);
    expect(withFlags([FLAG, '0']).limits.maxConcurrentRequestsPerClient).toBe(0);
    const both = withFlags(['--max-concurrent-requests', '100', FLAG, '99']).limits;
    expect(both).toMatchObject({ maxConcurrentRequests: 100, maxConcurrentRequestsPerClient: 99 });
    const file = loadGatewayConfig({
      base: { models: MODELS, limits: { max_concurrent_requests_per_client: 4 } },
      overrides: parseServeFlags([FLAG, '16']).overrides,
      env: {},
    });
    expect(file.limits.maxConcurrentRequestsPerClient).toBe(16);
    expect(serveUsage()).toContain(`${FLAG} N`);
  });

  it('a bad value is refused naming the flag and the field, with the reason', () => {
    const path = 'limits.max_concurrent_requests_per_client';
    expect(refused([FLAG, 'many'])).toEqual([[FLAG, path, expect.stringMatching(/integer/)]]);
    // A value starting with a dash is taken after `=`, as for every flag.
    expect(refused([`${FLAG}=-1`])).toEqual([[FLAG, path, expect.stringMatching(/integer in \[0, /)]]);
    expect(refused([FLAG, '2.5'])).toEqual([[FLAG, path, expect.stringMatching(/integer/)]]);
    expect(refused(['--max-concurrent-requests', '8', FLAG, '8'])).toEqual([
      [FLAG, path, expect.stringMatching(/must be smaller than max_concurrent_requests \(8\)/)],
    ]);
  });
});

describe('limits.max_response_bytes', () => {
  it('64 MiB by default, as the engine client; set by the file or --max-response-bytes; a reload cannot change it', () => {
    expect(load({}).limits.maxResponseBytes).toBe(DEFAULT_MAX_RESPONSE_BYTES);
    const set = load({ limits: { max_response_bytes: 1 << 28 } });
    expect(set.limits.maxResponseBytes).toBe(1 << 28);
    const flagged = loadGatewayConfig({
      base: { models: MODELS, limits: { max_response_bytes: 1 << 28 } },
      overrides: parseServeFlags(['--max-response-bytes', '1048576']).overrides,
      env: {},
    });
    expect(flagged.limits.maxResponseBytes).toBe(1 << 20);
    expect(serveUsage()).toContain('--max-response-bytes N');
    // The engine client is built once with it.
    expect(reloadProblems(load({}), set).map((p) => p.path)).toEqual(['limits.max_response_bytes']);
  });

  it('refuses a bound below 64 KiB or past what one V8 string holds', () => {
    expect(problems({ limits: { max_response_bytes: 1000 } })['limits.max_response_bytes']).toMatch(
      /must be an integer in \[65536, 536870912\], got 1000/,
    );
    expect(problems({ limits: { max_response_bytes: 2 ** 30 } })['limits.max_response_bytes']).toMatch(/integer in/);
  });
});

describe('admin endpoints any client can reach', () => {
  const exposed = (c: GatewayConfig): string | undefined => c.warnings.find((w) => w.startsWith('admin.enabled'));

  it('are a warning on the public listener beyond loopback without API keys', () => {
    const w = exposed(load({ listen: { host: '0.0.0.0', port: 8080 }, admin: { enabled: true } }));
    expect(w).toContain('any client that reaches 0.0.0.0:8080');
    expect(w).toContain('admin.port');
  });

  it('are no warning behind API keys, on their own listener, on loopback, or off', () => {
    const open = { listen: { host: '0.0.0.0', port: 8080 } };
    for (const doc of [
      { ...open, admin: { enabled: true }, auth: { api_keys: ['sk-kvgate-test'] } },
      { ...open, admin: { enabled: true, host: '127.0.0.1', port: 9090 } },
      { listen: { host: '127.0.0.1', port: 8080 }, admin: { enabled: true } },
      { listen: { host: '::1', port: 8080 }, admin: { enabled: true } },
      { ...open, admin: { enabled: false } },
    ])
      expect(exposed(load(doc)), JSON.stringify(doc)).toBeUndefined();
  });
});
