import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { CarvedSlabs } from '../../src/common/index.js';

describe('CarvedSlabs', () => {
  it('carves disjoint ranges of one slab until it is full, then switches to a new one', () => {
    const slabs = new CarvedSlabs(64);
    const first = slabs.buffer;
    const views: Float64Array[] = [];
    for (let i = 0; i < 4; i++) {
      const at = slabs.carve(16);
      expect(slabs.buffer).toBe(first);
      expect(at).toBe(i * 16);
      const v = new Float64Array(slabs.buffer, at, 2);
      v.fill(i);
      views.push(v);
    }
    // Full: the next carve starts a new slab at offset 0, and the old views keep their own.
    expect(slabs.carve(8)).toBe(0);
    expect(slabs.buffer).not.toBe(first);
    expect(views.map((v) => [...v])).toEqual([
      [0, 0],
      [1, 1],
      [2, 2],
      [3, 3],
    ]);
  });

  it('makes the next slab after the event loop turns, so the switch after it allocates nothing', async () => {
    const slabs = new CarvedSlabs(32);
    expect(slabs.ready).toBe(false);
    slabs.carve(32);
    slabs.carve(8); // the first switch: made on the spot, and the next one queued
    expect(slabs.ready).toBe(false);
    await nextTurn();
    expect(slabs.ready).toBe(true);
    const before = slabs.buffer;
    slabs.carve(32); // takes the spare
    expect(slabs.buffer).not.toBe(before);
    expect(slabs.ready).toBe(false);
    await nextTurn();
    expect(slabs.ready).toBe(true);
  });

  it('makes its slabs itself when taken faster than the event loop turns', () => {
    const slabs = new CarvedSlabs(16);
    const seen = new Set<ArrayBuffer>();
    for (let i = 0; i < 10; i++) {
      slabs.carve(16);
      seen.add(slabs.buffer);
    }
    expect(seen.size).toBe(10);
  });
});
