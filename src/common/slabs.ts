/**
 * Shared slabs of off-heap memory that a hot path carves views from (the routing decision's hash results and
 * candidate rows), each made ahead of its use, off that path.
 *
 * Why ahead: V8 runs a young-generation collection inside any fresh `ArrayBuffer` allocation once the young
 * generation's off-heap bytes pass twice its default semi-space (32 MiB). Under a KV-event firehose the ingestion
 * threads' transferred batches cross that every few tens of milliseconds, so the decision that happened to need a
 * new slab paid a whole collection (about 1 ms on 16 cores): BENCHMARKS.md, "Twenty-fifth round". The next slab is
 * now made in a `setImmediate` after the current one is taken, where the collection, if due, runs between tasks.
 * A caller that takes slabs faster than the event loop turns (a synchronous loop) makes them itself, as before.
 *
 * Why unzeroed: every view carved is written whole by its caller before it is read. A zeroed 64 KiB buffer cost
 * about three times as long to make (14 against 4.7 µs on average, after a 1 ms sleep).
 *
 * A carved view keeps its whole slab alive: callers carve only results of at most a quarter of a slab, so a result
 * that outlives its neighbours holds at most one slab beyond its own size.
 */
import { Buffer } from 'node:buffer';

export class CarvedSlabs {
  readonly slabBytes: number;
  #current: ArrayBuffer;
  #offset = 0;
  #spare: ArrayBuffer | null = null;
  #making = false;

  /** `slabBytes`: each slab's size, a multiple of 8. */
  constructor(slabBytes: number) {
    this.slabBytes = slabBytes;
    this.#current = slab(slabBytes);
  }

  /**
   * Reserves `bytes` (a multiple of 8, at most `slabBytes`) and returns their offset in `buffer`, which the
   * caller reads after this call (it may be a new slab). The bytes hold whatever the slab held: write them first.
   */
  carve(bytes: number): number {
    if (this.#offset + bytes > this.slabBytes) this.#next();
    const at = this.#offset;
    this.#offset += bytes;
    return at;
  }

  /** The slab the last `carve` reserved in. */
  get buffer(): ArrayBuffer {
    return this.#current;
  }

  /** Whether the next slab is made already (from the first slab switch on, after the event loop's next turn). */
  get ready(): boolean {
    return this.#spare !== null;
  }

  #next(): void {
    this.#current = this.#spare ?? slab(this.slabBytes);
    this.#spare = null;
    this.#offset = 0;
    if (this.#making) return;
    this.#making = true;
    // Unref'd: a spare never keeps a process up; one not made by exit costs nothing.
    setImmediate(() => {
      this.#making = false;
      this.#spare ??= slab(this.slabBytes);
    }).unref();
  }
}

/** Off-heap memory of its own (never a pooled one), not zeroed. */
function slab(bytes: number): ArrayBuffer {
  return Buffer.allocUnsafeSlow(bytes).buffer as ArrayBuffer;
}
