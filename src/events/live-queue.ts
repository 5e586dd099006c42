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

/** Received messages in arrival order. */
export class LiveQueue extends FrontQueue {
  push(item: LiveItem): void {
    this.items.push(item);
  }

  /** Puts items back in front, in the given order. */
  unshift(items: readonly LiveItem[]): void {
    this.items.splice(this.start, 0, ...items);
  }
}

/**
 * Batches waiting for the ones in front of them, ascending by seq, one per
 * seq. Items nearly always arrive in order, so inserting is O(1) too.
 */
export class ParkedBatches extends FrontQueue {
  get newest(): LiveItem | undefined {
    return this.length > 0 ? this.items.at(-1) : undefined;
  }

  /** Inserts in seq order; false (nothing kept) when `max` are already parked. A duplicate seq is ignored. */
  add(item: LiveItem, max: number): boolean {
    if (this.length >= max) return false;
    let i = this.items.length;
    while (i > this.start && this.items[i - 1]!.seq > item.seq) i--;
    if (i > this.start && this.items[i - 1]!.seq === item.seq) return true;
    this.items.splice(i, 0, item);
    return true;
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
export function replayNeed(last: bigint | null, parked: ParkedBatches, dropped: { readonly high: bigint } | undefined,
  idleNow: boolean, reorderWindow: number): bigint | undefined {
  const head = parked.head;
  if (head !== undefined && last !== null && head.seq > last + 1n && (idleNow || parked.length > reorderWindow)) return last + 1n;
  if (idleNow && dropped !== undefined && (last === null || last < dropped.high)) return last === null ? 0n : last + 1n;
  return undefined;
}
