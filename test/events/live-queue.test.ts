// The stream's two holding areas: the bounded live queue (remembering what it had to drop) and the
// batches parked behind a gap (in seq order, whatever order a flood delivers them in).
import { describe, expect, it } from 'vitest';
import { LiveQueue, ParkedBatches } from '../../src/events/live-queue.js';
import type { LiveItem } from '../../src/events/sequence.js';
import { mulberry32 } from '../helpers/rng.js';

const item = (seq: bigint, gen = 0): LiveItem => ({ seq, payload: new Uint8Array(0), gen });

describe('ParkedBatches', () => {
  it('keeps random seqs in ascending order, one per seq, within its bound', () => {
    const rng = mulberry32(4);
    const parked = new ParkedBatches();
    const seqs = new Set<bigint>();
    while (seqs.size < 4000) seqs.add(BigInt(Math.floor(rng() * 2 ** 40)));
    for (const seq of seqs) {
      expect(parked.add(item(seq), 4000)).toBe(true);
      if (rng() < 0.1) expect(parked.add(item(seq), 4000)).toBe(true); // a duplicate is ignored, not kept twice
    }
    expect(parked.length).toBe(4000);
    expect(parked.add(item(1n), 4000)).toBe(false);
    const order: bigint[] = [];
    while (parked.head !== undefined) order.push(parked.shift()!.seq);
    expect(order).toEqual([...seqs].sort((x, y) => (x < y ? -1 : 1)));
  });

  it("what a replay's answer proves: parked before the request and beyond its newest, or beyond the far bound", () => {
    const parked = new ParkedBatches();
    for (const [seq, gen] of [
      [5n, 0],
      [7n, 1],
      [9n, 0],
      [12n, 1],
      [1n << 60n, 1],
    ] as const)
      parked.add(item(seq, gen), 100);
    const never = parked.removeNeverSent(1, 6n, 1_000_006n);
    expect(never.map((p) => p.seq)).toEqual([9n, 1n << 60n]);
    expect([parked.head?.seq, parked.newest?.seq, parked.length]).toEqual([5n, 12n, 3]);
  });
});

describe('LiveQueue', () => {
  it('refuses beyond its bound and remembers the newest seq dropped until a later replay covers it', () => {
    const q = new LiveQueue(2);
    expect(q.offer(item(1n))).toBe(true);
    expect(q.offer(item(2n))).toBe(true);
    expect(q.offer(item(4n, 3))).toBe(false);
    expect(q.offer(item(3n, 3))).toBe(false);
    expect(q.dropped).toEqual({ high: 4n, gen: 3 });
    q.forgetDropped(3); // a replay sent before the drop cannot cover it
    expect(q.dropped).toBeDefined();
    q.forgetDropped(4);
    expect(q.dropped).toBeUndefined();
    expect([q.shift()?.seq, q.shift()?.seq, q.shift()]).toEqual([1n, 2n, undefined]);
  });
});
