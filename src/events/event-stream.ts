/**
 * The ordered KV-event stream of one publisher, i.e. one (worker, dp_rank):
 * sequence cursor, gap detection, replay and restart handling, in front of
 * the applier. No sockets: messages are pushed in by the subscriber, and
 * replay goes through an injected `ReplaySource`, so every path is testable
 * without ZMQ.
 *
 * Two sequence positions are tracked:
 * - `lastLive`: the newest seq seen on the live stream. A PUB socket never
 *   reorders or duplicates, so a live seq <= lastLive means the publisher
 *   restarted (vLLM/SGLang count from 0 per process): the slot is cleared
 *   and rebuilt from what follows.
 * - the cursor: the newest seq applied. A live seq of cursor+1 is applied;
 *   a larger one is a gap (PUB drops silently at its high-water mark).
 *
 * On a gap, the batch is parked with every later live batch, and the engine's
 * replay endpoint is asked for everything from cursor+1. Replayed batches at
 * or below the cursor are stale and skipped; the rest are applied in order,
 * then the parked live batches. When the replay fails, or the engine's buffer
 * no longer holds the missing batches, the slot is cleared (missing removals
 * would otherwise leave blocks the engine evicted) and ingestion restarts
 * from the parked batches. With no replay endpoint a gap clears the slot at
 * once.
 *
 * The first batch of a publisher with seq > 0 (the router joined late, or a
 * slow-joining subscription missed the first messages) triggers one replay
 * from 0 to pick up what the engine's buffer still holds.
 *
 *   live msg ──► restart? ──► recovering? ──park──► pending
 *                                 │no
 *                                 ▼
 *                cursor: initial / contiguous ─► apply
 *                        stale ─► skip
 *                        gap ─► park + replay(cursor+1) ─► apply replayed ─► drain pending
 */
import type { WorkerRank } from '../common/index.js';
import { decodeKvEventBatch, parseEventFrames, type SequencedPayload } from './decode.js';
import type { ApplyStatus, KvEventApplier } from './applier.js';
import type { EventLiveness } from './liveness.js';
import { ThrottledLog } from './log.js';
import { fillOptions, kDefaultStreamOptions, type IngestContext, type KvEventStreamOptions } from './options.js';
import type { BatchOrigin, KvEventHooks, ResetReason } from './stats.js';
import type { KvCacheEventType, KvEventDecodeError } from './types.js';

/** The result of asking a publisher's replay endpoint for batches. */
export interface ReplayReply {
  /** Batches with seq >= the requested start, in publisher order. */
  readonly batches: readonly SequencedPayload[];
  /** Malformed reply messages (skipped). */
  readonly errors: readonly KvEventDecodeError[];
}

/** A publisher's replay endpoint. Must settle (resolve or reject) in bounded time. */
export interface ReplaySource {
  replay(fromSeq: bigint): Promise<ReplayReply>;
}

type CursorObservation = 'initial' | 'contiguous' | 'stale' | 'gap';

/** The cursor of applied sequence numbers (as Dynamo's: Initial | Live(last)). */
export class SequenceCursor {
  #last: bigint | null = null;

  get last(): bigint | null {
    return this.#last;
  }

  observe(seq: bigint): CursorObservation {
    if (this.#last === null) return 'initial';
    if (seq <= this.#last) return 'stale';
    return seq === this.#last + 1n ? 'contiguous' : 'gap';
  }

  advance(seq: bigint): void {
    this.#last = seq;
  }

  reset(): void {
    this.#last = null;
  }
}

export class KvEventStream {
  readonly workerId: number;
  readonly dpRank: number;
  readonly #applier: KvEventApplier;
  readonly #replay: ReplaySource | undefined;
  readonly #hooks: KvEventHooks;
  readonly #liveness: EventLiveness | undefined;
  readonly #log: ThrottledLog;
  readonly #maxPending: number;
  readonly #cursor = new SequenceCursor();
  #lastLive: bigint | null = null;
  #pending: SequencedPayload[] = [];
  #recovering = false;
  #inflight: Promise<void> | undefined;
  /** Bumped on restart and close, so a replay answer for an older publisher is ignored. */
  #epoch = 0;
  #restoreTried = false;
  #closed = false;
  readonly #onStatus: ((type: KvCacheEventType, status: ApplyStatus) => void) | undefined;

  /**
   * @param slot the (worker, dp rank) whose publisher this stream follows.
   * @param ctx the manager's shared ingestion context.
   * @param replay the engine's replay endpoint; without it a gap clears the slot.
   */
  constructor(slot: WorkerRank, ctx: IngestContext, replay?: ReplaySource, options?: KvEventStreamOptions) {
    const opts = fillOptions(kDefaultStreamOptions, options);
    this.workerId = slot.workerId;
    this.dpRank = slot.dpRank;
    this.#applier = ctx.applier;
    this.#replay = replay;
    this.#hooks = ctx.hooks;
    this.#liveness = ctx.liveness;
    this.#log = new ThrottledLog(ctx.log, ctx.clock, opts.logIntervalMs);
    this.#maxPending = opts.maxPendingBatches;
    const onApplied = this.#hooks.onApplied?.bind(this.#hooks);
    this.#onStatus = onApplied === undefined ? undefined : (type, status) => onApplied(this.workerId, this.dpRank, type, status);
  }

  /** Newest applied sequence number, null before the first. */
  get cursor(): bigint | null {
    return this.#cursor.last;
  }

  /** True while a replay is in flight (live batches are parked). */
  get recovering(): boolean {
    return this.#recovering;
  }

  /** Live batches parked behind the replay in flight. */
  get pendingCount(): number {
    return this.#pending.length;
  }

  /** Resolves once no replay is in flight (including follow-up replays). */
  async whenSettled(): Promise<void> {
    while (this.#recovering && this.#inflight !== undefined) await this.#inflight;
  }

  /** A raw live message `[topic, seq, payload]`. */
  onFrames(frames: readonly Uint8Array[]): void {
    if (this.#closed) return;
    const r = parseEventFrames(frames);
    if (!r.ok) {
      this.#decodeError(r.error, undefined);
      return;
    }
    this.onMessage(r.value.seq, r.value.payload);
  }

  /** A live batch. */
  onMessage(seq: bigint, payload: Uint8Array): void {
    if (this.#closed) return;
    this.#hooks.onBatch?.(this.workerId, this.dpRank, 'live');
    if (this.#lastLive !== null && seq <= this.#lastLive) this.#restart(seq);
    this.#lastLive = seq;
    if (this.#recovering) {
      if (this.#pending.length >= this.#maxPending) {
        this.#hooks.onPendingOverflow?.(this.workerId, this.dpRank, seq);
        return;
      }
      this.#pending.push({ seq, payload });
      return;
    }
    this.#accept(seq, payload);
  }

  /** Stops processing; a replay in flight is ignored when it settles. */
  close(): void {
    this.#closed = true;
    this.#epoch++;
    this.#pending = [];
  }

  #accept(seq: bigint, payload: Uint8Array): void {
    const obs = this.#cursor.observe(seq);
    if (obs === 'contiguous') {
      this.#apply(seq, payload, 'live');
      return;
    }
    if (obs === 'initial') {
      if (this.#replay !== undefined && !this.#restoreTried && seq > 0n) {
        this.#restoreTried = true;
        this.#pending.unshift({ seq, payload });
        this.#recover(0n);
        return;
      }
      this.#apply(seq, payload, 'live');
      return;
    }
    if (obs === 'stale') {
      this.#hooks.onStale?.(this.workerId, this.dpRank, seq);
      return;
    }
    const expected = this.#cursor.last! + 1n;
    this.#hooks.onGap?.(this.workerId, this.dpRank, expected, seq);
    if (this.#replay !== undefined) {
      this.#pending.unshift({ seq, payload });
      this.#recover(expected);
      return;
    }
    this.#log.warn('gap', this.#fields({ expected: String(expected), got: String(seq) }), 'KV event gap and no replay endpoint: clearing the slot');
    this.#reset('gap_without_replay');
    this.#apply(seq, payload, 'live');
  }

  #apply(seq: bigint, payload: Uint8Array, origin: BatchOrigin): void {
    this.#cursor.advance(seq);
    const r = decodeKvEventBatch(payload);
    if (!r.ok) {
      this.#decodeError(r.error, seq);
      return;
    }
    const batch = r.batch;
    for (const e of batch.errors) this.#decodeError(e, seq);
    if (batch.dpRank !== null && batch.dpRank !== this.dpRank) {
      this.#decodeError({ kind: 'dp_rank_mismatch', message: `batch is for dp rank ${batch.dpRank}, subscription is for rank ${this.dpRank}` }, seq);
      return;
    }
    const applied = this.#applier.applyBatch(this.workerId, this.dpRank, batch, this.#onStatus);
    if (applied > 0 || (batch.events.length === 0 && batch.errors.length === 0)) this.#liveness?.noteEvent(this.workerId, this.dpRank);
    if (origin === 'replay') this.#hooks.onBatch?.(this.workerId, this.dpRank, 'replay');
  }

  #recover(fromSeq: bigint): void {
    this.#recovering = true;
    const epoch = this.#epoch;
    this.#inflight = this.#replay!.replay(fromSeq).then(
      (res) => this.#finishReplay(epoch, fromSeq, res, undefined),
      (err: unknown) => this.#finishReplay(epoch, fromSeq, undefined, err),
    ).catch((err: unknown) => {
      // A bug on the apply path must not become an unhandled rejection, nor
      // leave the slot half-recovered: start over from the next live batch.
      if (epoch !== this.#epoch || this.#closed) return;
      this.#log.warn('internal', this.#fields({ err: err instanceof Error ? err.message : String(err) }), 'KV event replay handling failed');
      this.#recovering = false;
      this.#pending = [];
      this.#reset('replay_failed');
      this.#startFresh();
    });
  }

  #finishReplay(epoch: number, fromSeq: bigint, res: ReplayReply | undefined, err: unknown): void {
    if (epoch !== this.#epoch || this.#closed) return;
    this.#recovering = false;
    if (res === undefined) {
      this.#hooks.onReplay?.(this.workerId, this.dpRank, 'failed', 0);
      this.#log.warn('replay_failed', this.#fields({ from: String(fromSeq), err: err instanceof Error ? err.message : String(err) }),
        'KV event replay failed: clearing the slot and continuing from live events');
      if (this.#cursor.last !== null) this.#reset('replay_failed');
      this.#startFresh();
      this.#drain();
      return;
    }
    for (const e of res.errors) this.#decodeError(e, undefined);
    let complete = true;
    let applied = 0;
    for (const b of res.batches) {
      const last = this.#cursor.last;
      if (last !== null && b.seq <= last) {
        this.#hooks.onStale?.(this.workerId, this.dpRank, b.seq);
        continue;
      }
      // The engine's buffer is a window: missing batches before the first
      // replayed one are only a loss if we already had state (an initial
      // restore starts from whatever the window holds).
      if (last !== null && b.seq !== last + 1n) {
        complete = false;
        this.#reset('replay_incomplete');
      }
      this.#apply(b.seq, b.payload, 'replay');
      applied++;
    }
    const head = this.#pending[0];
    const last = this.#cursor.last;
    if (head !== undefined && last !== null && head.seq > last + 1n) {
      // The replay did not reach the batch that triggered it.
      complete = false;
      this.#reset('replay_incomplete');
      this.#startFresh();
    }
    this.#hooks.onReplay?.(this.workerId, this.dpRank, complete ? 'recovered' : 'incomplete', applied);
    if (!complete) {
      this.#log.warn('replay_incomplete', this.#fields({ from: String(fromSeq) }), 'KV event replay buffer no longer holds the missing batches: slot cleared');
    }
    this.#drain();
  }

  /** The next parked batch is applied as a first batch, without another restore attempt. */
  #startFresh(): void {
    this.#cursor.reset();
    this.#restoreTried = true;
  }

  #drain(): void {
    while (!this.#recovering && !this.#closed && this.#pending.length > 0) {
      const b = this.#pending.shift()!;
      this.#accept(b.seq, b.payload);
    }
  }

  #restart(seq: bigint): void {
    this.#log.warn('restart', this.#fields({ lastSeq: String(this.#lastLive), seq: String(seq) }), 'KV event publisher restarted: clearing the slot');
    this.#reset('restart');
    this.#cursor.reset();
    this.#pending = [];
    this.#recovering = false;
    this.#epoch++;
    this.#restoreTried = false;
  }

  #reset(reason: ResetReason): void {
    const blocks = this.#applier.clearSlot(this.workerId, this.dpRank);
    this.#hooks.onReset?.(this.workerId, this.dpRank, reason, blocks);
  }

  #decodeError(error: KvEventDecodeError, seq: bigint | undefined): void {
    this.#hooks.onDecodeError?.({ ...error, workerId: this.workerId, dpRank: this.dpRank, seq });
    this.#log.warn(`decode:${error.kind}`, this.#fields({ kind: error.kind, seq: seq === undefined ? undefined : String(seq), eventIndex: error.eventIndex }),
      `KV event dropped: ${error.message}`);
  }

  #fields(extra: Record<string, unknown>): Record<string, unknown> {
    return { workerId: this.workerId, dpRank: this.dpRank, ...extra };
  }
}
