/**
 * The (node, slot) count table against a Map under random sets, updates and deletes: keys crowded into few
 * distinct pairs so runs of probes form, wrap around the table's end and are cut by deletions, and the
 * table grows several times.
 */
import { describe, expect, it } from 'vitest';
import { PairCounts } from '../../src/core/pair-counts.js';
import { mulberry32 } from '../helpers/rng.js';

describe('PairCounts', () => {
  it('answers as a Map does through growth, long probe runs and deletions', () => {
    const rng = mulberry32(515);
    const table = new PairCounts();
    const model = new Map<string, number>();
    const pairs: [number, number][] = [];
    for (let step = 0; step < 40_000; step++) {
      // A working set that grows to about 600 pairs, then shrinks to none: growth, then churn to empty.
      const phase = Math.floor(step / 10_000);
      const growing = phase % 2 === 0;
      const r = rng();
      if (pairs.length > 0 && (r < (growing ? 0.3 : 0.7) || pairs.length > 600)) {
        const i = Math.floor(rng() * pairs.length);
        const [a, b] = pairs[i]!;
        if (rng() < 0.5) {
          table.set(a, b, 0);
          model.delete(`${a},${b}`);
          pairs[i] = pairs[pairs.length - 1]!;
          pairs.pop();
        } else {
          const c = 2 + Math.floor(rng() * 1000);
          table.set(a, b, c);
          model.set(`${a},${b}`, c);
        }
      } else if (growing) {
        const a = Math.floor(rng() * 2000);
        const b = Math.floor(rng() * 300);
        if (!model.has(`${a},${b}`)) pairs.push([a, b]);
        const c = 2 + Math.floor(rng() * 1000);
        table.set(a, b, c);
        model.set(`${a},${b}`, c);
      }
      expect(table.size).toBe(model.size);
      // Present pairs, and absent ones next to them (same node, other slot; same slot, other node).
      for (let k = 0; k < 3 && pairs.length > 0; k++) {
        const [a, b] = pairs[Math.floor(rng() * pairs.length)]!;
        expect(table.get(a, b)).toBe(model.get(`${a},${b}`));
        expect(table.get(a, b + 300)).toBe(0);
        expect(table.get(a + 2000, b)).toBe(0);
      }
    }
    for (const [key, c] of model) {
      const [a, b] = key.split(',').map(Number);
      expect(table.get(a!, b!)).toBe(c);
    }
  });

  it('keeps a count of 0 as no entry', () => {
    const table = new PairCounts();
    table.set(3, 4, 0);
    expect(table.size).toBe(0);
    table.set(3, 4, 7);
    table.set(3, 4, 0);
    expect(table.get(3, 4)).toBe(0);
    expect(table.size).toBe(0);
  });
});
