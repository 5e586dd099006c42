/**
 * Sequence-number judgement for one publisher: the cursor of applied batches,
 * what the live stream has shown (high-water mark and the recently seen
 * seqs), and the evidence that the publisher restarted.
 *
 * Why evidence instead of "seq went backwards": a PUB socket never reorders,
 * but a network path, a proxy or a faulty publisher can, and a swapped pair
 * (n+1 before n) must not look like a restart. What survives reordering:
 * - a duplicate: a seq already seen live again (a PUB never duplicates);
 * - a seq far below the live high-water mark (further than any reordering
 *   the stream is allowed, `reorderWindow`);
 * and a restart is declared only when such evidence repeats
 * (`restartConfirmations` restart-like batches close to each other), or at
 * once for seq 0 seen again, the engines' own reset marker (vLLM and SGLang
 * count from 0 in every process, and send nothing else on restart).
 *
 * The far-ahead rule. vLLM's and SGLang's publishers count up by one per
 * batch, so a seq more than `maxSeqJump` ahead of the cursor is not a gap
 * (a "gap" of 2^60 is no lost batches): it is garbage, counted and dropped
 * without moving any position or starting any timer. Were it let in, every
 * genuine batch after it would look old, and a random-frame flood would keep
 * the stream inconsistent until it was reset. One exception, on evidence no
 * random frame produces: `restartConfirmations` (at least two) far-ahead batches with
 * distinct seqs within `reorderWindow` of each other are a publisher that
 * moved its sequence to a new base (TensorRT-LLM counts from time_ns, so a
 * restarted one lands far ahead), handled as a restart.
 */
import type { KvEventBatch } from './types.js';

/** One queued live message, with the replay request count when it arrived (see KvEventStream). */
export interface LiveItem {
  readonly seq: bigint;
  readonly payload: Uint8Array;
  /** Replay requests sent before this message was received. */
  readonly gen: number;
  /** The payload decoded, once the stream had to read it before judging the seq. */
  readonly batch?: KvEventBatch | undefined;
}

const NO_EVIDENCE: readonly LiveItem[] = Object.freeze([]);

/** Far-ahead batches remembered at least, as candidates for a re-based publisher (random frames never land close together). */
const FAR_CANDIDATES = 16;

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

/** How a live seq relates to the stream, beyond the cursor's view. */
export type LiveVerdict = 'initial' | 'contiguous' | 'gap' | 'garbage' | 'stale' | 'restart_evidence' | 'restart';

export interface SequenceJudgeOptions {
  reorderWindow: number;
  maxSeqJump: number;
  restartConfirmations: number;
}

/**
 * Classifies live seqs against the cursor and the live history, and collects
 * restart evidence. Pure bookkeeping: the stream acts on the verdicts.
 */
export class SequenceJudge {
  readonly cursor = new SequenceCursor();
  readonly #window: bigint;
  readonly #maxJump: bigint;
  readonly #confirmations: number;
  /** Highest plausible seq seen live since the last reset. */
  #liveHigh: bigint | null = null;
  /** The last 2 x reorderWindow plausible live seqs (a ring), for duplicate detection. */
  readonly #seen: bigint[] = [];
  #seenAt = 0;
  #evidence: LiveItem[] = [];
  /** The last few far-ahead batches (a ring): candidates for a re-based publisher. */
  #far: LiveItem[] = [];
  #farAt = 0;
  /** Far-ahead batches close together that prove a re-based publisher: `restartConfirmations`, at least two. */
  readonly #rebaseAfter: number;
  readonly #farCap: number;

  constructor(opts: SequenceJudgeOptions) {
    this.#window = BigInt(opts.reorderWindow);
    this.#maxJump = BigInt(opts.maxSeqJump);
    this.#confirmations = opts.restartConfirmations;
    this.#rebaseAfter = Math.max(2, opts.restartConfirmations);
    this.#farCap = Math.max(FAR_CANDIDATES, 2 * this.#rebaseAfter);
  }

  get liveHigh(): bigint | null {
    return this.#liveHigh;
  }

  /** Restart evidence held back (not applied) until it is confirmed or refuted. */
  get evidence(): readonly LiveItem[] {
    return this.#evidence;
  }

  /**
   * Judges a live message (without applying anything). `restart` means the
   * evidence is now conclusive: `takeEvidence()` returns the new publisher's
   * batches held so far, this one included.
   */
  judge(item: LiveItem): LiveVerdict {
    const seq = item.seq;
    const last = this.cursor.last;
    if (last !== null && seq > last && seq - last > this.#maxJump) return this.#rebased(item) ? 'restart' : 'garbage';
    const restartLike = this.#restartLike(seq);
    if (!restartLike) this.#noteSeen(seq);
    if (last === null) return 'initial';
    if (seq === last + 1n && !restartLike) return 'contiguous';
    if (!restartLike) return seq > last ? 'gap' : 'stale';
    if (seq === 0n) {
      // The new publisher's first batch; evidence already held from it (reordered ahead of it) comes along.
      this.#evidence = [...this.#evidence.filter((e) => e.seq < this.#window), item];
      return 'restart';
    }
    const prev = this.#evidence.at(-1);
    const fits =
      prev !== undefined && !this.#evidence.some((e) => e.seq === seq) && absDiff(prev.seq, seq) <= this.#window;
    this.#evidence = fits ? [...this.#evidence, item] : [item];
    return this.#evidence.length >= this.#confirmations ? 'restart' : 'restart_evidence';
  }

  /** A batch of the current publisher was applied in order: held evidence was not a restart. */
  refuteEvidence(): readonly LiveItem[] {
    const held = this.#evidence;
    // Nearly every batch refutes nothing: no new array for it.
    if (held.length === 0) return NO_EVIDENCE;
    this.#evidence = [];
    return held;
  }

  /** The evidence of a confirmed restart, oldest seq first. */
  takeEvidence(): LiveItem[] {
    const held = this.#evidence;
    this.#evidence = [];
    return held.sort((a, b) => (a.seq < b.seq ? -1 : a.seq > b.seq ? 1 : 0));
  }

  /**
   * A replay showed the publisher's newest seq: live seqs above the highest
   * of `bounds` (its newest, the cursor, the newest genuine seq still parked)
   * were garbage, and must not make later genuine batches look old.
   */
  lowerLiveHigh(...bounds: (bigint | null | undefined)[]): void {
    let bound: bigint | undefined;
    for (const b of bounds) if (b !== null && b !== undefined && (bound === undefined || b > bound)) bound = b;
    if (bound !== undefined && this.#liveHigh !== null && this.#liveHigh > bound) this.#liveHigh = bound;
  }

  /**
   * Whether a live seq's verdict could start the slot (no cursor yet) or be restart evidence (at or
   * below the newest seen): such a batch must be readable before it is judged.
   */
  decisive(seq: bigint): boolean {
    return this.cursor.last === null || (this.#liveHigh !== null && seq <= this.#liveHigh);
  }

  /** Starts at `seq` as if it had been applied and seen live (a replica snapshot's cursor). */
  seed(seq: bigint): void {
    this.reset();
    this.cursor.advance(seq);
    this.#noteSeen(seq);
  }

  /** A new publisher (or a resync): forget the cursor and the live history. */
  reset(): void {
    this.cursor.reset();
    this.#liveHigh = null;
    this.#seen.length = 0;
    this.#seenAt = 0;
    this.#evidence = [];
    this.#far = [];
    this.#farAt = 0;
  }

  /**
   * Whether a far-ahead batch, with those seen lately, shows a publisher that moved to a new base
   * (then they become the restart's evidence); otherwise it is kept as a candidate, in a ring.
   */
  #rebased(item: LiveItem): boolean {
    const close = new Map<bigint, LiveItem>();
    for (const e of this.#far) if (e.seq !== item.seq && absDiff(e.seq, item.seq) <= this.#window) close.set(e.seq, e);
    if (close.size + 1 >= this.#rebaseAfter) {
      this.#evidence = [...close.values(), item];
      this.#far = [];
      this.#farAt = 0;
      return true;
    }
    if (this.#far.length < this.#farCap) this.#far.push(item);
    else this.#far[this.#farAt] = item;
    this.#farAt = (this.#farAt + 1) % this.#farCap;
    return false;
  }

  #restartLike(seq: bigint): boolean {
    const high = this.#liveHigh;
    if (high === null || seq > high) return false;
    if (high - seq >= this.#window) return true;
    return this.#seen.includes(seq);
  }

  #noteSeen(seq: bigint): void {
    if (this.#liveHigh === null || seq > this.#liveHigh) this.#liveHigh = seq;
    const cap = Number(this.#window) * 2;
    if (this.#seen.length < cap) this.#seen.push(seq);
    else this.#seen[this.#seenAt] = seq;
    this.#seenAt = (this.#seenAt + 1) % cap;
  }
}

function absDiff(a: bigint, b: bigint): bigint {
  return a > b ? a - b : b - a;
}
