/**
 * The two holding areas of a stream's live batches: the bounded FIFO of
 * received, not yet judged messages, and the batches parked behind a gap, in
 * seq order. Both are bounded by the stream's options; neither allocates per
 * message beyond the item itself.
 */
import type { LiveItem } from './sequence.js';

/** A FIFO with an O(1) shift (a moving head, compacted now and then). */
export class LiveQueue {
  #items: LiveItem[] = [];
  #head = 0;

  get length(): number {
    return this.#items.length - this.#head;
  }

  push(item: LiveItem): void {
    this.#items.push(item);
  }

  shift(): LiveItem | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const item = this.#items[this.#head++]!;
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return item;
  }

  /** Puts items back in front, in the given order. */
  unshift(items: readonly LiveItem[]): void {
    this.#items.splice(this.#head, 0, ...items);
  }

  clear(): void {
    this.#items = [];
    this.#head = 0;
  }
}

/** Batches waiting for the ones in front of them, ascending by seq, one per seq. */
export class ParkedBatches {
  #items: LiveItem[] = [];

  get length(): number {
    return this.#items.length;
  }

  get head(): LiveItem | undefined {
    return this.#items[0];
  }

  get newest(): LiveItem | undefined {
    return this.#items.at(-1);
  }

  /** Inserts in seq order; false (nothing kept) when `max` are already parked. A duplicate seq is ignored. */
  add(item: LiveItem, max: number): boolean {
    if (this.#items.length >= max) return false;
    let i = this.#items.length;
    while (i > 0 && this.#items[i - 1]!.seq > item.seq) i--;
    if (this.#items[i - 1]?.seq !== item.seq) this.#items.splice(i, 0, item);
    return true;
  }

  shift(): LiveItem | undefined {
    return this.#items.shift();
  }

  /** Removes and returns the items `drop` selects. */
  remove(drop: (item: LiveItem) => boolean): LiveItem[] {
    const gone = this.#items.filter(drop);
    if (gone.length > 0) this.#items = this.#items.filter((p) => !drop(p));
    return gone;
  }

  clear(): void {
    this.#items = [];
  }
}
