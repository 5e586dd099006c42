/**
 * The bytes a TCP socket's kernel send queue holds (written by the process and not yet acknowledged by the
 * peer), read from Linux's `/proc/net/tcp` and `/proc/net/tcp6` (`tx_queue`).
 *
 * Why: Node reports a socket writable again ('drain') only once the kernel has freed a large part of its send
 * buffer, several MB on Linux, so a client that reads slowly but steadily can go far longer than a stall bound
 * without a single 'drain'. The queue shrinking between two samples is the finer sign that it still reads; a
 * client that stopped reading leaves it as it is (its receive window is closed, nothing is acknowledged).
 *
 * Contract: undefined where the table cannot be read (not Linux) or does not list the socket (another network
 * namespace, a socket already closed); callers then fall back to 'drain' alone. One read of a table serves
 * every query for up to SNAPSHOT_MS (less where the caller needs fresher samples), so many waiting streams
 * cost one read and no client makes the gateway read the tables more often than that; a snapshot is dropped
 * once it expires.
 */
import { readFile } from 'node:fs/promises';
import { isIPv4, type Socket } from 'node:net';
import { endianness } from 'node:os';

const SNAPSHOT_MS = 250;
const LITTLE_ENDIAN = endianness() === 'LE';

interface Snapshot {
  readonly at: number;
  readonly text: Promise<string | undefined>;
}
const snapshots = new Map<string, Snapshot>();

function table(file: string, maxAgeMs: number): Promise<string | undefined> {
  const now = performance.now();
  const held = snapshots.get(file);
  if (held !== undefined && now - held.at < Math.min(maxAgeMs, SNAPSHOT_MS)) return held.text;
  const text = readFile(file, 'latin1').catch(() => undefined);
  const snapshot = { at: now, text };
  snapshots.set(file, snapshot);
  setTimeout(() => {
    if (snapshots.get(file) === snapshot) snapshots.delete(file);
  }, SNAPSHOT_MS).unref();
  return text;
}

/**
 * The kernel send queue of `socket` in bytes, read from a table at most `maxAgeMs` old (and at most
 * SNAPSHOT_MS), or undefined where it cannot be read (see the file's contract).
 */
export async function kernelSendQueue(socket: Socket, maxAgeMs = SNAPSHOT_MS): Promise<number | undefined> {
  const { localAddress, localPort, remoteAddress, remotePort } = socket;
  if (localAddress === undefined || localPort === undefined || remoteAddress === undefined || remotePort === undefined)
    return undefined;
  const v4 = isIPv4(localAddress);
  const local = addressHex(localAddress);
  const remote = addressHex(remoteAddress);
  if (local === undefined || remote === undefined) return undefined;
  const text = await table(v4 ? '/proc/net/tcp' : '/proc/net/tcp6', maxAgeMs);
  if (text === undefined) return undefined;
  // A row: "  sl: LOCAL:PORT REMOTE:PORT ST TX_QUEUE:RX_QUEUE ...", addresses and numbers in upper-case hex.
  const key = ` ${local}:${portHex(localPort)} ${remote}:${portHex(remotePort)} `;
  const at = text.indexOf(key);
  if (at < 0) return undefined;
  const tx = at + key.length + 3; // past the two-digit state and its space
  const value = Number.parseInt(text.slice(tx, tx + 8), 16);
  return Number.isNaN(value) ? undefined : value;
}

function portHex(port: number): string {
  return port.toString(16).toUpperCase().padStart(4, '0');
}

/** An address as the tables print it: each 32-bit word of its network-order bytes printed in host order. */
function addressHex(address: string): string | undefined {
  const bytes = isIPv4(address) ? ipv4Bytes(address) : ipv6Bytes(address);
  if (bytes === undefined) return undefined;
  let out = '';
  for (let w = 0; w < bytes.length; w += 4) {
    for (let i = 0; i < 4; i++)
      out += bytes[LITTLE_ENDIAN ? w + 3 - i : w + i]!.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

function ipv4Bytes(address: string): number[] | undefined {
  const parts = address.split('.').map(Number);
  return parts.length === 4 && parts.every((p) => Number.isInteger(p) && p >= 0 && p <= 255) ? parts : undefined;
}

/** The 16 bytes of an IPv6 address in its text forms (`::` elision, an IPv4 tail, a zone id, which is dropped). */
function ipv6Bytes(address: string): number[] | undefined {
  const text = address.split('%')[0]!;
  const halves = text.split('::');
  if (halves.length > 2) return undefined;
  const words = (part: string): number[] | undefined => {
    if (part === '') return [];
    const out: number[] = [];
    for (const group of part.split(':')) {
      if (group.includes('.')) {
        const v4 = ipv4Bytes(group);
        if (v4 === undefined) return undefined;
        out.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else if (/^[0-9a-fA-F]{1,4}$/.test(group)) out.push(Number.parseInt(group, 16));
      else return undefined;
    }
    return out;
  };
  const head = words(halves[0]!);
  const tail = halves.length === 2 ? words(halves[1]!) : [];
  if (head === undefined || tail === undefined) return undefined;
  const missing = 8 - head.length - tail.length;
  if (missing < 0 || (halves.length === 1 && missing !== 0)) return undefined;
  const all = [...head, ...new Array<number>(missing).fill(0), ...tail];
  return all.flatMap((w) => [w >> 8, w & 0xff]);
}
