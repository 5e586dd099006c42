import { describe, expect, it } from 'vitest';
import { BinaryHeap } from '../../src/core/binary-heap.js';
import { seededRng } from '../../src/common/index.js';

describe('BinaryHeap', () => {
  it('pops in order for random pushes and pops, and reset takes a sorted array', () => {
    const rng = seededRng(4);
    const heap = new BinaryHeap<number>((a, b) => a < b);
    const model: number[] = [];
    for (let i = 0; i < 5000; i++) {
      if (rng() < 0.6 || model.length === 0) {
        const x = Math.floor(rng() * 1000);
        heap.push(x);
        model.push(x);
        model.sort((a, b) => a - b);
      } else {
        expect(heap.pop()).toBe(model.shift());
      }
      expect(heap.size).toBe(model.length);
      expect(heap.top()).toBe(model[0]);
    }
    heap.reset([1, 2, 3]);
    expect([heap.pop(), heap.pop(), heap.pop(), heap.pop()]).toEqual([1, 2, 3, undefined]);
  });
});
