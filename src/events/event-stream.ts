/**
 * The ordered KV-event stream of one publisher, i.e. one (worker, dp_rank):
 * a bounded queue, sequence judgement, gap / restart / replay handling, and
 * application in bounded slices. No sockets: messages are pushed in by the
 * subscriber, replay goes through an injected `GapReplaySource`, and draining is
 * paced by the context's scheduler, so every path is testable without ZMQ.
 *
 *   live msg ──► queue (bounded: full ⇒ dropped, the hole is replayed like any gap)
 *                  │ drained a slice per event-loop turn (turn-scheduler.ts)
 *                  ▼
 *   judge (sequence.ts): contiguous ─► apply (slot-writer.ts)
 *                        gap ─► park; unfilled by reordering ⇒ one replay(cursor+1)
 *                        stale ─► skip      garbage (seq absurdly far ahead) ─► drop, nothing moves
 *                        restart evidence ─► hold; confirmed ⇒ clear the slot, start over
 *   frames dropped unplaced (garbage, undecodable) ⇒ at most once a second, one catch-up replay(cursor+1)
 *
 * Replays (one in flight, a newer need aborts it; a short or failed one clears
 * the slot, a failed catch-up does not), catch-up and the consistency bound
 * are slot-recovery.ts's; garbage and restarts are judged here: README.md.
 */
import type { WorkerRank } from '../common/index.js';
import { isKvgateError } from '../errors/index.js';
import { parseEventFrames } from './decode.js';
import type { EventLiveness } from './liveness.js';
import { ThrottledLog } from './log.js';
import {
  fillOptions,
  kDefaultStreamOptions,
  type FilledKvEventStreamOptions,
  type IngestContext,
  type KvEventStreamOptions,
} from './options.js';
import { LiveQueue, ParkedBatches } from './live-queue.js';
import type { GapReplaySource } from './gap-replay.js';
import { SequenceJudge, type LiveItem } from './sequence.js';
import { SlotRecovery } from './slot-recovery.js';
import { SlotWriter } from './slot-writer.js';
import type { BatchOrigin, KvEventHooks, ResetReason } from './stats.js';
import type { ApplyScheduler, Drainable, TurnBudget } from './turn-scheduler.js';
import type { KvEventBatch } from './types.js';

/** The payload of a batch that arrived decoded (never read: the batch is). */
const NO_PAYLOAD = new Uint8Array(0);

export class KvEventStream implements Drainable {
  /** The (worker, dp rank) whose publisher this stream follows. */
  readonly slot: WorkerRank;
  readonly #writer: SlotWriter;
  /** The engine's replay endpoint, this stream's requests to it and the consistency bound. */
  readonly #recovery: SlotRecovery;
  readonly #hooks: KvEventHooks;
  readonly #liveness: EventLiveness | undefined;
  readonly #scheduler: ApplyScheduler;
  readonly #log: ThrottledLog;
  readonly #opts: FilledKvEventStreamOptions;
  readonly #judge: SequenceJudge;
  /** Received, not yet judged. */
  readonly #queue: LiveQueue;
  /** Judged gaps waiting for the batches in front of them. */
  readonly #parked = new ParkedBatches();
  #idle: (() => void)[] = [];
  #closed = false;

  /**
   * @param slot the (worker, dp rank) whose publisher this stream follows.
   * @param ctx the manager's shared ingestion context.
   * @param replay the engine's replay endpoint; without it a gap clears the slot.
   */
  constructor(slot: WorkerRank, ctx: IngestContext, replay?: GapReplaySource, options?: KvEventStreamOptions) {
    this.#opts = fillOptions(kDefaultStreamOptions, options);
    this.slot = slot;
    this.#hooks = ctx.hooks;
    this.#liveness = ctx.liveness;
    this.#scheduler = ctx.scheduler;
    this.#log = new ThrottledLog(ctx.logger, ctx.clock, this.#opts.logIntervalMs, {
      workerId: slot.workerId,
      dpRank: slot.dpRank,
    });
    this.#judge = new SequenceJudge(this.#opts);
    this.#queue = new LiveQueue(this.#opts.maxQueuedBatches);
    this.#writer = new SlotWriter(slot, ctx, this.#log, this.#opts.maxBatchElements);
    this.#recovery = new SlotRecovery({
      slot,
      ctx,
      replay,
      log: this.#log,
      opts: this.#opts,
      wake: () => this.#scheduler.wake(this),
      stream: {
        judge: this.#judge,
        queue: this.#queue,
        parked: this.#parked,
        writer: this.#writer,
        accept: (item, origin) => this.#accept(item, origin),
        reset: (reason) => this.#writer.reset(reason),
        garbage: (item, why) => this.#garbage(item, why),
      },
    });
  }

  /** Newest accepted sequence number, null before the first. */
  get cursor(): bigint | null {
    return this.#judge.cursor.last;
  }

  /** The newest batch applied in full (one being applied in slices does not count yet). */
  get appliedCursor(): bigint | null {
    const c = this.cursor;
    return c === null || !this.#writer.busy ? c : c > 0n ? c - 1n : null;
  }

  /** Starts at a replica snapshot's cursor (its blocks already in the index): what the engine published since is replayed now. */
  seed(cursor: bigint): void {
    if (this.cursor !== null || this.pendingCount > 0) return;
    this.#judge.seed(cursor);
    this.#writer.seeded();
    this.#recovery.request(cursor + 1n, 'gap');
  }

  /** True while a replay is in flight or its answer is being applied. */
  get recovering(): boolean {
    return this.#recovery.inflight !== undefined || this.#recovery.reply !== undefined;
  }

  /** Live batches received and not yet applied (queued or parked behind a gap). */
  get pendingCount(): number {
    return this.#queue.length + this.#parked.length;
  }

  /** Resolves once nothing is queued, parked behind a replay, or in flight. */
  async whenSettled(): Promise<void> {
    while (!this.#closed) {
      const req = this.#recovery.inflight;
      if (req !== undefined) await req.promise;
      else if (this.#hasWork()) await new Promise<void>((resolve) => this.#idle.push(resolve));
      else return;
    }
  }

  /** A raw live message `[topic, seq, payload]`. */
  onFrames(frames: readonly Uint8Array[]): void {
    if (this.#closed) return;
    const r = parseEventFrames(frames);
    if (!r.ok) {
      this.#writer.decodeError(r.error, undefined);
      this.#recovery.unplaced();
      return;
    }
    this.onMessage(r.value.seq, r.value.payload);
  }

  /** A live batch: queued, or dropped when the queue is full (the hole is then replayed like any gap). */
  onMessage(seq: bigint, payload: Uint8Array): void {
    this.#offer(seq, payload, undefined);
  }

  /** A live batch an ingestion thread already decoded (and hashed): handled as `onMessage`, without decoding. */
  onDecoded(seq: bigint, batch: KvEventBatch): void {
    this.#offer(seq, NO_PAYLOAD, batch);
  }

  #offer(seq: bigint, payload: Uint8Array, batch: KvEventBatch | undefined): void {
    if (this.#closed) return;
    this.#hooks.onBatch?.(this.slot, 'live');
    if (!this.#queue.offer({ seq, payload, gen: this.#recovery.sent, batch })) {
      this.#hooks.onDropped?.(this.slot, 'queue_full', seq);
      this.#log.warn(
        'queue_full',
        { seq: String(seq), queued: this.#opts.maxQueuedBatches },
        'KV event queue full: batch dropped, to be replayed once the queue drains',
      );
      return;
    }
    this.#scheduler.wake(this);
  }

  /** Connected to its publisher again after a loss: a catch-up asks for what was published meanwhile (SlotRecovery). */
  reconnected(): void {
    if (!this.#closed) this.#recovery.reconnected();
  }

  /** Stops processing; a replay in flight is aborted and ignored. */
  close(): void {
    this.#closed = true;
    this.#forget();
    this.#queue.clear();
    this.#wakeIdle();
  }

  /** Applies queued work within `budget`; true while more can be done now (work waiting on a replay does not count). */
  drain(budget: TurnBudget): boolean {
    if (this.#closed) return false;
    try {
      while (!budget.spent()) {
        if (this.#writer.busy) this.#writer.applySlice(budget);
        else if (this.#step()) budget.take(1);
        else break;
      }
    } catch (err) {
      // The index was discarded under the batch: its owner rebuilds every slot (`rebuild`); until then
      // the slot is scored approximately. Anything else is a bug on the apply path.
      if (isKvgateError(err, 'KVG_ERR_INDEX_MEMORY')) {
        this.#writer.abandon();
        this.#liveness?.degrade(this.slot);
      } else this.#internalFailure(err);
    }
    this.#afterDrain();
    return this.#hasWork();
  }

  /**
   * Resets the slot when it has been inconsistent (unconfirmed restart
   * evidence, an unfilled gap) for longer than `inconsistentAfterMs`, and asks
   * for a catch-up once frames were dropped unplaced. Run after every drain
   * and periodically by the manager (so a flood that ends in silence is caught up).
   */
  checkConsistency(): void {
    if (this.#closed) return;
    this.#recovery.maybeCatchUp();
    const forMs = this.#recovery.overdueMs();
    if (forMs === undefined) return;
    const replay = this.#recovery.canReplay;
    this.#log.warn(
      'inconsistent',
      { forMs: Math.round(forMs), replay },
      replay
        ? "KV event stream inconsistent for too long: slot cleared, restoring from the engine's replay buffer"
        : 'KV event stream inconsistent for too long: slot cleared and scored approximately until events rebuild it',
    );
    this.#startOver('inconsistent');
    this.#recovery.restore();
    if (!replay) this.#liveness?.degrade(this.slot);
    this.#scheduler.wake(this);
  }

  /**
   * The index this slot writes was discarded (the module failed an allocation): the slot starts over and
   * restores from the engine's whole replay buffer, as after an unrecoverable gap; without a replay endpoint,
   * from live events. Scored approximately (`stale`) until a batch is applied again.
   */
  rebuild(): void {
    if (this.#closed) return;
    this.#startOver(undefined);
    this.#liveness?.degrade(this.slot);
    if (this.#recovery.canReplay) this.#recovery.restore();
    else this.#recovery.startFresh();
    this.#scheduler.wake(this);
  }

  /** One unit of work: a replayed batch, a parked batch now in order, or a queued live batch. */
  #step(): boolean {
    if (this.#recovery.step()) return true;
    const parked = this.#parked.head;
    if (parked !== undefined && this.#canTakeParked(parked)) {
      this.#parked.shift();
      const last = this.cursor;
      if (last !== null && parked.seq <= last) this.#hooks.onStale?.(this.slot, parked.seq);
      else this.#accept(parked, 'live');
      return true;
    }
    const queued = this.#queue.shift();
    if (queued === undefined) return false;
    const item = this.#readIfDecisive(queued);
    if (item !== undefined) this.#onLive(item);
    return true;
  }

  /**
   * A batch whose verdict could start the slot or be restart evidence is read first: one that cannot be read, or
   * that names another dp rank (a mis-wired endpoint: not this slot's publisher), is reported, dropped and moves
   * nothing. Others are decoded when applied (an unreadable batch in sequence still uses up its seq, as a genuine
   * one in a newer format would; one for another rank too, and is dropped then).
   */
  #readIfDecisive(item: LiveItem): LiveItem | undefined {
    if (!this.#judge.decisive(item.seq)) return item;
    const batch = this.#writer.readOwn(item.seq, item.payload, item.batch);
    if (batch === undefined) this.#recovery.unplaced();
    return batch === undefined ? undefined : { ...item, batch };
  }

  #onLive(item: LiveItem): void {
    const verdict = this.#judge.judge(item);
    switch (verdict) {
      case 'initial':
        if (this.#recovery.holdsFirstBatch(item.seq)) {
          // Restoring from the engine's buffer first: this batch waits for it.
          this.#park(item);
          this.#recovery.restoreOnce();
          return;
        }
        this.#accept(item, 'live');
        return;
      case 'contiguous':
        this.#accept(item, 'live');
        for (const e of this.#judge.refuteEvidence())
          this.#garbage(e, "restart evidence refuted by the publisher's next batch");
        this.#recovery.consistent();
        return;
      case 'gap':
        this.#gap(item);
        return;
      case 'stale':
        this.#hooks.onStale?.(this.slot, item.seq);
        return;
      case 'garbage':
        this.#garbage(item, 'sequence number implausibly far ahead');
        return;
      case 'restart_evidence':
        this.#recovery.inconsistent();
        return;
      case 'restart':
        this.#restart(item.seq);
        return;
    }
  }

  #gap(item: LiveItem): void {
    const expected = this.cursor! + 1n;
    // One gap per hole: batches parked behind an open one are not new gaps.
    if (this.#parked.length === 0) this.#hooks.onGap?.(this.slot, expected, item.seq);
    if (this.#recovery.canReplay) {
      // Reordering may still fill it; if not, #afterDrain asks for a replay.
      this.#park(item);
      this.#recovery.inconsistent();
      return;
    }
    this.#log.warn(
      'gap',
      { expected: String(expected), got: String(item.seq) },
      'KV event gap and no replay endpoint: clearing the slot',
    );
    this.#writer.reset('gap_without_replay');
    this.#liveness?.degrade(this.slot);
    this.#accept(item, 'live');
  }

  /** Parks a judged batch in seq order; beyond the bound it is dropped (a later replay recovers it). */
  #park(item: LiveItem): void {
    if (this.#parked.add(item, this.#opts.maxPendingBatches)) return;
    this.#hooks.onDropped?.(this.slot, 'pending_full', item.seq);
    this.#log.warn(
      'pending_full',
      { seq: String(item.seq), parked: this.#opts.maxPendingBatches },
      'KV event batches parked behind a replay past the bound: batch dropped, to be recovered by the next replay',
    );
    this.#recovery.unplaced();
  }

  #canTakeParked(item: LiveItem): boolean {
    const last = this.cursor;
    if (last === null) return this.#recovery.inflight === undefined;
    return item.seq <= last + 1n;
  }

  /** Accepts a batch at the cursor; the writer decodes it (unless done) and the drain loop applies it in slices. */
  #accept(item: Pick<LiveItem, 'seq' | 'payload' | 'batch'>, origin: BatchOrigin): void {
    this.#judge.cursor.advance(item.seq);
    // In-order progress: whatever else is going on, the stream is not wedged.
    this.#recovery.consistent();
    this.#writer.accept(item.seq, item.payload, origin, item.batch);
  }

  /**
   * Once nothing is left to apply: asks for the batches in front of a parked
   * gap that reordering did not fill, or for those a full queue dropped (one
   * replay at a time); without a replay endpoint, dropped batches clear the slot.
   */
  #afterDrain(): void {
    const idleNow = !this.#writer.busy && this.#recovery.reply === undefined && this.#queue.length === 0;
    if (idleNow && this.#queue.dropped !== undefined && !this.#recovery.canReplay) {
      this.#queue.forgetDropped();
      this.#log.warn(
        'gap',
        { cursor: String(this.cursor) },
        'KV event queue overflowed and no replay endpoint: clearing the slot',
      );
      this.#writer.reset('gap_without_replay');
      this.#liveness?.degrade(this.slot);
      this.#recovery.startFresh();
    }
    this.#recovery.askAfterDrain(idleNow);
    this.checkConsistency();
    if (!this.#hasWork() && this.#recovery.inflight === undefined) this.#wakeIdle();
  }

  #hasWork(): boolean {
    if (this.#closed) return false;
    if (this.#writer.busy || this.#recovery.reply !== undefined || this.#queue.length > 0) return true;
    const parked = this.#parked.head;
    return parked !== undefined && this.#canTakeParked(parked);
  }

  #restart(seq: bigint): void {
    this.#log.warn(
      'restart',
      { lastSeq: String(this.#judge.liveHigh), seq: String(seq) },
      'KV event publisher restarted: clearing the slot',
    );
    const held = this.#judge.takeEvidence();
    this.#startOver('restart');
    this.#recovery.restarted();
    // The new publisher's batches held as evidence go first, one step each.
    this.#queue.unshift(held);
  }

  /**
   * Clears the slot and forgets every position, queued reply and parked batch (the live queue stays). Without a
   * reason the clearing is not a reset of the slot (its index was discarded whole).
   */
  #startOver(reason: ResetReason | undefined): void {
    if (reason === undefined) this.#writer.clear();
    else this.#writer.reset(reason);
    this.#judge.reset();
    this.#forget();
    this.#queue.forgetDropped();
    this.#recovery.consistent();
  }

  /** Aborts the replay in flight (its answer is then ignored) and drops what waits to be applied. */
  #forget(): void {
    this.#recovery.newEpoch();
    this.#writer.abandon();
    this.#parked.clear();
  }

  #internalFailure(err: unknown): void {
    // A bug on the apply path must not become an unhandled rejection, nor
    // leave the slot half-recovered: start over from the next live batch.
    // Its own reset reason: no replay failed, and the engine lost nothing.
    this.#log.warn('internal', { err: err instanceof Error ? err.message : String(err) }, 'KV event handling failed');
    this.#startOver('apply_failed');
    this.#recovery.startFresh();
  }

  /** Drops a batch whose seq cannot be the publisher's: counted and logged, moves nothing and starts no timer (see sequence.ts). */
  #garbage(item: LiveItem, why: string): void {
    this.#hooks.onDropped?.(this.slot, 'garbage', item.seq);
    this.#log.warn('garbage', { seq: String(item.seq), cursor: String(this.cursor) }, `KV event batch dropped: ${why}`);
    this.#recovery.unplaced();
  }

  #wakeIdle(): void {
    const waiters = this.#idle;
    this.#idle = [];
    for (const w of waiters) w();
  }
}
