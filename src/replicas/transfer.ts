/**
 * Chunked snapshot transfers between replicas. A snapshot (bookings, sessions
 * and, for a warm start, the prefix index) can be far larger than one bus
 * message (NATS refuses payloads over its `max_payload`, 1 MiB by default),
 * so it crosses in chunks, each one request/reply:
 *
 *   requester ── snapshot request ──► server: encodes the snapshot once, holds the bytes
 *             ◄── chunk 0 { r, t: transfer, k: 0, n: chunks, z: total bytes, d } ──
 *             ── { t, k } on <prefix>.chunk.<server> ──► (k = 1 .. n-1, a few in flight)
 *             ◄── chunk k ──
 *
 * The requester reassembles chunks in any order, refuses a transfer larger
 * than its bound before fetching it, and fails the whole transfer (the caller
 * counts it) when a chunk does not come, is malformed or does not fit. A
 * server holds a few transfers for a short while; an unknown or expired
 * transfer is answered with an error message `{ e }`.
 */
import { randomBytes } from 'node:crypto';
import { decode, encode } from '@msgpack/msgpack';
import type { Clock } from '../common/index.js';
import { MalformedSync } from './protocol.js';
import type { SyncTransport } from './transport.js';

/** Transfers a server holds at once (the oldest goes first). */
const MAX_OPEN_TRANSFERS = 8;
/** How long a server keeps a transfer's bytes after its last chunk request. */
const TRANSFER_TTL_MS = 30_000;
/** Chunk requests in flight at once per transfer. */
const WINDOW = 4;

export interface Chunk {
  readonly routerId: string;
  readonly transfer: string;
  readonly index: number;
  readonly count: number;
  readonly totalBytes: number;
  readonly data: Uint8Array;
}

export class TransferFailed extends Error {
  /** `too_large`: refused by the size bound; `failed`: a chunk missing, malformed or refused by the server. */
  constructor(
    readonly reason: 'too_large' | 'failed',
    message: string,
  ) {
    super(message);
  }
}

/** How a failed transfer is counted. */
export function transferOutcome(err: unknown): 'too_large' | 'failed' {
  return err instanceof TransferFailed && err.reason === 'too_large' ? 'too_large' : 'failed';
}

function encodeChunk(c: Chunk): Uint8Array {
  return encode({ r: c.routerId, t: c.transfer, k: c.index, n: c.count, z: c.totalBytes, d: c.data });
}

/** @throws TransferFailed for an error answer; MalformedSync for anything else that is not a chunk. */
export function decodeChunk(bytes: Uint8Array): Chunk {
  let m: unknown;
  try {
    m = decode(bytes);
  } catch (err) {
    throw new MalformedSync(`chunk is not msgpack: ${(err as Error).message}`);
  }
  if (typeof m !== 'object' || m === null) throw new MalformedSync('chunk is not a map');
  const o = m as Record<string, unknown>;
  if (typeof o.e === 'string') throw new TransferFailed('failed', `the peer refused: ${o.e}`);
  const int = (v: unknown, min: number): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= min;
  if (
    typeof o.r !== 'string' ||
    typeof o.t !== 'string' ||
    !int(o.k, 0) ||
    !int(o.n, 1) ||
    !int(o.z, 0) ||
    !(o.d instanceof Uint8Array) ||
    o.k >= o.n
  ) {
    throw new MalformedSync('chunk must carry r, t, k < n, n >= 1, z and bytes d');
  }
  return { routerId: o.r, transfer: o.t, index: o.k, count: o.n, totalBytes: o.z, data: o.d };
}

export function encodeChunkRequest(transfer: string, index: number): Uint8Array {
  return encode({ t: transfer, k: index });
}

function encodeRefusal(why: string): Uint8Array {
  return encode({ e: why });
}

/** A server's open transfers: a snapshot's bytes, cut into chunks on request. */
export class TransferServer {
  readonly #open = new Map<string, { bytes: Uint8Array; chunkBytes: number; until: number }>();
  readonly #routerId: string;
  readonly #chunkBytes: number;
  readonly #clock: Clock;
  /** What a chunk's envelope adds to its data at most: the map, this server's id, a transfer id, the largest integers. */
  readonly #envelope: number;

  constructor(routerId: string, chunkBytes: number, clock: Clock) {
    this.#routerId = routerId;
    this.#chunkBytes = chunkBytes;
    this.#clock = clock;
    const max = Number.MAX_SAFE_INTEGER;
    const empty = {
      routerId,
      transfer: 'f'.repeat(16),
      index: max,
      count: max,
      totalBytes: max,
      data: new Uint8Array(),
    };
    // + 3: a bin32 header (5 bytes) in place of the empty data's bin8 one (2).
    this.#envelope = encodeChunk(empty).byteLength + 3;
  }

  /**
   * The chunk size for a bus taking messages of `maxPayload` bytes at most (undefined: no bound): the
   * configured one, or less so that a chunk with its envelope fits (a larger reply is refused by the bus);
   * undefined when not even one byte of data fits beside the envelope.
   */
  chunkBytesUnder(maxPayload: number | undefined): number | undefined {
    if (maxPayload === undefined) return this.#chunkBytes;
    const fits = Math.min(this.#chunkBytes, maxPayload - this.#envelope);
    return fits >= 1 ? fits : undefined;
  }

  /** Holds `bytes` as a new transfer of `chunkBytes` a chunk (the configured size unless given) and returns its first chunk. */
  open(bytes: Uint8Array, chunkBytes = this.#chunkBytes): Uint8Array {
    this.#prune();
    if (this.#open.size >= MAX_OPEN_TRANSFERS) this.#open.delete(this.#open.keys().next().value!);
    const transfer = randomBytes(8).toString('hex');
    const count = Math.max(1, Math.ceil(bytes.byteLength / chunkBytes));
    if (count > 1) this.#open.set(transfer, { bytes, chunkBytes, until: this.#clock.now() + TRANSFER_TTL_MS });
    return this.#chunk(transfer, bytes, chunkBytes, 0);
  }

  /** An error answer in place of a first chunk. */
  refuse(why: string): Uint8Array {
    return encodeRefusal(why);
  }

  /** Answers a chunk request (an error answer for an unknown or expired transfer). */
  serve(request: Uint8Array): Uint8Array {
    this.#prune();
    let t: unknown;
    let k: unknown;
    try {
      ({ t, k } = decode(request) as { t?: unknown; k?: unknown });
    } catch {
      return encodeRefusal('malformed chunk request');
    }
    const held = typeof t === 'string' ? this.#open.get(t) : undefined;
    if (held === undefined) return encodeRefusal('unknown or expired transfer');
    const count = Math.ceil(held.bytes.byteLength / held.chunkBytes);
    if (typeof k !== 'number' || !Number.isInteger(k) || k < 1 || k >= count)
      return encodeRefusal(`no chunk ${String(k)}`);
    held.until = this.#clock.now() + TRANSFER_TTL_MS;
    return this.#chunk(t as string, held.bytes, held.chunkBytes, k);
  }

  #chunk(transfer: string, bytes: Uint8Array, chunkBytes: number, index: number): Uint8Array {
    const count = Math.max(1, Math.ceil(bytes.byteLength / chunkBytes));
    const data = bytes.subarray(index * chunkBytes, Math.min(bytes.byteLength, (index + 1) * chunkBytes));
    return encodeChunk({ routerId: this.#routerId, transfer, index, count, totalBytes: bytes.byteLength, data });
  }

  #prune(): void {
    const now = this.#clock.now();
    for (const [id, t] of this.#open) if (t.until <= now) this.#open.delete(id);
  }
}

/** Reassembles one transfer's chunks, in any order; duplicates are ignored. */
export class ChunkAssembler {
  readonly transfer: string;
  readonly routerId: string;
  readonly count: number;
  readonly totalBytes: number;
  readonly #parts: (Uint8Array | undefined)[];
  #have = 0;
  #bytes = 0;

  /** @throws TransferFailed `too_large` when the announced size exceeds `maxBytes`. */
  constructor(first: Chunk, maxBytes: number) {
    if (first.totalBytes > maxBytes) {
      throw new TransferFailed(
        'too_large',
        `snapshot of ${first.totalBytes} bytes exceeds the bound of ${maxBytes} bytes`,
      );
    }
    this.transfer = first.transfer;
    this.routerId = first.routerId;
    this.count = first.count;
    this.totalBytes = first.totalBytes;
    this.#parts = new Array<Uint8Array | undefined>(first.count);
    this.add(first);
  }

  /** @throws TransferFailed for a chunk of another transfer or one that does not fit. */
  add(c: Chunk): void {
    if (c.transfer !== this.transfer || c.count !== this.count || c.totalBytes !== this.totalBytes) {
      throw new TransferFailed('failed', `chunk ${c.index} belongs to another transfer`);
    }
    if (this.#parts[c.index] !== undefined) return;
    if (this.#bytes + c.data.byteLength > this.totalBytes)
      throw new TransferFailed('failed', `chunk ${c.index} overruns the announced ${this.totalBytes} bytes`);
    this.#parts[c.index] = c.data;
    this.#have++;
    this.#bytes += c.data.byteLength;
  }

  get complete(): boolean {
    return this.#have === this.count;
  }

  /** Indexes of the chunks not yet received. */
  missing(): number[] {
    const out: number[] = [];
    for (let i = 0; i < this.count; i++) if (this.#parts[i] === undefined) out.push(i);
    return out;
  }

  /** @throws TransferFailed unless every chunk arrived and they add up to the announced size. */
  bytes(): Uint8Array {
    if (!this.complete)
      throw new TransferFailed('failed', `chunks ${this.missing().join(', ')} of ${this.count} missing`);
    if (this.#bytes !== this.totalBytes)
      throw new TransferFailed('failed', `chunks hold ${this.#bytes} bytes, ${this.totalBytes} announced`);
    const out = new Uint8Array(this.totalBytes);
    let at = 0;
    for (const p of this.#parts) {
      out.set(p!, at);
      at += p!.byteLength;
    }
    return out;
  }
}

export interface FetchOptions {
  readonly maxBytes: number;
  /** Each request's answer is awaited this long at most. */
  readonly requestTimeoutMs: number;
  /** The subject a server's chunks are asked on. */
  readonly chunkSubject: (routerId: string) => string;
}

/**
 * Fetches a whole transfer: the first chunk answers `request` on `subject`; the rest are asked
 * of the server that answered, a few at a time.
 * @throws TransferFailed, MalformedSync, or the transport's error (timeout, no responders) for the first request.
 */
export async function fetchTransfer(
  t: SyncTransport,
  subject: string,
  request: Uint8Array,
  o: FetchOptions,
): Promise<{ bytes: Uint8Array; routerId: string; chunks: number }> {
  const asm = new ChunkAssembler(decodeChunk(await t.request(subject, request, o.requestTimeoutMs)), o.maxBytes);
  const queue = asm.missing();
  const one = async (k: number): Promise<void> => {
    let reply: Uint8Array;
    try {
      reply = await t.request(o.chunkSubject(asm.routerId), encodeChunkRequest(asm.transfer, k), o.requestTimeoutMs);
    } catch (err) {
      throw new TransferFailed('failed', `chunk ${k} of ${asm.count} from ${asm.routerId}: ${(err as Error).message}`);
    }
    const c = decodeChunk(reply);
    if (c.index !== k) throw new TransferFailed('failed', `asked for chunk ${k}, got ${c.index}`);
    asm.add(c);
  };
  const worker = async (): Promise<void> => {
    try {
      for (let k = queue.shift(); k !== undefined; k = queue.shift()) await one(k);
    } catch (err) {
      queue.length = 0; // the transfer has failed: the other workers stop asking
      throw err;
    }
  };
  await Promise.all(Array.from({ length: Math.min(WINDOW, queue.length) }, worker));
  return { bytes: asm.bytes(), routerId: asm.routerId, chunks: asm.count };
}
