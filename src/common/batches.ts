/**
 * Async sequences that can also be read a batch at a time: every item that is
 * ready now, in one step. A stream of SSE events passes through several
 * layers (the engine's stream, the leg's guard, the migrating stream, the
 * writer); read one item at a time, each layer costs a promise and a
 * microtask per event. Read in batches, it costs them once per upstream read.
 *
 * Contract: a `Batched` is still an ordinary `AsyncIterable` of single items
 * (in the same order, with the same failure and early-exit behaviour), so
 * consumers that iterate item by item keep working; `batchesOf` is how a
 * consumer reads any async iterable in batches (a plain one as batches of
 * one). Either way it is read once, by one consumer. A batch is never empty;
 * the consumer owns it (it may keep or change it).
 */

/** An async iterable of items that can also be read a batch at a time. */
export interface Batched<T> extends AsyncIterable<T> {
  /** The items in batches of those ready together; same order, same errors, same early-exit behaviour as the items. */
  batches(): AsyncIterator<T[]>;
}

function isBatched<T>(source: AsyncIterable<T>): source is Batched<T> {
  return typeof (source as Partial<Batched<T>>).batches === 'function';
}

/** A batched sequence made by a batch generator (called once, when the sequence is read). */
export class BatchedFlow<T> implements Batched<T> {
  readonly #make: () => AsyncIterator<T[]>;

  constructor(make: () => AsyncIterator<T[]>) {
    this.#make = make;
  }

  batches(): AsyncIterator<T[]> {
    return this.#make();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    const it = this.#make();
    let finished = false;
    try {
      for (;;) {
        const next = await it.next();
        if (next.done === true) {
          finished = true;
          return;
        }
        for (const item of next.value) yield item;
      }
    } finally {
      // Left early: the batch generator's own cleanup runs (as a `for await` would make it).
      if (!finished) await it.return?.();
    }
  }
}

/** A `Batched` source read as its batches. */
class BatchesView<T> implements AsyncIterable<T[]> {
  readonly #source: Batched<T>;

  constructor(source: Batched<T>) {
    this.#source = source;
  }

  [Symbol.asyncIterator](): AsyncIterator<T[]> {
    return this.#source.batches();
  }
}

/** Reads `source` in batches: its own when it is `Batched`, else one item per batch. */
export function batchesOf<T>(source: AsyncIterable<T>): AsyncIterable<T[]> {
  if (isBatched(source)) return new BatchesView(source);
  return ones(source);
}

async function* ones<T>(source: AsyncIterable<T>): AsyncGenerator<T[]> {
  for await (const item of source) yield [item];
}
