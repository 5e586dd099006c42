/**
 * The two holding areas of a stream's live batches: the bounded FIFO of
 * received, not yet judged messages, and the batches parked behind a gap, in
 * seq order. Both are bounded by the stream's options, and both leave from
 * the front through a moving head, so a long queue stays linear to drain.
 */
import type { LiveItem } from './sequence.js';

/** Items leaving from the front in O(1) (a moving head, compacted now and then). */
abstract class FrontQueue {
  protected items: LiveItem[] = [];
  protected start = 0;

  get length(): number {
    return this.items.length - this.start;
  }

  get head(): LiveItem | undefined {
    return this.items[this.start];
  }

  shift(): LiveItem | undefined {
    if (this.start >= this.items.length) return undefined;
    const item = this.items[this.start++]!;
    if (this.start > 1024 && this.start * 2 > this.items.length) {
      this.items = this.items.slice(this.start);
      this.start = 0;
    }
    return item;
  }

  clear(): void {
    this.items = [];
    this.start = 0;
  }
}

/**
 * Received messages in arrival order, at most `max`. What a full queue had to drop is remembered
 * (the newest seq and the replay count then) until a replay sent after it covers the hole.
 */
export class LiveQueue extends FrontQueue {
  readonly #max: number;
  #dropped: { readonly high: bigint; readonly gen: number } | undefined;

  constructor(max: number) {
    super();
    this.#max = max;
  }

  /** Batches dropped at a full queue since the last replay that could cover them. */
  get dropped(): { readonly high: bigint; readonly gen: number } | undefined {
    return this.#dropped;
  }

  /** Queues `item`; false (and remembered as dropped) when the queue is full. */
  offer(item: LiveItem): boolean {
    if (this.length < this.#max) {
      this.items.push(item);
      return true;
    }
    const prev = this.#dropped;
    this.#dropped = { high: prev !== undefined && prev.high > item.seq ? prev.high : item.seq, gen: item.gen };
    return false;
  }

  /** A replay answered: the request numbered `gen` (or none, undefined) covers what was dropped before it. */
  forgetDropped(gen?: number): void {
    if (this.#dropped !== undefined && (gen === undefined || gen > this.#dropped.gen)) this.#dropped = undefined;
  }

  /** Puts items back in front, in the given order. */
  unshift(items: readonly LiveItem[]): void {
    this.items.splice(this.start, 0, ...items);
  }
}

/**
 * Batches waiting for the ones in front of them, ascending by seq, one per
 * seq. Items nearly always arrive in order (appended in O(1)); one out of
 * order is placed by binary search, so a flood of random seqs parked while a
 * slot restores costs a search and a move each, not a walk of the list.
 */
export class ParkedBatches extends FrontQueue {
  get newest(): LiveItem | undefined {
    return this.length > 0 ? this.items.at(-1) : undefined;
  }

  /** Inserts in seq order; false (nothing kept) when `max` are already parked. A duplicate seq is ignored. */
  add(item: LiveItem, max: number): boolean {
    if (this.length >= max) return false;
    const items = this.items;
    if (this.length === 0 || items[items.length - 1]!.seq < item.seq) {
      items.push(item);
      return true;
    }
    // The first index whose seq is >= item.seq.
    let lo = this.start;
    let hi = items.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (items[mid]!.seq < item.seq) lo = mid + 1;
      else hi = mid;
    }
    if (items[lo]!.seq !== item.seq) items.splice(lo, 0, item);
    return true;
  }

  /**
   * What a replay's answer proves (its newest seq `newest`, undefined when it held nothing at or
   * after the start asked): items parked before the request (`gen` below the request's) and beyond
   * `newest` were never sent; items beyond `farBound` could never be sent (the far-ahead rule, for
   * batches parked while the slot had no cursor to judge them by). Removes and returns them.
   */
  removeNeverSent(gen: number, newest: bigint | undefined, farBound: bigint | undefined): LiveItem[] {
    return this.remove(
      (p) => (p.gen < gen && (newest === undefined || p.seq > newest)) || (farBound !== undefined && p.seq > farBound),
    );
  }

  /** Removes and returns the items `drop` selects. */
  remove(drop: (item: LiveItem) => boolean): LiveItem[] {
    const live = this.items.slice(this.start);
    const gone = live.filter(drop);
    if (gone.length > 0) {
      this.items = live.filter((p) => !drop(p));
      this.start = 0;
    }
    return gone;
  }
}

/**
 * Where a stream with a replay endpoint must replay from, if anywhere: in front of a parked gap
 * that reordering did not fill (once idle, or with more parked than the reorder window), or
 * from the batches a full queue dropped.
 */
export function replayNeed(
  last: bigint | null,
  parked: ParkedBatches,
  dropped: { readonly high: bigint } | undefined,
  idleNow: boolean,
  reorderWindow: number,
): bigint | undefined {
  const head = parked.head;
  if (head !== undefined && last !== null && head.seq > last + 1n && (idleNow || parked.length > reorderWindow))
    return last + 1n;
  if (idleNow && dropped !== undefined && (last === null || last < dropped.high)) return last === null ? 0n : last + 1n;
  return undefined;
}
