/**
 * Who a request's client is behind a proxy (`limits.client_address:
 * header:<name>` with `limits.trusted_proxies`): the right-most entry of the
 * forwarding header that is not a trusted proxy, believed only from a trusted
 * peer; a trusted peer without a usable header is counted as itself, and that
 * fallback is reported.
 */
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';
import { ClientAddresses, type FallbackReason } from '../../src/frontend/client-address.js';

/** The addresses of a config with these limits; fallbacks are collected in `fallbacks`. */
function addresses(limits: Record<string, unknown>): { addrs: ClientAddresses; fallbacks: FallbackReason[] } {
  const models = [
    { name: 'm', tokenizer: 'demo', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://127.0.0.1:1' }] },
  ];
  const config = loadGatewayConfig({ base: { limits, models }, env: {} });
  const fallbacks: FallbackReason[] = [];
  return {
    addrs: new ClientAddresses(config.limits.clientAddress, config.limits.trustedProxies, (r) => fallbacks.push(r)),
    fallbacks,
  };
}

function request(peer: string, headers: Record<string, string> = {}): IncomingMessage {
  return { socket: { remoteAddress: peer } as Socket, headers } as unknown as IncomingMessage;
}

const BEHIND_LB = { client_address: 'header:X-Forwarded-For', trusted_proxies: ['10.0.0.0/8', 'fd00::/8'] };

describe('client addresses behind a proxy', () => {
  it("the right-most entry that is not a trusted proxy is the client; entries to its left (the client's own) are ignored", () => {
    const { addrs } = addresses(BEHIND_LB);
    expect(addrs.ofRequest(request('10.0.0.5', { 'x-forwarded-for': '203.0.113.7' }))).toBe('203.0.113.7');
    // A client that writes its own X-Forwarded-For cannot choose who it is counted as.
    expect(addrs.ofRequest(request('10.0.0.5', { 'x-forwarded-for': '198.51.100.1, 203.0.113.7' }))).toBe(
      '203.0.113.7',
    );
    // Two proxies: the inner one's entry is skipped.
    expect(addrs.ofRequest(request('10.0.0.5', { 'x-forwarded-for': '198.51.100.1, 203.0.113.7, 10.1.2.3' }))).toBe(
      '203.0.113.7',
    );
    // Ports and brackets, as some proxies write them; IPv4-mapped IPv6 peers are their IPv4 address.
    expect(addrs.ofRequest(request('::ffff:10.0.0.5', { 'x-forwarded-for': '203.0.113.7:51234' }))).toBe('203.0.113.7');
    expect(addrs.ofRequest(request('fd00::1', { 'x-forwarded-for': '[2001:db8::7]:443' }))).toBe('2001:db8::7');
    // Every entry a trusted proxy: the left-most.
    expect(addrs.ofRequest(request('10.0.0.5', { 'x-forwarded-for': '10.9.9.9, 10.1.2.3' }))).toBe('10.9.9.9');
  });

  it('a peer that is not a trusted proxy is the client, whatever header it sends', () => {
    const { addrs, fallbacks } = addresses(BEHIND_LB);
    expect(addrs.ofRequest(request('192.0.2.44', { 'x-forwarded-for': '203.0.113.7' }))).toBe('192.0.2.44');
    expect(addrs.ofConnection({ remoteAddress: '192.0.2.44' } as Socket)).toBeUndefined(); // counted per request, not per connection
    expect(fallbacks).toEqual([]);
  });

  it('a trusted proxy without a usable header counts as itself, and each such request is reported', () => {
    const { addrs, fallbacks } = addresses(BEHIND_LB);
    expect(addrs.ofRequest(request('10.0.0.5'))).toBe('10.0.0.5');
    expect(addrs.ofRequest(request('10.0.0.5', { 'x-forwarded-for': 'unknown' }))).toBe('10.0.0.5');
    // Garbage left of a good entry is the client's own writing: the good entry stands, nothing to report.
    expect(addrs.ofRequest(request('10.0.0.5', { 'x-forwarded-for': 'garbage, 203.0.113.7' }))).toBe('203.0.113.7');
    expect(fallbacks).toEqual(['missing', 'invalid']);
  });

  it('a single-address header the operator names (X-Real-IP) works the same way', () => {
    const { addrs } = addresses({ client_address: 'header:X-Real-IP', trusted_proxies: ['127.0.0.1'] });
    expect(addrs.ofRequest(request('127.0.0.1', { 'x-real-ip': '203.0.113.9' }))).toBe('203.0.113.9');
    expect(addrs.ofRequest(request('127.0.0.2', { 'x-real-ip': '203.0.113.9' }))).toBe('127.0.0.2');
  });

  it('socket counts the peer from accept; off counts nobody', () => {
    expect(addresses({}).addrs.ofConnection({ remoteAddress: '::ffff:192.0.2.1' } as Socket)).toBe('192.0.2.1');
    const off = addresses({ client_address: 'off' }).addrs;
    expect(off.ofConnection({ remoteAddress: '192.0.2.1' } as Socket)).toBeUndefined();
    expect(off.ofRequest(request('192.0.2.1'))).toBeUndefined();
  });
});
