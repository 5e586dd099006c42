/**
 * The per-client bound on requests that have not fully arrived
 * (`limits.max_pending_connections_per_client`) under each
 * `limits.client_address`: by socket from accept, behind a proxy per request
 * (a keep-alive connection's requests may be different clients'), or off.
 */
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../src/config/index.js';
import { ClientAddresses } from '../../src/frontend/client-address.js';
import { ClientConnections } from '../../src/frontend/connections.js';

function connections(limits: Record<string, unknown>): ClientConnections {
  const models = [
    { name: 'm', tokenizer: 'demo', router_mode: 'round-robin', workers: [{ id: 1, url: 'http://127.0.0.1:1' }] },
  ];
  const { limits: l } = loadGatewayConfig({
    base: { limits: { max_pending_connections_per_client: 2, ...limits }, models },
    env: {},
  });
  return new ClientConnections(
    l.maxPendingConnectionsPerClient,
    new ClientAddresses(l.clientAddress, l.trustedProxies, () => undefined),
  );
}

/** A socket as node:http hands it over: an emitter with the peer's address ('close' when it goes). */
const socket = (peer: string): Socket =>
  Object.assign(new EventEmitter(), { remoteAddress: peer }) as unknown as Socket;
const request = (s: Socket, headers: Record<string, string> = {}): IncomingMessage =>
  ({ socket: s, headers }) as unknown as IncomingMessage;

describe('ClientConnections', () => {
  it('by socket: a connection accepted while its address is at the bound is refused; others are not', () => {
    const c = connections({});
    const [a, b, extra, other] = [socket('192.0.2.1'), socket('192.0.2.1'), socket('192.0.2.1'), socket('192.0.2.2')];
    for (const s of [a, b, extra, other]) c.accepted(s);
    expect(c.requestStarted(request(extra))).toBe(false);
    expect(c.requestStarted(request(other))).toBe(true);
    expect(c.pending).toBe(3);
    a.emit('close');
    expect(c.pending).toBe(2);
  });

  it('behind a proxy: each request counts as the client its proxy names, on whichever connection it comes', () => {
    const c = connections({ client_address: 'header:X-Forwarded-For', trusted_proxies: ['10.0.0.0/8'] });
    const conns = [socket('10.0.0.1'), socket('10.0.0.1'), socket('10.0.0.1')];
    for (const s of conns) c.accepted(s);
    const x = { 'x-forwarded-for': '203.0.113.7' };
    expect(c.requestStarted(request(conns[0]!, x))).toBe(true);
    expect(c.requestStarted(request(conns[1]!, x))).toBe(true);
    // The same client on the proxy's third connection is over the bound; another client on it is not.
    expect(c.requestStarted(request(conns[2]!, x))).toBe(false);
    c.requestDone(conns[2]!);
    expect(c.requestStarted(request(conns[2]!, x))).toBe(false); // still over, on its next keep-alive request too
    c.requestDone(conns[2]!);
    expect(c.requestStarted(request(conns[2]!, { 'x-forwarded-for': '198.51.100.1' }))).toBe(true);
    // Once one of the client's bodies has arrived, it has room again.
    c.requestArrived(conns[0]!);
    c.requestDone(conns[0]!);
    expect(c.requestStarted(request(conns[0]!, x))).toBe(true);
    expect(c.pending).toBe(3);
  });

  it('off: nothing is refused, and what is pending is still counted', () => {
    const c = connections({ client_address: 'off' });
    const conns = Array.from({ length: 5 }, () => socket('192.0.2.1'));
    for (const s of conns) c.accepted(s);
    expect(conns.map((s) => c.requestStarted(request(s)))).toEqual([true, true, true, true, true]);
    expect(c.pending).toBe(5);
  });
});
