/**
 * The replay contract between a stream and its publisher's replay endpoint
 * (replay-client.ts over ZMQ, or an in-memory source in tests), and the
 * stream's record of its requests: at most one in flight, tagged with the
 * stream's epoch so an answer for an older state is ignored; and when a
 * catch-up is due.
 */
import type { WorkerRank } from '../common/index.js';
import type { SequencedPayload } from './decode.js';
import type { ThrottledLog } from './log.js';
import type { KvEventHooks } from './stats.js';
import type { KvEventDecodeError } from './types.js';

/** The result of asking a publisher's replay endpoint for batches. */
export interface GapReplayReply {
  /** Batches with seq >= the requested start, in publisher order. */
  readonly batches: readonly SequencedPayload[];
  /** Malformed reply messages (skipped). */
  readonly errors: readonly KvEventDecodeError[];
}

/** A publisher's replay endpoint. Must settle (resolve or reject) in bounded time, and soon after `signal` aborts. */
export interface GapReplaySource {
  replay(fromSeq: bigint, signal?: AbortSignal): Promise<GapReplayReply>;
}

/**
 * Why a replay was asked for:
 * - `gap`: batches known to be missing (a gap, dropped batches, a replica snapshot's catch-up);
 * - `restore`: the slot has no cursor and starts from the engine's buffer;
 * - `catch_up`: nothing is known to be missing, but the stream dropped frames it could not place
 *   (a flood), and a PUB or SUB at its high-water mark drops batches silently.
 */
export type ReplayPurpose = 'gap' | 'restore' | 'catch_up';

/** A replay request of this stream. */
export interface KvReplayRequest {
  readonly epoch: number;
  readonly from: bigint;
  readonly purpose: ReplayPurpose;
  /** Requests sent before and including this one: live items with a smaller `gen` arrived before it. */
  readonly gen: number;
  readonly abort: AbortController;
  promise: Promise<void>;
}

/** A settled reply, applied a batch per step. */
export interface ReplyInProgress {
  readonly req: KvReplayRequest;
  readonly reply: GapReplayReply | undefined;
  readonly err: unknown;
  next: number;
  applied: number;
  complete: boolean;
  /** Its batches dropped by the far-ahead rule (`AnswerSlot.farBound`). */
  garbage: number;
  /** The newest seq among its other batches, applied or stale: the publisher's newest as far as it shows. */
  newest: bigint | undefined;
}

/** What applying an answer's batches needs from its stream. */
export interface AnswerSlot {
  cursor(): bigint | null;
  /** Accepts a replayed batch at the cursor. */
  accept(batch: SequencedPayload): void;
  /** A replayed batch at or below the cursor was skipped. */
  stale(seq: bigint): void;
  /** The engine's buffer no longer reaches back to the cursor: the slot is cleared. */
  lost(): void;
  decodeError(error: KvEventDecodeError): void;
  /** The highest seq a replayed batch may have now (the far-ahead rule); undefined while the slot knows no seq. */
  farBound(): bigint | undefined;
  /** A replayed batch beyond `farBound` was dropped: counted and logged, it moves nothing. */
  garbage(batch: SequencedPayload): void;
}

/**
 * Applies an answer's next batch (its malformed messages reported first); 'end' once none is
 * left. The engine's buffer is a window: batches missing before the first replayed one are only a
 * loss if the slot already had state (an initial restore starts from whatever the window holds).
 */
export function stepAnswer(rp: ReplyInProgress, slot: AnswerSlot): 'more' | 'end' {
  if (rp.next === 0) for (const e of rp.reply!.errors) slot.decodeError(e);
  const b = rp.reply!.batches[rp.next++];
  if (b === undefined) return 'end';
  // The far-ahead rule holds for an answer as for live frames: a publisher's buffer is its latest batches,
  // numbered one by one, so a seq beyond every seq the slot knows by more than the jump allowed is none of
  // them (a corrupt reply, another engine's buffer). Accepted, it would leave the cursor above every batch
  // the engine will ever send: each judged stale, the slot deaf until the engine restarted.
  const bound = slot.farBound();
  if (bound !== undefined && b.seq > bound) {
    rp.garbage++;
    slot.garbage(b);
    return 'more';
  }
  if (rp.newest === undefined || b.seq > rp.newest) rp.newest = b.seq;
  const last = slot.cursor();
  if (last !== null && b.seq <= last) {
    slot.stale(b.seq);
    return 'more';
  }
  if (last !== null && b.seq !== last + 1n) {
    rp.complete = false;
    slot.lost();
  }
  slot.accept(b);
  rp.applied++;
  return 'more';
}

/**
 * One stream's replay requests: the one in flight, the settled answer waiting
 * to be applied, the epoch (bumped on restart, resync and close), and each
 * request and outcome counted (the slot's hooks) and logged (the stream's log).
 */
export class ReplayRequests {
  readonly #source: GapReplaySource;
  readonly #slot: WorkerRank;
  readonly #hooks: KvEventHooks;
  readonly #log: ThrottledLog;
  readonly #onSettled: () => void;
  #inflight: KvReplayRequest | undefined;
  #reply: ReplyInProgress | undefined;
  #sent = 0;
  #epoch = 0;

  /** @param onSettled called when a request settles (the stream wakes to apply or drop the answer). */
  constructor(
    source: GapReplaySource,
    slot: WorkerRank,
    hooks: KvEventHooks,
    log: ThrottledLog,
    onSettled: () => void,
  ) {
    this.#source = source;
    this.#slot = slot;
    this.#hooks = hooks;
    this.#log = log;
    this.#onSettled = onSettled;
  }

  get inflight(): KvReplayRequest | undefined {
    return this.#inflight;
  }

  /** The settled answer of this epoch, until `finish`ed. */
  get reply(): ReplyInProgress | undefined {
    return this.#reply;
  }

  /** Requests sent so far (a live item's `gen`). */
  get sent(): number {
    return this.#sent;
  }

  /** Sends a request, unless one of this epoch is in flight (it will cover the need); one of an older epoch is aborted. */
  send(from: bigint, purpose: ReplayPurpose): void {
    const prev = this.#inflight;
    if (prev !== undefined) {
      if (prev.epoch === this.#epoch) return;
      prev.abort.abort();
    }
    const req: KvReplayRequest = {
      epoch: this.#epoch,
      from,
      purpose,
      gen: ++this.#sent,
      abort: new AbortController(),
      promise: Promise.resolve(),
    };
    this.#inflight = req;
    this.#hooks.onReplayRequested?.(this.#slot, from);
    req.promise = this.#source.replay(from, req.abort.signal).then(
      (reply) => this.#settled(req, reply, undefined),
      (err: unknown) => this.#settled(req, undefined, err),
    );
  }

  /**
   * Counts and logs an answer that never came; true when the slot is kept: a catch-up (nothing was
   * known to be missing, so it is asked again later). Any other failure clears the slot.
   */
  failed(rp: ReplyInProgress): boolean {
    const err = rp.reply !== undefined ? `${rp.garbage} replayed batch(es) numbered past the far-ahead bound` : rp.err;
    const fields = { from: String(rp.req.from), err: err instanceof Error ? err.message : String(err) };
    this.#hooks.onReplay?.(this.#slot, 'failed', 0);
    if (rp.req.purpose === 'catch_up') {
      this.#log.warn('catch_up_failed', fields, 'KV event catch-up replay failed: slot kept, asking again later');
      return true;
    }
    this.#log.warn(
      'replay_failed',
      fields,
      'KV event replay failed: clearing the slot and continuing from live events',
    );
    return false;
  }

  /** Counts and logs an answer applied to its end. */
  done(rp: ReplyInProgress): void {
    this.#hooks.onReplay?.(this.#slot, rp.complete ? 'recovered' : 'incomplete', rp.applied);
    const from = String(rp.req.from);
    if (!rp.complete) {
      this.#log.warn(
        'replay_incomplete',
        { from },
        'KV event replay buffer no longer holds the missing batches: slot cleared',
      );
    } else if (rp.req.purpose === 'catch_up' && rp.applied > 0) {
      this.#log.warn(
        'caught_up',
        { from, batches: rp.applied },
        "KV event batches missed while frames were dropped were recovered from the engine's replay buffer",
      );
    }
  }

  /** The answer was applied (or dropped). */
  finish(): void {
    this.#reply = undefined;
  }

  /** A new epoch: the request in flight is aborted and its answer, like one waiting, ignored. */
  newEpoch(): void {
    this.#epoch++;
    this.#inflight?.abort.abort();
    this.#inflight = undefined;
    this.#reply = undefined;
  }

  #settled(req: KvReplayRequest, reply: GapReplayReply | undefined, err: unknown): void {
    if (this.#inflight === req) this.#inflight = undefined;
    if (req.epoch === this.#epoch)
      this.#reply = { req, reply, err, next: 0, applied: 0, complete: true, garbage: 0, newest: undefined };
    this.#onSettled();
  }
}

/**
 * When a `catch_up` replay is due. Frames dropped unplaced (garbage, undecodable, no room to park)
 * are noted; a catch-up is due `afterMs` after the first of them and after the previous catch-up:
 * at most one per `afterMs` however long a flood lasts, and one after it ends.
 */
export class CatchUpTimer {
  readonly #afterMs: number;
  #since: number | undefined;
  #last = Number.NEGATIVE_INFINITY;

  constructor(afterMs: number) {
    this.#afterMs = afterMs;
  }

  /** A frame was dropped unplaced at `now`. */
  note(now: number): void {
    this.#since ??= now;
  }

  /** True when a catch-up is due at `now`; the timer then starts over. */
  take(now: number): boolean {
    const since = this.#since;
    if (since === undefined || now - since < this.#afterMs || now - this.#last < this.#afterMs) return false;
    this.#since = undefined;
    this.#last = now;
    return true;
  }
}
