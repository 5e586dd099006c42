/**
 * The ordered KV-event stream of one publisher, i.e. one (worker, dp_rank):
 * a bounded queue, sequence judgement, gap / restart / replay handling, and
 * application in bounded slices. No sockets: messages are pushed in by the
 * subscriber, replay goes through an injected `ReplaySource`, and draining is
 * paced by the context's scheduler, so every path is testable without ZMQ.
 *
 *   live msg ──► queue (bounded: full ⇒ dropped, the hole is replayed like any gap)
 *                  │ drained a slice per event-loop turn (turn-scheduler.ts)
 *                  ▼
 *   judge (sequence.ts): contiguous ─► apply (slot-writer.ts)
 *                        gap ─► park; unfilled by reordering ⇒ one replay(cursor+1)
 *                        stale ─► skip      garbage (seq absurdly far ahead) ─► drop
 *                        restart evidence ─► hold; confirmed ⇒ clear the slot, start over
 *
 * Replays (one in flight, a newer need aborts it; a short or failed one clears
 * the slot), garbage, restarts and the consistency bound: README.md.
 */
import type { WorkerRank } from '../common/index.js';
import { parseEventFrames } from './decode.js';
import type { EventLiveness } from './liveness.js';
import { ThrottledLog } from './log.js';
import { fillOptions, kDefaultStreamOptions, type FilledKvEventStreamOptions, type IngestContext, type KvEventStreamOptions } from './options.js';
import { LiveQueue, ParkedBatches, replayNeed } from './live-queue.js';
import type { ReplayReply, KvReplayRequest, ReplyInProgress, ReplaySource } from './replay.js';
import { SequenceJudge, type LiveItem } from './sequence.js';
import { SlotWriter } from './slot-writer.js';
import type { BatchOrigin, KvEventHooks, ResetReason } from './stats.js';
import type { ApplyScheduler, Drainable, TurnBudget } from './turn-scheduler.js';

export class KvEventStream implements Drainable {
  readonly workerId: number;
  readonly dpRank: number;
  readonly #writer: SlotWriter;
  readonly #source: ReplaySource | undefined;
  readonly #hooks: KvEventHooks;
  readonly #liveness: EventLiveness | undefined;
  readonly #scheduler: ApplyScheduler;
  readonly #clock: IngestContext['clock'];
  readonly #log: ThrottledLog;
  readonly #opts: FilledKvEventStreamOptions;
  readonly #judge: SequenceJudge;
  /** Received, not yet judged. */
  readonly #queue = new LiveQueue();
  /** Judged gaps waiting for the batches in front of them. */
  readonly #parked = new ParkedBatches();
  #reply: ReplyInProgress | undefined;
  #inflight: KvReplayRequest | undefined;
  #requests = 0;
  /** Bumped on restart, resync and close, so a replay answer for an older state is ignored. */
  #epoch = 0;
  #restoreTried = false;
  /** Batches dropped at a full queue since the last replay that could cover them. */
  #dropped: { high: bigint; gen: number } | undefined;
  #inconsistentSince: number | undefined;
  #idle: (() => void)[] = [];
  #closed = false;

  /**
   * @param slot the (worker, dp rank) whose publisher this stream follows.
   * @param ctx the manager's shared ingestion context.
   * @param replay the engine's replay endpoint; without it a gap clears the slot.
   */
  constructor(slot: WorkerRank, ctx: IngestContext, replay?: ReplaySource, options?: KvEventStreamOptions) {
    this.#opts = fillOptions(kDefaultStreamOptions, options);
    this.workerId = slot.workerId;
    this.dpRank = slot.dpRank;
    this.#source = replay;
    this.#hooks = ctx.hooks;
    this.#liveness = ctx.liveness;
    this.#scheduler = ctx.scheduler;
    this.#clock = ctx.clock;
    this.#log = new ThrottledLog(ctx.log, ctx.clock, this.#opts.logIntervalMs);
    this.#judge = new SequenceJudge(this.#opts);
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
    if (this.#source !== undefined) this.#request(cursor + 1n);
  }

  /** True while a replay is in flight or its answer is being applied. */
  get recovering(): boolean {
    return this.#inflight !== undefined || this.#reply !== undefined;
  }

  /** Live batches received and not yet applied (queued or parked behind a gap). */
  get pendingCount(): number {
    return this.#queue.length + this.#parked.length;
  }

  /** Resolves once nothing is queued, parked behind a replay, or in flight. */
  async whenSettled(): Promise<void> {
    while (!this.#closed) {
      const req = this.#inflight;
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
      return;
    }
    this.onMessage(r.value.seq, r.value.payload);
  }

  /** A live batch: queued, or dropped when the queue is full (the hole is then replayed like any gap). */
  onMessage(seq: bigint, payload: Uint8Array): void {
    if (this.#closed) return;
    this.#hooks.onBatch?.(this.workerId, this.dpRank, 'live');
    if (this.#queue.length >= this.#opts.maxQueuedBatches) {
      this.#hooks.onDropped?.(this.workerId, this.dpRank, 'queue_full', seq);
      const high = this.#dropped !== undefined && this.#dropped.high > seq ? this.#dropped.high : seq;
      this.#dropped = { high, gen: this.#requests };
      this.#log.warn('queue_full', this.#fields({ seq: String(seq), queued: this.#opts.maxQueuedBatches }),
        'KV event queue full: batch dropped, to be replayed once the queue drains');
      return;
    }
    this.#queue.push({ seq, payload, gen: this.#requests });
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
   * Resets the slot when it has been inconsistent (garbage, unconfirmed
   * restart evidence, an unfilled gap) for longer than `inconsistentAfterMs`.
   * Run after every drain and periodically by the manager.
   */
  checkConsistency(): void {
    const since = this.#inconsistentSince;
    if (this.#closed || since === undefined || this.#inflight !== undefined) return;
    const forMs = this.#clock.now() - since;
    if (forMs < this.#opts.inconsistentAfterMs) return;
    this.#log.warn('inconsistent', this.#fields({ forMs: Math.round(forMs), replay: this.#source !== undefined }),
      this.#source !== undefined ? 'KV event stream inconsistent for too long: slot cleared, restoring from the engine\'s replay buffer'
        : 'KV event stream inconsistent for too long: slot cleared and scored approximately until events rebuild it');
    this.#startOver('inconsistent');
    this.#restoreTried = true;
    if (this.#source !== undefined) this.#request(0n);
    else this.#liveness?.degrade(this.workerId, this.dpRank);
    this.#scheduler.wake(this);
  }

  /** One unit of work: a replayed batch, a parked batch now in order, or a queued live batch. */
  #step(): boolean {
    if (this.#reply !== undefined) {
      this.#replayStep(this.#reply);
      return true;
    }
    const parked = this.#parked.head;
    if (parked !== undefined && this.#canTakeParked(parked)) {
      this.#parked.shift();
      const last = this.cursor;
      if (last !== null && parked.seq <= last) this.#hooks.onStale?.(this.workerId, this.dpRank, parked.seq);
      else this.#accept(parked.seq, parked.payload, 'live');
      return true;
    }
    const item = this.#queue.shift();
    if (item === undefined) return false;
    this.#onLive(item);
    return true;
  }

  #onLive(item: LiveItem): void {
    const verdict = this.#judge.judge(item);
    switch (verdict) {
      case 'initial':
        if (this.#inflight !== undefined || (this.#source !== undefined && !this.#restoreTried && item.seq > 0n)) {
          // Restoring from the engine's buffer first: this batch waits for it.
          this.#park(item);
          if (this.#inflight === undefined) {
            this.#restoreTried = true;
            this.#request(0n);
          }
          return;
        }
        this.#accept(item.seq, item.payload, 'live');
        return;
      case 'contiguous':
        this.#accept(item.seq, item.payload, 'live');
        for (const e of this.#judge.refuteEvidence()) this.#garbage(e, 'restart evidence refuted by the publisher\'s next batch');
        this.#inconsistentSince = undefined;
        return;
      case 'gap': this.#gap(item); return;
      case 'stale': this.#hooks.onStale?.(this.workerId, this.dpRank, item.seq); return;
      case 'garbage': this.#garbage(item, 'sequence number implausibly far ahead'); return;
      case 'restart_evidence': this.#inconsistent(); return;
      case 'restart': this.#restart(item.seq); return;
    }
  }

  #gap(item: LiveItem): void {
    const expected = this.cursor! + 1n;
    // One gap per hole: batches parked behind an open one are not new gaps.
    if (this.#parked.length === 0) this.#hooks.onGap?.(this.workerId, this.dpRank, expected, item.seq);
    if (this.#source !== undefined) {
      // Reordering may still fill it; if not, #afterDrain asks for a replay.
      this.#park(item);
      this.#inconsistent();
      return;
    }
    this.#log.warn('gap', this.#fields({ expected: String(expected), got: String(item.seq) }), 'KV event gap and no replay endpoint: clearing the slot');
    this.#reset('gap_without_replay');
    this.#liveness?.degrade(this.workerId, this.dpRank);
    this.#accept(item.seq, item.payload, 'live');
  }

  /** Parks a judged batch in seq order; beyond the bound it is dropped (a later replay recovers it). */
  #park(item: LiveItem): void {
    if (!this.#parked.add(item, this.#opts.maxPendingBatches)) this.#hooks.onPendingOverflow?.(this.workerId, this.dpRank, item.seq);
  }

  #canTakeParked(item: LiveItem): boolean {
    const last = this.cursor;
    if (last === null) return this.#inflight === undefined;
    return item.seq <= last + 1n;
  }

  /** Accepts a batch at the cursor; the writer decodes it and the drain loop applies it in slices. */
  #accept(seq: bigint, payload: Uint8Array, origin: BatchOrigin): void {
    this.#judge.cursor.advance(seq);
    // In-order progress: whatever else is going on, the stream is not wedged.
    this.#inconsistentSince = undefined;
    this.#writer.accept(seq, payload, origin);
  }

  /** Sends a replay request; an equal need waits for the one in flight, a newer epoch's aborts it. */
  #request(from: bigint): void {
    const source = this.#source!;
    const prev = this.#inflight;
    if (prev !== undefined) {
      if (prev.epoch === this.#epoch) return;
      prev.abort.abort();
    }
    const req: KvReplayRequest = { epoch: this.#epoch, from, gen: ++this.#requests, abort: new AbortController(), promise: Promise.resolve() };
    this.#inflight = req;
    this.#hooks.onReplayRequested?.(this.workerId, this.dpRank, from);
    req.promise = source.replay(from, req.abort.signal).then(
      (reply) => this.#settled(req, reply, undefined),
      (err: unknown) => this.#settled(req, undefined, err),
    );
  }

  #settled(req: KvReplayRequest, reply: ReplayReply | undefined, err: unknown): void {
    if (this.#inflight === req) this.#inflight = undefined;
    if (req.epoch !== this.#epoch || this.#closed) {
      this.#scheduler.wake(this);
      return;
    }
    this.#reply = { req, reply, err, next: 0, applied: 0, complete: true };
    this.#scheduler.wake(this);
  }

  #replayStep(rp: ReplyInProgress): void {
    if (rp.reply === undefined) {
      this.#reply = undefined;
      this.#replayFailed(rp.req.from, rp.err);
      return;
    }
    if (rp.next === 0) for (const e of rp.reply.errors) this.#writer.decodeError(e, undefined);
    const b = rp.reply.batches[rp.next++];
    if (b === undefined) {
      this.#reply = undefined;
      this.#replayDone(rp);
      return;
    }
    const last = this.cursor;
    if (last !== null && b.seq <= last) {
      this.#hooks.onStale?.(this.workerId, this.dpRank, b.seq);
      return;
    }
    // The engine's buffer is a window: missing batches before the first
    // replayed one are only a loss if we already had state (an initial
    // restore starts from whatever the window holds).
    if (last !== null && b.seq !== last + 1n) {
      rp.complete = false;
      this.#reset('replay_incomplete');
    }
    this.#accept(b.seq, b.payload, 'replay');
    rp.applied++;
  }

  #replayFailed(from: bigint, err: unknown): void {
    this.#hooks.onReplay?.(this.workerId, this.dpRank, 'failed', 0);
    this.#log.warn('replay_failed', this.#fields({ from: String(from), err: err instanceof Error ? err.message : String(err) }),
      'KV event replay failed: clearing the slot and continuing from live events');
    if (this.cursor !== null) this.#reset('replay_failed');
    this.#startFresh();
  }

  #replayDone(rp: ReplyInProgress): void {
    const batches = rp.reply!.batches;
    const newest = batches.length > 0 ? batches[batches.length - 1]!.seq : undefined;
    // Parked before the request and beyond what the engine holds: it never sent them.
    const never = this.#parked.remove((p) => p.gen < rp.req.gen && (newest === undefined || p.seq > newest));
    for (const p of never) this.#garbage(p, 'sequence number beyond the publisher\'s newest');
    if (this.#dropped !== undefined && rp.req.gen > this.#dropped.gen) this.#dropped = undefined;
    const high = [newest, this.cursor, this.#parked.newest?.seq].reduce<bigint | undefined>((m, v) => (v === undefined || v === null ? m : m === undefined || v > m ? v : m), undefined);
    if (high !== undefined) this.#judge.lowerLiveHigh(high);
    this.#hooks.onReplay?.(this.workerId, this.dpRank, rp.complete ? 'recovered' : 'incomplete', rp.applied);
    if (!rp.complete) {
      this.#log.warn('replay_incomplete', this.#fields({ from: String(rp.req.from) }), 'KV event replay buffer no longer holds the missing batches: slot cleared');
    }
    if (this.#parked.length === 0 && this.#judge.evidence.length === 0) this.#inconsistentSince = undefined;
  }

  /**
   * Once nothing is left to apply: asks for the batches in front of a parked
   * gap that reordering did not fill, or for those a full queue dropped (one
   * replay at a time); without a replay endpoint, dropped batches clear the slot.
   */
  #afterDrain(): void {
    const idleNow = !this.#writer.busy && this.#reply === undefined && this.#queue.length === 0;
    if (idleNow && this.#dropped !== undefined && this.#source === undefined) {
      this.#dropped = undefined;
      this.#log.warn('gap', this.#fields({ cursor: String(this.cursor) }), 'KV event queue overflowed and no replay endpoint: clearing the slot');
      this.#reset('gap_without_replay');
      this.#liveness?.degrade(this.workerId, this.dpRank);
      this.#startFresh();
    }
    const from = this.#replayNeed(idleNow);
    if (from !== undefined && this.#inflight === undefined && this.#reply === undefined && !this.#writer.busy) this.#request(from);
    this.checkConsistency();
    if (!this.#hasWork() && this.#inflight === undefined) this.#wakeIdle();
  }

  #replayNeed(idleNow: boolean): bigint | undefined {
    return this.#source === undefined ? undefined : replayNeed(this.cursor, this.#parked, this.#dropped, idleNow, this.#opts.reorderWindow);
  }

  #hasWork(): boolean {
    if (this.#closed) return false;
    if (this.#writer.busy || this.#reply !== undefined || this.#queue.length > 0) return true;
    const parked = this.#parked.head;
    return parked !== undefined && this.#canTakeParked(parked);
  }

  #restart(seq: bigint): void {
    this.#log.warn('restart', this.#fields({ lastSeq: String(this.#judge.liveHigh), seq: String(seq) }), 'KV event publisher restarted: clearing the slot');
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
    this.#dropped = undefined;
    this.#inconsistentSince = undefined;
  }

  /** Aborts the replay in flight (its answer is then ignored) and drops what waits to be applied. */
  #forget(): void {
    this.#epoch++;
    this.#inflight?.abort.abort();
    this.#inflight = undefined;
    this.#reply = undefined;
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
    this.#log.warn('internal', this.#fields({ err: err instanceof Error ? err.message : String(err) }), 'KV event handling failed');
    this.#startOver('replay_failed');
    this.#startFresh();
  }

  #garbage(item: LiveItem, why: string): void {
    this.#hooks.onDropped?.(this.workerId, this.dpRank, 'garbage', item.seq);
    this.#log.warn('garbage', this.#fields({ seq: String(item.seq), cursor: String(this.cursor) }), `KV event batch dropped: ${why}`);
    this.#inconsistent();
  }

  #inconsistent(): void { this.#inconsistentSince ??= this.#clock.now(); }

  #reset(reason: ResetReason): void {
    this.#writer.reset(reason);
  }

  #wakeIdle(): void {
    const waiters = this.#idle;
    this.#idle = [];
    for (const w of waiters) w();
  }

  #fields(extra: Record<string, unknown>): Record<string, unknown> {
    return { workerId: this.workerId, dpRank: this.dpRank, ...extra };
  }
}
