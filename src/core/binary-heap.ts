/**
 * A binary min-heap ordered by `before(a, b)` ("a leaves first"). Shared by
 * the router queue and the approximate-mode TTL index; `items` is the heap
 * array, readable for scans (not in order).
 */
export class BinaryHeap<T> {
  items: T[] = [];
  readonly #before: (a: T, b: T) => boolean;

  constructor(before: (a: T, b: T) => boolean) {
    this.#before = before;
  }

  get size(): number {
    return this.items.length;
  }

  /** The first item, or undefined when empty. */
  top(): T | undefined {
    return this.items[0];
  }

  push(x: T): void {
    const h = this.items;
    h.push(x);
    let i = h.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.#before(x, h[p]!)) break;
      h[i] = h[p]!;
      i = p;
    }
    h[i] = x;
  }

  pop(): T | undefined {
    const h = this.items;
    const top = h[0];
    const last = h.pop();
    if (top === undefined || last === undefined || h.length === 0) return top;
    let i = 0;
    const n = h.length;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && this.#before(h[r]!, h[l]!) ? r : l;
      if (!this.#before(h[c]!, last)) break;
      h[i] = h[c]!;
      i = c;
    }
    h[i] = last;
    return top;
  }

  /** Replaces the contents; `sorted` must be in `before` order (a sorted array is a valid heap). */
  reset(sorted: T[]): void {
    this.items = sorted;
  }
}
