/**
 * How the picker reads an endpoint the protocol names (the subset hint, the conformance header): `ip:port`, an IPv6
 * address bracketed, or a bare address for any port; IPv6 addresses compared in their canonical spelling.
 */
import { isIPv6 } from 'node:net';

/** An address as one spelling: an IPv6 one in its canonical text (RFC 5952: lowercase, zeros compressed). */
function canonicalHost(host: string): string {
  if (!isIPv6(host)) return host;
  try {
    return new URL(`http://[${host}]/`).hostname.slice(1, -1);
  } catch {
    // A zone (fe80::1%eth0) is no URL host: compared as written, but lowercase.
    return host.toLowerCase();
  }
}

/**
 * An endpoint as the protocol writes it, `ip:port` with an IPv6 address bracketed (`[fd00::1]:8000`, as Envoy and
 * GIE's EPP, with Go's net.JoinHostPort, write it), or a bare address for any port. An unbracketed address with
 * several colons is an IPv6 address, never `address:port` (`fd00::1:8000` is one address): GIE's lightweight EPP
 * reads a subset entry so (net.SplitHostPort fails on it, and the entry allows every port of that address).
 */
export function endpointAddress(entry: string): { host: string; port: string | undefined } {
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry);
  if (bracketed !== null) return { host: canonicalHost(bracketed[1]!), port: bracketed[2] };
  const colon = entry.indexOf(':');
  if (colon >= 0 && colon === entry.lastIndexOf(':'))
    return { host: entry.slice(0, colon), port: entry.slice(colon + 1) };
  return { host: canonicalHost(entry), port: undefined };
}

/** Whether a subset hint's entries (each read by `endpointAddress`) name `endpoint` (`ip:port` as the picker writes it). */
export function inSubset(endpoint: string, entries: readonly ReturnType<typeof endpointAddress>[]): boolean {
  const own = endpointAddress(endpoint);
  return entries.some((e) => e.host === own.host && (e.port === undefined || e.port === own.port));
}
