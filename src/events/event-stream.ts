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
 * the slot, a failed catch-up does not), garbage, restarts, catch-up and the
 * consistency bound: README.md.
 */
import type { WorkerRank } from '../common/index.js';
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
import { LiveQueue, ParkedBatches, replayNeed } from './live-queue.js';
import {
  CatchUpTimer,
  ReplayRequests,
  stepAnswer,
  type AnswerSlot,
  type ReplayPurpose,
  type ReplyInProgress,
  type GapReplaySource,
} from './gap-replay.js';
import { SequenceJudge, type LiveItem } from './sequence.js';
import { SlotWriter } from './slot-writer.js';
import type { BatchOrigin, KvEventHooks, ResetReason } from './stats.js';
import type { ApplyScheduler, Drainable, TurnBudget } from './turn-scheduler.js';

/** A catch-up replay at most this often per slot (see CatchUpTimer). */
const CATCH_UP_AFTER_MS = 1000;

export class KvEventStream implements Drainable {
  /** The (worker, dp rank) whose publisher this stream follows. */
  readonly slot: WorkerRank;
  readonly #writer: SlotWriter;
  /** The engine's replay endpoint and this stream's requests to it; undefined without one. */
  readonly #replays: ReplayRequests | undefined;
  readonly #hooks: KvEventHooks;
  readonly #liveness: EventLiveness | undefined;
  readonly #scheduler: ApplyScheduler;
  readonly #clock: IngestContext['clock'];
  readonly #log: ThrottledLog;
  readonly #opts: FilledKvEventStreamOptions;
  readonly #judge: SequenceJudge;
  /** Received, not yet judged. */
  readonly #queue: LiveQueue;
  /** Judged gaps waiting for the batches in front of them. */
  readonly #parked = new ParkedBatches();
  #restoreTried = false;
  #inconsistentSince: number | undefined;
  readonly #catchUp = new CatchUpTimer(CATCH_UP_AFTER_MS);
  /** Where a replay's answer is applied. */
  readonly #answerSlot: AnswerSlot;
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
    this.#clock = ctx.clock;
    this.#log = new ThrottledLog(ctx.logger, ctx.clock, this.#opts.logIntervalMs, {
      workerId: slot.workerId,
      dpRank: slot.dpRank,
    });
    const wake = (): void => this.#scheduler.wake(this);
    this.#replays = replay === undefined ? undefined : new ReplayRequests(replay, slot, ctx.hooks, this.#log, wake);
    this.#judge = new SequenceJudge(this.#opts);
    this.#queue = new LiveQueue(this.#opts.maxQueuedBatches);
    this.#answerSlot = {
      cursor: () => this.cursor,
      accept: (b) => this.#accept(b, 'replay'),
      lost: () => this.#reset('replay_incomplete'),
      stale: (seq) => this.#hooks.onStale?.(this.slot, seq),
      decodeError: (e) => this.#writer.decodeError(e, undefined),
    };
    this.#writer = new SlotWriter(slot, ctx, this.#log);
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
    if (this.#replays !== undefined) this.#request(cursor + 1n, 'gap');
  }

  /** True while a replay is in flight or its answer is being applied. */
  get recovering(): boolean {
    return this.#replays?.inflight !== undefined || this.#replays?.reply !== undefined;
  }

  /** Live batches received and not yet applied (queued or parked behind a gap). */
  get pendingCount(): number {
    return this.#queue.length + this.#parked.length;
  }

  /** Resolves once nothing is queued, parked behind a replay, or in flight. */
  async whenSettled(): Promise<void> {
    while (!this.#closed) {
      const req = this.#replays?.inflight;
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
      this.#unplaced();
      return;
    }
    this.onMessage(r.value.seq, r.value.payload);
  }

  /** A live batch: queued, or dropped when the queue is full (the hole is then replayed like any gap). */
  onMessage(seq: bigint, payload: Uint8Array): void {
    if (this.#closed) return;
    this.#hooks.onBatch?.(this.slot, 'live');
    if (!this.#queue.offer({ seq, payload, gen: this.#replays?.sent ?? 0 })) {
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

  /** Stops processing; a replay in flight is aborted and ignored. */
  close(): void {
    this.#closed = true;
    this.#forget();
    this.#queue.clear();
    this.#wakeIdle();
  }

  /**
   * Applies queued work within `budget`; true while more can be done now
   * (work waiting on a replay does not count).
   */
  drain(budget: TurnBudget): boolean {
    if (this.#closed) return false;
    try {
      while (!budget.spent()) {
        if (this.#writer.busy) this.#writer.applySlice(budget);
        else if (this.#step()) budget.take(1);
        else break;
      }
    } catch (err) {
      this.#internalFailure(err);
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
    this.#maybeCatchUp();
    const since = this.#inconsistentSince;
    if (this.#closed || since === undefined || this.#replays?.inflight !== undefined) return;
    const forMs = this.#clock.now() - since;
    if (forMs < this.#opts.inconsistentAfterMs) return;
    this.#log.warn(
      'inconsistent',
      { forMs: Math.round(forMs), replay: this.#replays !== undefined },
      this.#replays !== undefined
        ? "KV event stream inconsistent for too long: slot cleared, restoring from the engine's replay buffer"
        : 'KV event stream inconsistent for too long: slot cleared and scored approximately until events rebuild it',
    );
    this.#startOver('inconsistent');
    this.#restoreTried = true;
    if (this.#replays !== undefined) this.#request(0n, 'restore');
    else this.#liveness?.degrade(this.slot);
    this.#scheduler.wake(this);
  }

  /** One unit of work: a replayed batch, a parked batch now in order, or a queued live batch. */
  #step(): boolean {
    const reply = this.#replays?.reply;
    if (reply !== undefined) {
      this.#replayStep(reply);
      return true;
    }
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
   * A batch whose verdict could start the slot or be restart evidence is decoded first: one that
   * cannot be read is reported, dropped and moves nothing. Others are decoded when applied (an
   * unreadable batch in sequence still uses up its seq, as a genuine one in a newer format would).
   */
  #readIfDecisive(item: LiveItem): LiveItem | undefined {
    if (!this.#judge.decisive(item.seq)) return item;
    const batch = this.#writer.read(item.seq, item.payload);
    if (batch === undefined) this.#unplaced();
    return batch === undefined ? undefined : { ...item, batch };
  }

  #onLive(item: LiveItem): void {
    const verdict = this.#judge.judge(item);
    switch (verdict) {
      case 'initial':
        if (
          this.#replays?.inflight !== undefined ||
          (this.#replays !== undefined && !this.#restoreTried && item.seq > 0n)
        ) {
          // Restoring from the engine's buffer first: this batch waits for it.
          this.#park(item);
          if (this.#replays.inflight === undefined) {
            this.#restoreTried = true;
            this.#request(0n, 'restore');
          }
          return;
        }
        this.#accept(item, 'live');
        return;
      case 'contiguous':
        this.#accept(item, 'live');
        for (const e of this.#judge.refuteEvidence())
          this.#garbage(e, "restart evidence refuted by the publisher's next batch");
        this.#inconsistentSince = undefined;
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
        this.#inconsistent();
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
    if (this.#replays !== undefined) {
      // Reordering may still fill it; if not, #afterDrain asks for a replay.
      this.#park(item);
      this.#inconsistent();
      return;
    }
    this.#log.warn(
      'gap',
      { expected: String(expected), got: String(item.seq) },
      'KV event gap and no replay endpoint: clearing the slot',
    );
    this.#reset('gap_without_replay');
    this.#liveness?.degrade(this.slot);
    this.#accept(item, 'live');
  }

  /** Parks a judged batch in seq order; beyond the bound it is dropped (a later replay recovers it). */
  #park(item: LiveItem): void {
    if (this.#parked.add(item, this.#opts.maxPendingBatches)) return;
    this.#hooks.onPendingOverflow?.(this.slot, item.seq);
    this.#unplaced();
  }

  #canTakeParked(item: LiveItem): boolean {
    const last = this.cursor;
    if (last === null) return this.#replays?.inflight === undefined;
    return item.seq <= last + 1n;
  }

  /** Accepts a batch at the cursor; the writer decodes it (unless done) and the drain loop applies it in slices. */
  #accept(item: Pick<LiveItem, 'seq' | 'payload' | 'batch'>, origin: BatchOrigin): void {
    this.#judge.cursor.advance(item.seq);
    // In-order progress: whatever else is going on, the stream is not wedged.
    this.#inconsistentSince = undefined;
    this.#writer.accept(item.seq, item.payload, origin, item.batch);
  }

  /** Sends a replay request (with a replay endpoint); an equal need waits for the one in flight, a newer epoch's aborts it. */
  #request(from: bigint, purpose: ReplayPurpose): void {
    this.#replays?.send(from, purpose);
  }

  #replayStep(rp: ReplyInProgress): void {
    const failed = rp.reply === undefined;
    if (!failed && stepAnswer(rp, this.#answerSlot) === 'more') return;
    this.#replays!.finish();
    if (failed) this.#replayFailed(rp);
    else this.#replayDone(rp);
  }

  #replayFailed(rp: ReplyInProgress): void {
    if (this.#replays!.failed(rp)) {
      this.#unplaced(); // a catch-up: asked again after the next interval
      return;
    }
    if (this.cursor !== null) this.#reset('replay_failed');
    this.#startFresh();
  }

  #replayDone(rp: ReplyInProgress): void {
    const batches = rp.reply!.batches;
    const newest = batches.length > 0 ? batches[batches.length - 1]!.seq : undefined;
    const known = newest ?? this.cursor;
    const never = this.#parked.removeNeverSent(
      rp.req.gen,
      newest,
      known === null ? undefined : known + BigInt(this.#opts.maxSeqJump),
    );
    for (const p of never) this.#garbage(p, "sequence number beyond the publisher's newest");
    this.#queue.forgetDropped(rp.req.gen);
    this.#judge.lowerLiveHigh(newest, this.cursor, this.#parked.newest?.seq);
    this.#replays!.done(rp);
    if (this.#parked.length === 0 && this.#judge.evidence.length === 0) this.#inconsistentSince = undefined;
  }

  /**
   * Once nothing is left to apply: asks for the batches in front of a parked
   * gap that reordering did not fill, or for those a full queue dropped (one
   * replay at a time); without a replay endpoint, dropped batches clear the slot.
   */
  #afterDrain(): void {
    const idleNow = !this.#writer.busy && this.#replays?.reply === undefined && this.#queue.length === 0;
    if (idleNow && this.#queue.dropped !== undefined && this.#replays === undefined) {
      this.#queue.forgetDropped();
      this.#log.warn(
        'gap',
        { cursor: String(this.cursor) },
        'KV event queue overflowed and no replay endpoint: clearing the slot',
      );
      this.#reset('gap_without_replay');
      this.#liveness?.degrade(this.slot);
      this.#startFresh();
    }
    const from = this.#replayNeed(idleNow);
    const asking = this.#replays?.inflight !== undefined || this.#replays?.reply !== undefined || this.#writer.busy;
    if (from !== undefined && !asking) this.#request(from, 'gap');
    this.checkConsistency();
    if (!this.#hasWork() && this.#replays?.inflight === undefined) this.#wakeIdle();
  }

  #replayNeed(idleNow: boolean): bigint | undefined {
    if (this.#replays === undefined) return undefined;
    return replayNeed(this.cursor, this.#parked, this.#queue.dropped, idleNow, this.#opts.reorderWindow);
  }

  /**
   * Frames were dropped unplaced (garbage, undecodable, no room to park): whatever the flood hides,
   * a PUB or SUB at its high-water mark drops batches without a trace, and an engine that then goes
   * idle would leave the hole unseen. Once idle and due, ask the engine for everything after the cursor.
   */
  #maybeCatchUp(): void {
    const r = this.#replays;
    if (r === undefined || this.#closed || r.inflight !== undefined || r.reply !== undefined) return;
    if (
      this.#writer.busy ||
      this.#queue.length > 0 ||
      this.#parked.length > 0 ||
      !this.#catchUp.take(this.#clock.now())
    )
      return;
    const last = this.cursor;
    if (last === null) this.#restoreTried = true;
    this.#request(last === null ? 0n : last + 1n, last === null ? 'restore' : 'catch_up');
  }

  /** A frame was dropped without being placed in the sequence. */
  #unplaced(): void {
    this.#catchUp.note(this.#clock.now());
  }

  #hasWork(): boolean {
    if (this.#closed) return false;
    if (this.#writer.busy || this.#replays?.reply !== undefined || this.#queue.length > 0) return true;
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
    this.#restoreTried = false;
    // The new publisher's batches held as evidence go first, one step each.
    this.#queue.unshift(held);
  }

  /** Clears the slot and forgets every position, queued reply and parked batch (the live queue stays). */
  #startOver(reason: ResetReason): void {
    this.#reset(reason);
    this.#judge.reset();
    this.#forget();
    this.#queue.forgetDropped();
    this.#inconsistentSince = undefined;
  }

  /** Aborts the replay in flight (its answer is then ignored) and drops what waits to be applied. */
  #forget(): void {
    this.#replays?.newEpoch();
    this.#writer.abandon();
    this.#parked.clear();
  }

  /** The next batch is applied as a first batch, without another restore attempt. */
  #startFresh(): void {
    this.#judge.reset();
    this.#restoreTried = true;
  }

  #internalFailure(err: unknown): void {
    // A bug on the apply path must not become an unhandled rejection, nor
    // leave the slot half-recovered: start over from the next live batch.
    this.#log.warn('internal', { err: err instanceof Error ? err.message : String(err) }, 'KV event handling failed');
    this.#startOver('replay_failed');
    this.#startFresh();
  }

  /** Drops a batch whose seq cannot be the publisher's: counted and logged, moves nothing and starts no timer (see sequence.ts). */
  #garbage(item: LiveItem, why: string): void {
    this.#hooks.onDropped?.(this.slot, 'garbage', item.seq);
    this.#log.warn('garbage', { seq: String(item.seq), cursor: String(this.cursor) }, `KV event batch dropped: ${why}`);
    this.#unplaced();
  }

  #inconsistent(): void {
    this.#inconsistentSince ??= this.#clock.now();
  }

  #reset(reason: ResetReason): void {
    this.#writer.reset(reason);
  }

  #wakeIdle(): void {
    const waiters = this.#idle;
    this.#idle = [];
    for (const w of waiters) w();
  }
}
