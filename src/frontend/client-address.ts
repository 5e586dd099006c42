/**
 * Who a request's client is, for the per-client bound on connections without
 * a complete request (`limits.client_address`, connections.ts):
 *
 * - `socket`: the TCP peer's address, known at accept;
 * - `off`: nobody (the bound is off);
 * - `header`: behind a proxy, the address it forwarded, known once a request's
 *   headers arrived. Only a peer inside `limits.trusted_proxies` is believed;
 *   then the header's entries are read from the right (each proxy appends the
 *   address it received from) and the first one that is not itself a trusted
 *   proxy is the client: the entries to its left were written by the client
 *   and prove nothing (nginx's `real_ip_recursive`, Envoy's trusted hops). A
 *   trusted peer that sends no usable entry is counted as itself, and that
 *   fallback is counted in `kvgate_http_client_address_fallbacks_total`.
 */
import type { IncomingMessage } from 'node:http';
import { BlockList, isIP, type Socket } from 'node:net';
import type { Logger } from 'pino';
import type { AddressBlock, ClientAddressSource, GatewayConfig } from '../config/index.js';
import type { KvgateMetrics } from '../metrics/index.js';

/** Why a trusted proxy's request was counted as the proxy's own. */
export type FallbackReason = 'missing' | 'invalid';

/** One entry of a forwarding header as an address (`1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]:80`, `2001:db8::1`), or undefined. */
function hopAddress(entry: string): string | undefined {
  let s = entry.trim();
  const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(s);
  if (bracketed !== null) s = bracketed[1]!;
  else if (/^[\d.]+:\d+$/.test(s)) s = s.slice(0, s.indexOf(':'));
  return isIP(s) === 0 ? undefined : canonical(s);
}

/** IPv4-mapped IPv6 (`::ffff:10.0.0.1`, a dual-stack listener's view of an IPv4 peer) as the IPv4 address it maps. */
function canonical(address: string): string {
  return address.startsWith('::ffff:') && isIP(address.slice(7)) === 4 ? address.slice(7) : address;
}

export class ClientAddresses {
  readonly source: ClientAddressSource;
  readonly #trusted = new BlockList();
  readonly #onFallback: (reason: FallbackReason) => void;

  constructor(
    source: ClientAddressSource,
    trustedProxies: readonly AddressBlock[],
    onFallback: (reason: FallbackReason) => void,
  ) {
    this.source = source;
    for (const b of trustedProxies) this.#trusted.addSubnet(b.address, b.prefix, b.family);
    this.#onFallback = onFallback;
  }

  /** The client a connection is counted as from the moment it is accepted: its peer in `socket` mode, else none yet. */
  ofConnection(socket: Socket): string | undefined {
    return this.source.kind === 'socket' ? canonical(socket.remoteAddress ?? '') : undefined;
  }

  /** The client a request is counted as once its headers arrived; undefined when the bound is off. */
  ofRequest(req: IncomingMessage): string | undefined {
    if (this.source.kind !== 'header') return this.ofConnection(req.socket);
    const peer = canonical(req.socket.remoteAddress ?? '');
    if (!this.#isTrusted(peer)) return peer;
    const value = req.headers[this.source.header];
    if (typeof value !== 'string' || value.trim() === '') {
      this.#onFallback('missing');
      return peer;
    }
    let client = peer;
    const hops = value.split(',');
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = hopAddress(hops[i]!);
      if (hop === undefined) {
        // Not an address: the last hop that was one stands (a proxy never writes garbage; a client may).
        if (client === peer) this.#onFallback('invalid');
        break;
      }
      client = hop;
      if (!this.#isTrusted(hop)) break;
    }
    return client;
  }

  #isTrusted(address: string): boolean {
    const version = isIP(address);
    return version !== 0 && this.#trusted.check(address, version === 6 ? 'ipv6' : 'ipv4');
  }
}

/**
 * Who a client is for the per-client bound, by a config's limits: a trusted proxy's request without a usable header
 * is counted, and logged once per reason (`logged`: the reasons already logged, kept across reloads). `owner`'s
 * metrics and logger are read when a fallback happens.
 */
export function clientAddressesOf(
  logged: Set<FallbackReason>,
  owner: { readonly metrics: KvgateMetrics; readonly logger: Logger },
): (config: GatewayConfig) => ClientAddresses {
  return (config) => {
    const { clientAddress } = config.limits;
    return new ClientAddresses(clientAddress, config.limits.trustedProxies, (reason) => {
      owner.metrics.httpClientAddressFallbacks.inc({ reason });
      if (logged.has(reason)) return;
      logged.add(reason);
      const header = clientAddress.kind === 'header' ? clientAddress.header : '';
      owner.logger.warn(
        { reason, header },
        `a trusted proxy sent a request whose ${header} header names no client address; ` +
          "it counts as the proxy's own (logged once; kvgate_http_client_address_fallbacks_total counts each)",
      );
    });
  };
}
