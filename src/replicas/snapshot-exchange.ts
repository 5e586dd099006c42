/**
 * Snapshots between replicas, both ends of the chunked transfer (transfer.ts),
 * bounded by `maxSnapshotBytes` and counted:
 *
 * - serving ours (a peer's resync, or a new replica's warm start): a
 *   channel's bookings and sessions, with its prefix index when asked,
 *   encoded once and handed out chunk by chunk; one over the bound is refused
 *   before any chunk leaves, and logged;
 * - fetching a peer's: every chunk, then decoded.
 *
 * When to fetch and what to do with a snapshot is replica-sync.ts's.
 */
import type { Logger } from 'pino';
import type { Clock, KvSlotSnapshot } from '../common/index.js';
import type { ReplicaMetrics } from '../metrics/index.js';
import { chunkSubject, decodeSnapshot, encodeSnapshot, encodeSnapshotRequest, type Snapshot } from './protocol.js';
import { TransferServer, fetchTransfer } from './transfer.js';
import type { SyncTransport } from './transport.js';

/** How long each request of a snapshot transfer waits for its answer. */
const SNAPSHOT_TIMEOUT_MS = 2000;

export interface SnapshotExchangeOptions {
  readonly transport: SyncTransport;
  readonly routerId: string;
  readonly incarnation: string;
  /** Subject prefix (replicas of one deployment share it). */
  readonly subjectPrefix: string;
  /** Largest message of a transfer. */
  readonly chunkBytes: number;
  /** Largest snapshot served or fetched. */
  readonly maxSnapshotBytes: number;
  readonly clock: Clock;
  /**
   * A channel's state now (an unknown channel's is empty). Contract: its pending ops have left first, so the
   * snapshot's sequence covers everything it holds.
   */
  readonly state: (channel: string) => Pick<Snapshot, 'seq' | 'bookings' | 'sessions' | 'blockSize'>;
  /** A channel's prefix index with its KV-event cursors (empty without one). */
  readonly index: (channel: string) => readonly KvSlotSnapshot[];
}

export class SnapshotExchange {
  readonly #o: SnapshotExchangeOptions;
  readonly #transfers: TransferServer;
  #logger: Logger | undefined;
  #metrics: ReplicaMetrics | undefined;
  /** The bus bound the chunk size was last cut to, logged once per bound. */
  #cappedAt: number | undefined;

  constructor(opts: SnapshotExchangeOptions) {
    this.#o = opts;
    this.#transfers = new TransferServer(opts.routerId, opts.chunkBytes, opts.clock);
  }

  /** Where refusals are logged and transfers counted (set once). */
  bind(logger: Logger, metrics: ReplicaMetrics): void {
    this.#logger ??= logger;
    this.#metrics ??= metrics;
  }

  /** The answer to a snapshot request: the first chunk of its transfer, or the refusal of one over the bound. */
  serve(req: { readonly channel: string; readonly withIndex: boolean }): Uint8Array {
    const s = this.#o.state(req.channel);
    // Taken in this same turn as the bookings: the index's cursors are those of the blocks it holds.
    const slots = req.withIndex ? this.#o.index(req.channel) : [];
    const bytes = encodeSnapshot({ routerId: this.#o.routerId, incarnation: this.#o.incarnation, ...s, slots });
    const m = this.#metrics;
    if (bytes.byteLength > this.#o.maxSnapshotBytes) {
      m?.snapshots.labels({ direction: 'served', outcome: 'too_large' }).inc();
      this.#logger?.warn(
        { channel: req.channel, bytes: bytes.byteLength, maxBytes: this.#o.maxSnapshotBytes },
        'snapshot larger than replicas.max_snapshot_bytes: not served',
      );
      return this.#transfers.refuse(`snapshot of ${bytes.byteLength} bytes exceeds the server's bound`);
    }
    const chunkBytes = this.#chunkBytes();
    if (chunkBytes === undefined) {
      // Nothing to cut: the refusal is short, so that it fits where a chunk's envelope does not.
      m?.snapshots.labels({ direction: 'served', outcome: 'too_large' }).inc();
      return this.#transfers.refuse('max_payload');
    }
    const first = this.#transfers.open(bytes, chunkBytes);
    m?.snapshots.labels({ direction: 'served', outcome: 'ok' }).inc();
    m?.snapshotBytes.labels({ direction: 'served' }).inc(Math.min(bytes.byteLength, chunkBytes));
    return first;
  }

  /**
   * The configured chunk size, or less where the bus takes smaller messages (logged once per bound);
   * undefined where no chunk fits (an error, logged once per bound).
   */
  #chunkBytes(): number | undefined {
    const maxPayload = this.#o.transport.maxPayload;
    const chunkBytes = this.#transfers.chunkBytesUnder(maxPayload);
    if (chunkBytes === this.#o.chunkBytes || maxPayload === this.#cappedAt || this.#logger === undefined)
      return chunkBytes;
    this.#cappedAt = maxPayload;
    if (chunkBytes === undefined)
      this.#logger.error(
        { maxPayload },
        `the sync bus's max_payload (${maxPayload}) is below a snapshot chunk's envelope: snapshots are not served`,
      );
    else
      this.#logger.warn(
        { configuredChunkBytes: this.#o.chunkBytes, maxPayload, chunkBytes },
        `replicas.snapshot_chunk_bytes (${this.#o.chunkBytes}) does not fit the sync bus's max_payload (${maxPayload}): ` +
          `snapshots are served in chunks of ${chunkBytes} bytes`,
      );
    return chunkBytes;
  }

  /** The answer to a chunk request of an open transfer (or the error answer for an unknown one), counted. */
  serveChunk(request: Uint8Array): Uint8Array {
    const out = this.#transfers.serve(request);
    this.#metrics?.snapshotBytes.labels({ direction: 'served' }).inc(out.byteLength);
    return out;
  }

  /** Fetches a snapshot, all its chunks; throws what the transfer threw (the caller counts it). */
  async fetch(
    subject: string,
    channel: string,
    withIndex: boolean,
  ): Promise<{ snapshot: Snapshot; bytes: number; seconds: number }> {
    const clock = this.#o.clock;
    const started = clock.now();
    const t = await fetchTransfer(this.#o.transport, subject, encodeSnapshotRequest(channel, withIndex), {
      maxBytes: this.#o.maxSnapshotBytes,
      requestTimeoutMs: SNAPSHOT_TIMEOUT_MS,
      chunkSubject: (r) => chunkSubject(this.#o.subjectPrefix, r),
    });
    const m = this.#metrics;
    m?.snapshotBytes.labels({ direction: 'received' }).inc(t.bytes.byteLength);
    m?.messagesReceived.labels({ kind: 'snapshot' }).inc();
    return {
      snapshot: decodeSnapshot(t.bytes),
      bytes: t.bytes.byteLength,
      seconds: (clock.now() - started) / 1000,
    };
  }
}
