/**
 * ReplicaSync: active-active router replicas share their in-flight bookings
 * and sticky sessions, so each replica's cost model sees the load every
 * replica put on a worker. One per process; one `SyncChannel` per model pool.
 *
 * - Outbound: the bookkeeping changes of one event-loop turn leave as one
 *   batch per channel. The queue is bounded (`maxQueuedOps`): a full queue
 *   drops the op and counts it, and the skipped sequence number makes peers
 *   fetch a snapshot; a request is never held up by sync.
 * - Liveness: every replica heartbeats (`heartbeatMs`) with its last sequence
 *   per channel. A peer not heard from for `peerTimeoutMs` loses all its
 *   bookings here. A peer first seen (a new replica, a restart, or ours after
 *   a NATS outage) is asked for a snapshot of its live bookings.
 * - Lag: a batch's age is measured on this replica's clock, through the peer's
 *   clock offset that heartbeat echoes give (peer-clock.ts): never by
 *   comparing two processes' clocks.
 * - Faults: while the bus is away every replica routes on what it knows and
 *   counts what it could not send; on reconnect it asks every peer for a
 *   snapshot, and peers that missed its batches ask it for one.
 * - Snapshots cross in chunks (transfer.ts), bounded by `maxSnapshotBytes`
 *   (served and fetched by snapshot-exchange.ts). The peers' bookkeeping is
 *   peer-table.ts's.
 *   A warm start (warm-start.ts) asks one live peer for its bookings and its
 *   prefix index before this replica's routers subscribe to the engines.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { systemClock, type Clock, type KvSlotSnapshot } from '../common/index.js';
import type { KvgateMetrics } from '../metrics/index.js';
import { BusStatus } from './bus-status.js';
import { SyncChannel, type ChannelHost, type SessionTarget, type SyncTarget } from './channel.js';
import { encodeBatches, encodeHeartbeats } from './fit.js';
import { PeerTable } from './peer-table.js';
import {
  MalformedSync,
  chunkSubject,
  decodeBatch,
  decodeHeartbeat,
  decodeSnapshotRequest,
  heartbeatSubject,
  opsSubject,
  snapshotSubject,
  warmStartSubject,
  type Snapshot,
} from './protocol.js';
import { SnapshotExchange } from './snapshot-exchange.js';
import { transferOutcome } from './transfer.js';
import type { SyncHandler, SyncTransport, TransportStatus } from './transport.js';
import { RefusedPeers, UnsentHeartbeats, publishPeerGauges, reportOversizedOp } from './sync-reports.js';
import { warmStart } from './warm-start.js';

export interface ReplicaSyncOptions {
  readonly transport: SyncTransport;
  /** This replica's id, unique among the replicas (default: random). */
  readonly routerId?: string | undefined;
  readonly heartbeatMs: number;
  readonly peerTimeoutMs: number;
  /** Outbound ops held at most (across channels) before new ones are dropped. */
  readonly maxQueuedOps: number;
  /** Subject prefix (replicas of one deployment share it). */
  readonly subjectPrefix: string;
  /** Largest message of a snapshot transfer (below the bus's max payload). */
  readonly chunkBytes: number;
  /** Largest snapshot served or fetched; a larger one fails (counted `too_large`). */
  readonly maxSnapshotBytes: number;
  readonly clock?: Clock;
}

/** One model pool as replica sync shares it; `index` gives its prefix index for warm starts (KV events on). */
export interface SyncedPool {
  readonly kv: SyncTarget;
  readonly sessions?: SessionTarget;
  readonly workerTypeOf: (workerId: number) => string;
  readonly index?: (() => KvSlotSnapshot[]) | undefined;
}

/** The queue group of warm-start subjects: one replica answers each request. */
const WARM_START_QUEUE = 'kvgate-warm-start';

export class ReplicaSync {
  readonly routerId: string;
  /** Changes at every process start: a restarted replica's bookings replace its former self's. */
  readonly incarnation = randomBytes(6).toString('hex');
  readonly #o: ReplicaSyncOptions;
  readonly #t: SyncTransport;
  readonly #clock: Clock;
  readonly #channels = new Map<string, SyncChannel>();
  readonly #peers: PeerTable;
  readonly #snapshotting = new Set<string>();
  readonly #workerTypes = new Map<string, (workerId: number) => string>();
  readonly #indexes = new Map<string, () => KvSlotSnapshot[]>();
  /** Bookings and sessions a warm start fetched, applied when their channel is attached. */
  readonly #warm = new Map<string, Snapshot>();
  /** The channels whose warm starts this replica answers: its index is complete (see warm-start.ts). */
  readonly #sources = new Set<string>();
  readonly #snapshots: SnapshotExchange;
  readonly #connectWaiters: (() => void)[] = [];
  readonly #bus = new BusStatus();
  readonly #unsentHeartbeats = new UnsentHeartbeats();
  readonly #refusals = new RefusedPeers();
  #queued = 0;
  #flushScheduled = false;
  #timer: NodeJS.Timeout | undefined;
  #logger: Logger | undefined;
  #metrics: KvgateMetrics | undefined;
  #closed = false;
  readonly #host: ChannelHost;

  constructor(opts: ReplicaSyncOptions) {
    this.#o = opts;
    this.#t = opts.transport;
    this.#clock = opts.clock ?? systemClock;
    this.routerId = opts.routerId ?? `kvgate-${randomBytes(4).toString('hex')}`;
    this.#host = {
      admit: () => {
        if (this.#queued >= this.#o.maxQueuedOps) {
          this.#metrics?.replicas.messagesDropped.labels({ direction: 'out', reason: 'queue_full' }).inc();
          return false;
        }
        this.#queued++;
        return true;
      },
      schedule: () => {
        if (this.#flushScheduled) return;
        this.#flushScheduled = true;
        setImmediate(() => this.flush());
      },
      requestSnapshot: (replica, channel) => void this.#fetchSnapshot(replica, channel),
      applied: (op, outcome) => this.#metrics?.replicas.opsApplied.labels({ op, outcome }).inc(),
      refused: (r) => this.#refusals.report(this.#logger, this.#metrics, r),
    };
    const prefix = opts.subjectPrefix;
    this.#peers = new PeerTable({
      selfId: this.routerId,
      incarnation: this.incarnation,
      clock: this.#clock,
      timeoutMs: opts.peerTimeoutMs,
      forget: (replica) => {
        this.#refusals.forget(replica);
        let dropped = 0;
        for (const ch of this.#channels.values()) dropped += ch.forget(replica);
        return dropped;
      },
    });
    this.#snapshots = new SnapshotExchange({
      transport: opts.transport,
      routerId: this.routerId,
      incarnation: this.incarnation,
      subjectPrefix: prefix,
      chunkBytes: opts.chunkBytes,
      maxSnapshotBytes: opts.maxSnapshotBytes,
      clock: this.#clock,
      state: (channel) => {
        const ch = this.#channels.get(channel);
        // Pending ops leave first, so the snapshot's sequence covers everything it holds.
        this.flush();
        return ch?.snapshot() ?? { seq: 0, bookings: [], sessions: [], blockSize: undefined };
      },
      index: (channel) => this.#indexes.get(channel)?.() ?? [],
    });
    this.#subscribe(heartbeatSubject(prefix), (data) => this.#onHeartbeat(data));
    this.#subscribe(snapshotSubject(prefix, this.routerId), (data, reply) => this.#serveSnapshot(data, reply));
    this.#subscribe(chunkSubject(prefix, this.routerId), (data, reply) => this.#serveChunk(data, reply));
    this.#t.onStatus = (status, detail) => this.#onStatus(status, detail);
  }

  /** Where state changes are logged and counted (the gateway's logger and metrics, known once it starts). */
  bind(logger: Logger, metrics: KvgateMetrics): void {
    this.#logger ??= logger.child({ component: 'replica-sync', routerId: this.routerId });
    this.#metrics ??= metrics;
    // The bus may have connected (and peers joined) before the gateway started: told here, once.
    this.#bus.bind(this.#logger, this.#metrics.replicas, this.#t.connected);
    this.#peers.bind(this.#logger, this.#metrics.replicas);
    this.#snapshots.bind(this.#logger, this.#metrics.replicas);
  }

  /** Starts the heartbeat and liveness timer. */
  start(): void {
    if (this.#timer !== undefined) return;
    this.#timer = setInterval(() => this.#beat(), this.#o.heartbeatMs);
    this.#timer.unref();
  }

  /**
   * Syncs a pool: its bookkeeping and, if given, its sticky sessions. `key` names the channel
   * (`channelKey(model, pool)`); `workerTypeOf` labels the pool's per-worker series.
   */
  attach(key: string, pool: SyncedPool): void {
    const ch = new SyncChannel(key, pool.kv, this.#host);
    if (pool.sessions !== undefined) ch.shareSessions(pool.sessions);
    this.#workerTypes.set(key, pool.workerTypeOf);
    if (pool.index !== undefined) this.#indexes.set(key, pool.index);
    this.#channels.set(key, ch);
    this.#subscribe(opsSubject(this.#o.subjectPrefix, key), (data) => this.#onBatch(ch, data));
    if (this.#sources.has(key))
      this.#subscribe(
        warmStartSubject(this.#o.subjectPrefix, key),
        (data, reply) => this.#serveSnapshot(data, reply),
        WARM_START_QUEUE,
      );
    const warm = this.#warm.get(key);
    this.#warm.delete(key);
    if (warm !== undefined && this.#peers.heard(warm.routerId, warm.incarnation))
      this.#applySnapshot(ch, warm, 'warm_start');
    // Peers already known hold bookings on this channel too.
    for (const replica of this.#peers.ids()) void this.#fetchSnapshot(replica, key);
  }

  /** Peers heard from within the timeout. */
  peers(): string[] {
    return [...this.#peers.ids()];
  }

  /** Publishes the pending batch of every channel (runs at the end of each event-loop turn with changes). */
  flush(): void {
    this.#flushScheduled = false;
    for (const ch of this.#channels.values()) {
      const b = ch.take();
      if (b === undefined) continue;
      this.#queued -= b.ops.length;
      if (b.ops.length === 0) continue;
      // A batch larger than the bus's max_payload would be refused whole: cut into messages that fit.
      const base = {
        routerId: this.routerId,
        incarnation: this.incarnation,
        sentAt: this.#clock.now(),
        ops: b.ops,
        blockSize: ch.target.blockSize,
      };
      for (const part of encodeBatches(base, b.seq, () => ch.nextSeq(), this.#t.maxPayload)) {
        if ('bytes' in part) this.#send(opsSubject(this.#o.subjectPrefix, ch.key), part.bytes, 'ops');
        else reportOversizedOp(this.#logger, this.#metrics, ch.key, part, this.#t.maxPayload);
      }
    }
  }

  #send(subject: string, bytes: Uint8Array, kind: 'ops' | 'heartbeat'): boolean {
    const m = this.#metrics?.replicas;
    try {
      this.#t.publish(subject, bytes);
    } catch {
      m?.messagesDropped
        .labels({ direction: 'out', reason: this.#t.connected ? 'publish_failed' : 'disconnected' })
        .inc();
      return false;
    }
    m?.messagesSent.labels({ kind }).inc();
    return true;
  }

  #beat(): void {
    if (this.#closed) return;
    const now = this.#clock.now();
    const seqs: Record<string, number> = {};
    for (const ch of this.#channels.values()) seqs[ch.key] = ch.lastSeq;
    const echoes = this.#peers.echoes(now);
    if (this.#t.connected) {
      // Cut, like batches, to the bus's max_payload: a heartbeat refused whole would time this replica out.
      const hb = { routerId: this.routerId, incarnation: this.incarnation, sentAt: now, seqs, echoes };
      const { messages, unsent } = encodeHeartbeats(hb, this.#t.maxPayload);
      for (const m of messages) this.#send(heartbeatSubject(this.#o.subjectPrefix), m, 'heartbeat');
      this.#unsentHeartbeats.report(this.#logger, this.#metrics, unsent, this.#t.maxPayload);
    }
    this.#peers.expire(now);
    if (this.#metrics !== undefined)
      publishPeerGauges(this.#metrics, this.#peers.size, this.#channels, this.#workerTypes);
  }

  #onHeartbeat(data: Uint8Array): void {
    const hb = this.#decoded(decodeHeartbeat, data);
    if (hb === undefined || !this.#peers.heartbeat(hb)) return;
    this.#metrics?.replicas.messagesReceived.labels({ kind: 'heartbeat' }).inc();
    for (const [key, seq] of Object.entries(hb.seqs))
      this.#channels.get(key)?.checkBehind(hb.routerId, hb.incarnation, seq);
  }

  #onBatch(ch: SyncChannel, data: Uint8Array): void {
    const b = this.#decoded(decodeBatch, data);
    if (b === undefined || !this.#peers.heard(b.routerId, b.incarnation)) return;
    const m = this.#metrics?.replicas;
    m?.messagesReceived.labels({ kind: 'ops' }).inc();
    // Unmeasured until a heartbeat round trip with the peer gave its clock's offset.
    const age = this.#peers.ageOf(b.routerId, b.sentAt);
    if (age !== undefined) m?.lag.observe(age / 1000);
    try {
      if (!ch.applyBatch(b)) m?.messagesDropped.labels({ direction: 'in', reason: 'stale' }).inc();
    } catch (err) {
      this.#malformed(err);
    }
  }

  /** Answers a snapshot request (a peer's resync, or a warm start) with the first chunk of its transfer. */
  #serveSnapshot(data: Uint8Array, reply: ((data: Uint8Array) => void) | undefined): void {
    if (reply === undefined) return;
    const req = this.#decoded(decodeSnapshotRequest, data);
    if (req !== undefined) reply(this.#snapshots.serve(req));
  }

  #serveChunk(data: Uint8Array, reply: ((data: Uint8Array) => void) | undefined): void {
    if (reply === undefined) return;
    reply(this.#snapshots.serveChunk(data));
  }

  /** Fetches a snapshot, all its chunks; throws what the transfer threw (the caller counts it). */
  fetchSnapshot(
    subject: string,
    channel: string,
    withIndex: boolean,
  ): Promise<{ snapshot: Snapshot; bytes: number; seconds: number }> {
    return this.#snapshots.fetch(subject, channel, withIndex);
  }

  async #fetchSnapshot(replica: string, key: string): Promise<void> {
    const id = `${replica}\u0000${key}`;
    const ch = this.#channels.get(key);
    if (ch === undefined || this.#snapshotting.has(id) || !this.#t.connected || this.#closed) return;
    this.#snapshotting.add(id);
    ch.fetching(replica);
    const m = this.#metrics?.replicas;
    try {
      const { snapshot: s, seconds } = await this.fetchSnapshot(
        snapshotSubject(this.#o.subjectPrefix, replica),
        key,
        false,
      );
      if (this.#closed || !this.#peers.heard(s.routerId, s.incarnation)) return;
      m?.snapshotSeconds.labels({ direction: 'fetched' }).observe(seconds);
      this.#applySnapshot(ch, s, 'fetched');
    } catch (err) {
      if (err instanceof MalformedSync) this.#malformed(err);
      m?.snapshots.labels({ direction: 'fetched', outcome: transferOutcome(err) }).inc();
      this.#logger?.warn(
        { peer: replica, channel: key, err: (err as Error).message },
        `snapshot of replica ${replica} failed; its batches and heartbeats will ask again`,
      );
    } finally {
      this.#snapshotting.delete(id);
      ch.fetched(replica);
    }
  }

  #applySnapshot(ch: SyncChannel, s: Snapshot, direction: 'fetched' | 'warm_start'): void {
    const applied = ch.applySnapshot(s);
    const refused = !applied && ch.refuses(s.routerId, s.incarnation);
    if (direction === 'fetched')
      this.#metrics?.replicas.snapshots
        .labels({ direction, outcome: applied ? 'ok' : refused ? 'refused' : 'stale' })
        .inc();
    if (refused) return;
    this.#logger?.info(
      { peer: s.routerId, channel: ch.key, bookings: s.bookings.length, sessions: s.sessions.length, applied },
      `snapshot of replica ${s.routerId} ${applied ? 'applied' : 'superseded'}`,
    );
  }

  /**
   * Warm start of the channels `keys` (one model's pools): asks one live peer for each one's
   * bookings and prefix index, within `timeoutMs` in all (waiting for the bus first). Bookings are
   * applied when the channel is attached; the index slots are returned for the KV-event managers
   * to start from. A channel no peer answers for, or one whose peer runs another `blockSize`, starts cold
   * (logged and counted).
   */
  async warmStart(
    keys: readonly string[],
    timeoutMs: number,
    blockSize?: number,
  ): Promise<Map<string, KvSlotSnapshot[]>> {
    const { snapshots: results, complete } = await warmStart({
      keys,
      timeoutMs,
      blockSize,
      clock: this.#clock,
      logger: this.#logger,
      metrics: this.#metrics?.replicas,
      connected: (ms) => this.#connectedWithin(ms),
      fetch: (key) => this.fetchSnapshot(warmStartSubject(this.#o.subjectPrefix, key), key, true),
    });
    for (const key of complete) this.#sources.add(key);
    const out = new Map<string, KvSlotSnapshot[]>();
    for (const [key, r] of results) {
      this.#warm.set(key, r.snapshot);
      out.set(key, [...(r.snapshot.slots ?? [])]);
    }
    return out;
  }

  /** Resolves true once the bus is connected, false after `ms` without. */
  #connectedWithin(ms: number): Promise<boolean> {
    if (this.#t.connected) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(this.#t.connected), ms);
      timer.unref();
      this.#connectWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  /** Subscribes `handler` so that a throw out of it (answering too, see `SyncTransport.subscribe`) is counted and logged here. */
  #subscribe(subject: string, handler: SyncHandler, queue?: string): void {
    const guarded: SyncHandler = (data, reply) => {
      try {
        handler(data, reply);
      } catch (err) {
        this.#malformed(err);
      }
    };
    this.#t.subscribe(subject, guarded, queue);
  }

  /** `decode(data)`, or undefined when it throws (dropped and counted as `#malformed` says). */
  #decoded<T>(decode: (data: Uint8Array) => T, data: Uint8Array): T | undefined {
    try {
      return decode(data);
    } catch (err) {
      this.#malformed(err);
      return undefined;
    }
  }

  #malformed(err: unknown): void {
    const malformed = err instanceof MalformedSync;
    this.#metrics?.replicas.messagesDropped
      .labels({ direction: 'in', reason: malformed ? 'malformed' : 'apply_failed' })
      .inc();
    if (malformed) this.#logger?.warn({ err: err.message }, 'malformed replica sync message dropped');
    else this.#logger?.error({ err }, 'replica sync message could not be applied');
  }

  #onStatus(status: TransportStatus, detail: string): void {
    this.#bus.changed(status, detail);
    if (status !== 'connected') return;
    for (const w of this.#connectWaiters.splice(0)) w();
    // Peers changed while we were away: fetch their bookings afresh; they fetch ours when they see our gap.
    for (const replica of this.#peers.ids())
      for (const key of this.#channels.keys()) void this.#fetchSnapshot(replica, key);
    this.#beat();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.flush();
    this.#closed = true;
    if (this.#timer !== undefined) clearInterval(this.#timer);
    if (!(await this.#t.close())) this.#logger?.warn('replica sync bus: the close was not acknowledged; abandoned');
  }
}
