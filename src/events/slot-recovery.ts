/**
 * A slot's recovery from its engine's replay buffer, beside the stream that orders its live
 * batches (event-stream.ts): the replay requests (a restore before the first batch, a gap in front
 * of parked batches, what a full queue dropped, a catch-up after frames dropped unplaced), the
 * application of their answers a batch per step, and the consistency bound (since when the slot
 * has waited on unconfirmed restart evidence or an unfilled gap). Without a replay endpoint no
 * replay is ever sent; the bound is still kept, and the stream clears the slot itself.
 */
import type { WorkerRank } from '../common/index.js';
import type { SequencedPayload } from './decode.js';
import {
  CatchUpTimer,
  ReplayRequests,
  stepAnswer,
  type AnswerSlot,
  type GapReplaySource,
  type KvReplayRequest,
  type ReplayPurpose,
  type ReplyInProgress,
} from './gap-replay.js';
import { replayNeed, type LiveQueue, type ParkedBatches } from './live-queue.js';
import type { ThrottledLog } from './log.js';
import type { FilledKvEventStreamOptions, IngestContext } from './options.js';
import type { LiveItem, SequenceJudge } from './sequence.js';
import type { SlotWriter } from './slot-writer.js';
import type { BatchOrigin, KvEventHooks, ResetReason } from './stats.js';

/** A catch-up replay at most this often per slot (see CatchUpTimer). */
const CATCH_UP_AFTER_MS = 1000;

/** What recovery works on in its stream: the holding areas an answer settles, and the stream's own steps. */
export interface RecoveringStream {
  readonly judge: SequenceJudge;
  readonly queue: LiveQueue;
  readonly parked: ParkedBatches;
  readonly writer: SlotWriter;
  /** Accepts a batch at the cursor (the writer decodes and applies it). */
  accept(item: SequencedPayload, origin: BatchOrigin): void;
  /** Clears the slot's entries. */
  reset(reason: ResetReason): void;
  /** Drops a batch whose seq cannot be the publisher's: counted and logged. */
  garbage(item: LiveItem, why: string): void;
}

export interface SlotRecoveryOptions {
  readonly slot: WorkerRank;
  readonly ctx: IngestContext;
  /** The engine's replay endpoint; undefined without one. */
  readonly replay: GapReplaySource | undefined;
  readonly log: ThrottledLog;
  readonly opts: FilledKvEventStreamOptions;
  readonly stream: RecoveringStream;
  /** Called when a replay settles: the stream wakes to apply or drop its answer. */
  readonly wake: () => void;
}

export class SlotRecovery {
  readonly #replays: ReplayRequests | undefined;
  readonly #stream: RecoveringStream;
  readonly #hooks: KvEventHooks;
  readonly #clock: IngestContext['clock'];
  readonly #opts: FilledKvEventStreamOptions;
  /** Where a replay's answer is applied. */
  readonly #answerSlot: AnswerSlot;
  readonly #catchUp = new CatchUpTimer(CATCH_UP_AFTER_MS);
  #restoreTried = false;
  #inconsistentSince: number | undefined;

  constructor(o: SlotRecoveryOptions) {
    const { slot, ctx, replay, stream } = o;
    this.#replays = replay === undefined ? undefined : new ReplayRequests(replay, slot, ctx.hooks, o.log, o.wake);
    this.#stream = stream;
    this.#hooks = ctx.hooks;
    this.#clock = ctx.clock;
    this.#opts = o.opts;
    this.#answerSlot = {
      cursor: () => this.#cursor,
      accept: (b) => stream.accept(b, 'replay'),
      lost: () => stream.reset('replay_incomplete'),
      stale: (seq) => this.#hooks.onStale?.(slot, seq),
      decodeError: (e) => stream.writer.decodeError(e, undefined),
      farBound: () => {
        const cursor = this.#cursor;
        const high = stream.judge.liveHigh;
        const known = high !== null && (cursor === null || high > cursor) ? high : cursor;
        return known === null ? undefined : known + BigInt(o.opts.maxSeqJump);
      },
      garbage: (b) => stream.garbage({ ...b, gen: 0 }, 'replayed sequence number implausibly far ahead'),
    };
  }

  /** True with a replay endpoint: a gap is then replayed rather than cleared. */
  get canReplay(): boolean {
    return this.#replays !== undefined;
  }

  get inflight(): KvReplayRequest | undefined {
    return this.#replays?.inflight;
  }

  /** The settled answer being applied, if any. */
  get reply(): ReplyInProgress | undefined {
    return this.#replays?.reply;
  }

  /** Requests sent so far (a live item's `gen`). */
  get sent(): number {
    return this.#replays?.sent ?? 0;
  }

  /** Sends a replay request (with a replay endpoint); an equal need waits for the one in flight, a newer epoch's aborts it. */
  request(from: bigint, purpose: ReplayPurpose): void {
    this.#replays?.send(from, purpose);
  }

  /** A first batch (no cursor yet) waits while the slot restores from the engine's buffer, or before it tried once. */
  holdsFirstBatch(seq: bigint): boolean {
    return this.inflight !== undefined || (this.#replays !== undefined && !this.#restoreTried && seq > 0n);
  }

  /** Asks for the engine's whole buffer, unless a request is in flight (it restores the slot already). */
  restoreOnce(): void {
    if (this.inflight !== undefined) return;
    this.#restoreTried = true;
    this.request(0n, 'restore');
  }

  /** Restores the slot from the engine's whole buffer (with a replay endpoint). */
  restore(): void {
    this.#restoreTried = true;
    this.request(0n, 'restore');
  }

  /** A publisher restarted: its first batch may restore the slot again. */
  restarted(): void {
    this.#restoreTried = false;
  }

  /** The next batch is applied as a first batch, without another restore attempt. */
  startFresh(): void {
    this.#stream.judge.reset();
    this.#restoreTried = true;
  }

  /** Aborts the replay in flight (its answer is then ignored) and drops a settled one. */
  newEpoch(): void {
    this.#replays?.newEpoch();
  }

  /** Applies the next batch of a settled answer (finishing it at its end); false when none waits. */
  step(): boolean {
    const rp = this.#replays?.reply;
    if (rp === undefined) return false;
    const failed = rp.reply === undefined;
    if (!failed && stepAnswer(rp, this.#answerSlot) === 'more') return true;
    this.#replays!.finish();
    if (failed || (rp.garbage > 0 && this.#gapOpen())) this.#failed(rp);
    else this.#done(rp);
    return true;
  }

  /**
   * Whether the batches in front of the parked ones are still missing. An answer that dropped garbage and
   * left them missing proves nothing about them: it is a failed replay (taken as an honest answer, it would
   * prove the parked batches never sent, and while the endpoint kept lying the slot would drop every genuine
   * batch behind each gap, its cursor frozen).
   */
  #gapOpen(): boolean {
    const head = this.#stream.parked.head;
    const last = this.#cursor;
    return head !== undefined && (last === null || head.seq > last + 1n);
  }

  /** The slot is waiting on restart evidence or an unfilled gap: the bound runs from the first such moment. */
  inconsistent(): void {
    this.#inconsistentSince ??= this.#clock.now();
  }

  /** In-order progress or a fresh start: the bound stops. */
  consistent(): void {
    this.#inconsistentSince = undefined;
  }

  /** How long the slot has been inconsistent, once past `inconsistentAfterMs` and with no replay in flight. */
  overdueMs(): number | undefined {
    const since = this.#inconsistentSince;
    if (since === undefined || this.inflight !== undefined) return undefined;
    const forMs = this.#clock.now() - since;
    return forMs < this.#opts.inconsistentAfterMs ? undefined : forMs;
  }

  /** A frame was dropped without being placed in the sequence. */
  unplaced(): void {
    this.#catchUp.note(this.#clock.now());
  }

  /**
   * The slot's socket connected to its publisher again after losing it: what the engine published meanwhile
   * never arrived (a PUB drops what it has no peer for), and only a later batch would show the hole. An engine
   * that goes idle sends none, and the slot would lack those stores and removals until it did: a catch-up
   * replay asks for everything after the cursor once the stream is idle (`maybeCatchUp`).
   */
  reconnected(): void {
    this.unplaced();
  }

  /** Once a drain is over: the replay that a parked gap reordering did not fill, or a full queue's drops, need. */
  askAfterDrain(idleNow: boolean): void {
    const { writer, parked, queue } = this.#stream;
    if (this.#replays === undefined) return;
    const from = replayNeed(this.#cursor, parked, queue.dropped, idleNow, this.#opts.reorderWindow);
    const asking = this.inflight !== undefined || this.reply !== undefined || writer.busy;
    if (from !== undefined && !asking) this.request(from, 'gap');
  }

  /**
   * Frames were dropped unplaced (garbage, undecodable, no room to park): whatever the flood hides,
   * a PUB or SUB at its high-water mark drops batches without a trace, and an engine that then goes
   * idle would leave the hole unseen. Once idle and due, ask the engine for everything after the cursor.
   */
  maybeCatchUp(): void {
    const r = this.#replays;
    if (r === undefined || r.inflight !== undefined || r.reply !== undefined) return;
    const { writer, queue, parked } = this.#stream;
    if (writer.busy || queue.length > 0 || parked.length > 0 || !this.#catchUp.take(this.#clock.now())) return;
    const last = this.#cursor;
    if (last === null) this.#restoreTried = true;
    this.request(last === null ? 0n : last + 1n, last === null ? 'restore' : 'catch_up');
  }

  get #cursor(): bigint | null {
    return this.#stream.judge.cursor.last;
  }

  #failed(rp: ReplyInProgress): void {
    if (this.#replays!.failed(rp)) {
      this.unplaced(); // a catch-up: asked again after the next interval
      return;
    }
    if (this.#cursor !== null) this.#stream.reset('replay_failed');
    this.startFresh();
  }

  /** What the answer proves about parked batches, dropped ones and the newest seq seen; then counted and logged. */
  #done(rp: ReplyInProgress): void {
    const { judge, queue, parked } = this.#stream;
    const newest = rp.newest;
    const known = newest ?? this.#cursor;
    const never = parked.removeNeverSent(
      rp.req.gen,
      newest,
      known === null ? undefined : known + BigInt(this.#opts.maxSeqJump),
    );
    for (const p of never) this.#stream.garbage(p, "sequence number beyond the publisher's newest");
    queue.forgetDropped(rp.req.gen);
    judge.lowerLiveHigh(newest, this.#cursor, parked.newest?.seq);
    this.#replays!.done(rp);
    if (parked.length === 0 && judge.evidence.length === 0) this.consistent();
  }
}
