/**
 * One channel of replica sync: a model's pool (its KvRouter's bookkeeping
 * and its sticky sessions). Outbound, it observes the router's own bookings
 * and collects the changes of one event-loop turn into a batch; inbound, it
 * applies other replicas' batches and snapshots to the router's peer view.
 *
 * Ordering: batches of one replica carry consecutive sequence numbers per
 * channel. A batch at or below the last one applied is a duplicate and is
 * ignored; a jump means batches were lost (a full queue, a NATS outage), and
 * the channel asks that replica for a snapshot, which replaces everything it
 * holds for it. Every op is idempotent, so a batch that overlaps a snapshot
 * changes nothing. Batches keep coming while a snapshot crosses (its chunks
 * are round trips): those applied meanwhile are kept and replayed onto it,
 * else a snapshot under steady traffic would always be older than the last
 * batch applied, and the gap it was asked for would never close.
 */
import type { WorkerRank } from '../common/index.js';
import type { BookkeepingObserver, PeerApplyOutcome, PeerBookings, SyncedBooking } from '../core/index.js';
import type { Batch, SharedSession, Snapshot, SyncOp } from './protocol.js';

/** Batches kept per replica while its snapshot crosses; past this many the snapshot may be stale (asked again). */
const MAX_KEPT_BATCHES = 4096;

/** What a channel syncs: a KvRouter's bookkeeping (structurally) and optionally a pool's sticky sessions. */
export interface SyncTarget {
  observe(observer: BookkeepingObserver): void;
  localBookings(): Iterable<SyncedBooking>;
  readonly peers: PeerBookings;
  /** The KV block size its hashes are of: a peer with another one is refused (its hashes mean nothing here). */
  readonly blockSize: number;
  loads(): readonly (WorkerRank & { readonly activeRequests: number })[];
}

/** A pool's sticky sessions as replica sync sees them. */
export interface SessionTarget {
  /** Bindings made here, reported to `onBind` (set by the channel). */
  onBind: ((binding: SharedSession) => void) | undefined;
  /** A peer's binding: taken only when the session has no live binding here (first live binding wins). */
  adopt(binding: SharedSession): boolean;
  /** Live bindings (a snapshot). */
  liveBindings(): SharedSession[];
}

/** What the channel needs from the sync layer that owns it. */
export interface ChannelHost {
  /** Room for one more outbound op; false when the queue is full (the op is dropped and counted). */
  admit(): boolean;
  /** A batch is pending: flush at the end of this event-loop turn. */
  schedule(): void;
  requestSnapshot(replica: string, channel: string): void;
  applied(op: SyncOp['kind'], outcome: PeerApplyOutcome | 'adopted' | 'kept'): void;
  /** A message of a peer whose block size differs was ignored; `first` for the first one of its incarnation here. */
  refused(r: PeerRefusal): void;
}

/** A peer's message refused on a channel for its block size (`theirs`; `ours` is the channel's). */
export interface PeerRefusal {
  readonly replica: string;
  readonly incarnation: string;
  readonly channel: string;
  readonly theirs: number;
  readonly ours: number;
  /** The first refusal of this incarnation on this channel. */
  readonly first: boolean;
}

interface PeerCursor {
  incarnation: string;
  lastSeq: number;
  /**
   * Batches before `lastSeq` were missed (a gap, or a first batch past 1) and no snapshot has
   * replaced them yet: every heartbeat asks again until one is applied, since a fetch can fail
   * (timeout, no responders, the bus going away) and the cursor alone no longer shows the gap.
   */
  behind: boolean;
}

export class SyncChannel implements BookkeepingObserver {
  readonly key: string;
  readonly target: SyncTarget;
  readonly #host: ChannelHost;
  #sessions: SessionTarget | undefined;
  #ops: SyncOp[] = [];
  /** Sequence of the last batch taken (published or lost). */
  #seq = 0;
  /** An op was dropped since the last batch: the next batch skips a sequence number so peers see the gap. */
  #lost = false;
  readonly #cursors = new Map<string, PeerCursor>();
  /** Peers refused for another block size: the incarnation refused, per replica (a restart may mend it). */
  readonly #refused = new Map<string, { incarnation: string; blockSize: number }>();
  /** Per replica whose snapshot is being fetched, the batches applied since it was asked for (null: too many). */
  readonly #kept = new Map<string, Batch[] | null>();

  constructor(key: string, target: SyncTarget, host: ChannelHost) {
    this.key = key;
    this.target = target;
    this.#host = host;
    target.observe(this);
  }

  /** Shares the pool's sticky sessions through this channel. */
  shareSessions(sessions: SessionTarget): void {
    this.#sessions = sessions;
    sessions.onBind = (binding) => this.#push({ kind: 'session', binding });
  }

  get lastSeq(): number {
    return this.#seq;
  }

  // ---------------------------------------------------------------- outbound (BookkeepingObserver)

  added(booking: SyncedBooking): void {
    this.#push({ kind: 'added', booking });
  }

  prefillCompleted(requestId: string): void {
    this.#push({ kind: 'prefill', requestId });
  }

  outputBlock(requestId: string, outputBlocks: number, decay: number | undefined): void {
    this.#push({ kind: 'output', requestId, outputBlocks, decay });
  }

  freed(requestId: string): void {
    this.#push({ kind: 'freed', requestId });
  }

  #push(op: SyncOp): void {
    if (!this.#host.admit()) {
      this.#lost = true;
      return;
    }
    this.#ops.push(op);
    this.#host.schedule();
  }

  /** The pending ops as the next batch (undefined when none), with its sequence number. */
  take(): { readonly seq: number; readonly ops: SyncOp[] } | undefined {
    if (this.#ops.length === 0 && !this.#lost) return undefined;
    if (this.#lost) this.#seq++;
    this.#lost = false;
    const ops = this.#ops;
    this.#ops = [];
    return { seq: ++this.#seq, ops };
  }

  /** One more sequence number after `take`'s: a batch cut into several messages takes one per message. */
  nextSeq(): number {
    return ++this.#seq;
  }

  /** Pending ops count (for the bounded queue). */
  get pending(): number {
    return this.#ops.length;
  }

  /** Everything this replica holds for the channel now (call after `take` flushed pending ops). */
  snapshot(): Pick<Snapshot, 'seq' | 'bookings' | 'sessions' | 'blockSize'> {
    return {
      blockSize: this.target.blockSize,
      seq: this.#seq,
      bookings: [...this.target.localBookings()],
      sessions: this.#sessions?.liveBindings() ?? [],
    };
  }

  // ---------------------------------------------------------------- inbound

  /**
   * Applies a peer's batch (ignoring duplicates; a gap asks for a snapshot). Returns false for a stale batch.
   * A peer with another block size is refused: its batches ignored (reported to the host), its bookings dropped.
   */
  applyBatch(b: Batch): boolean {
    if (!this.#accepts(b.routerId, b.incarnation, b.blockSize)) return true;
    const cur = this.#cursors.get(b.routerId);
    if (cur === undefined || cur.incarnation !== b.incarnation) {
      // First batch of this replica (or of its new incarnation) on this channel: its earlier history is unknown.
      if (cur !== undefined) this.target.peers.dropReplica(b.routerId);
      this.#cursors.set(b.routerId, { incarnation: b.incarnation, lastSeq: b.seq, behind: b.seq > 1 });
      if (b.seq > 1) this.#host.requestSnapshot(b.routerId, this.key);
    } else {
      if (b.seq <= cur.lastSeq) return false;
      if (b.seq > cur.lastSeq + 1) {
        cur.behind = true;
        this.#host.requestSnapshot(b.routerId, this.key);
      }
      cur.lastSeq = b.seq;
    }
    for (const op of b.ops) this.#apply(b.routerId, op);
    const kept = this.#kept.get(b.routerId);
    if (kept !== undefined && kept !== null) {
      if (kept.length < MAX_KEPT_BATCHES) kept.push(b);
      else this.#kept.set(b.routerId, null);
    }
    return true;
  }

  /** A snapshot of `replica` was asked for: the batches applied until `fetched` are kept for `applySnapshot`. */
  fetching(replica: string): void {
    this.#kept.set(replica, []);
  }

  /** The snapshot of `replica` arrived or failed: its batches are no longer kept. */
  fetched(replica: string): void {
    this.#kept.delete(replica);
  }

  /**
   * A heartbeat said the replica's last batch here is `seq`: ask for a snapshot if we are behind
   * (batches missing up to `seq`, or a gap no snapshot has filled yet).
   */
  checkBehind(replica: string, incarnation: string, seq: number): void {
    const cur = this.#cursors.get(replica);
    if (this.refuses(replica, incarnation)) return;
    const known = cur !== undefined && cur.incarnation === incarnation;
    if (known ? cur.behind || cur.lastSeq < seq : seq > 0) this.#host.requestSnapshot(replica, this.key);
  }

  /**
   * Replaces everything held for the replica with its snapshot, then replays the batches after it that
   * were applied while it crossed (kept since `fetching`). False when a later batch was applied that
   * was not kept, or a gap lies among them (the gap stays open: the next heartbeat asks again).
   */
  applySnapshot(s: Snapshot): boolean {
    if (!this.#accepts(s.routerId, s.incarnation, s.blockSize)) return false;
    const cur = this.#cursors.get(s.routerId);
    let replay: Batch[] = [];
    if (cur !== undefined && cur.incarnation === s.incarnation && cur.lastSeq > s.seq) {
      replay = (this.#kept.get(s.routerId) ?? []).filter((b) => b.incarnation === s.incarnation && b.seq > s.seq);
      const unbroken = replay.every((b, i) => b.seq === s.seq + 1 + i);
      if (!unbroken || replay.at(-1)?.seq !== cur.lastSeq) return false;
    }
    this.target.peers.dropReplica(s.routerId);
    const lastSeq = replay.at(-1)?.seq ?? s.seq;
    this.#cursors.set(s.routerId, { incarnation: s.incarnation, lastSeq, behind: false });
    for (const booking of s.bookings) this.#apply(s.routerId, { kind: 'added', booking });
    for (const binding of s.sessions) this.#apply(s.routerId, { kind: 'session', binding });
    for (const b of replay) for (const op of b.ops) this.#apply(s.routerId, op);
    return true;
  }

  /** Whether `replica`'s incarnation is refused here for another block size. */
  refuses(replica: string, incarnation: string): boolean {
    return this.#refused.get(replica)?.incarnation === incarnation;
  }

  /**
   * False when the peer's block size differs from ours (said by this message, or by an earlier one of its
   * incarnation): the first time, its bookings and cursor here are dropped. A message without a block size
   * (a replica that predates it) is taken unless its incarnation was refused.
   */
  #accepts(replica: string, incarnation: string, blockSize: number | undefined): boolean {
    const ours = this.target.blockSize;
    const refused = this.#refused.get(replica);
    if (blockSize === undefined || blockSize === ours) {
      if (refused === undefined) return true;
      if (refused.incarnation === incarnation) {
        this.#host.refused({ replica, incarnation, channel: this.key, theirs: refused.blockSize, ours, first: false });
        return false;
      }
      this.#refused.delete(replica);
      return true;
    }
    const first = refused?.incarnation !== incarnation;
    if (first) {
      this.#refused.set(replica, { incarnation, blockSize });
      this.#cursors.delete(replica);
      this.target.peers.dropReplica(replica);
    }
    this.#host.refused({ replica, incarnation, channel: this.key, theirs: blockSize, ours, first });
    return false;
  }

  /** Drops a replica (silent past the timeout): its bookings and its cursor. Returns the bookings dropped. */
  forget(replica: string): number {
    this.#refused.delete(replica);
    this.#cursors.delete(replica);
    return this.target.peers.dropReplica(replica);
  }

  #apply(replica: string, op: SyncOp): void {
    const peers = this.target.peers;
    let outcome: PeerApplyOutcome | 'adopted' | 'kept';
    switch (op.kind) {
      case 'added':
        outcome = peers.add(replica, op.booking);
        break;
      case 'prefill':
        outcome = peers.prefillCompleted(replica, op.requestId);
        break;
      case 'output':
        outcome = peers.outputBlocks(replica, op.requestId, op.outputBlocks, op.decay);
        break;
      case 'freed':
        outcome = peers.free(replica, op.requestId);
        break;
      case 'session':
        outcome = this.#sessions?.adopt(op.binding) === true ? 'adopted' : 'kept';
        break;
    }
    this.#host.applied(op.kind, outcome);
  }
}
