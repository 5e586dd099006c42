/**
 * A slot's blocks leave one PrefixIndex and enter another in batched pages
 * (replica warm start): the copy matches requests as the original does, and
 * the engine's later `removed` and `stored` events resolve against it.
 */
import { describe, expect, it } from 'vitest';
import { PrefixIndex } from '../../src/wasm/index.js';

const seqOf = (ix: PrefixIndex, local: bigint[], slots: number): Map<string, number> => {
  const m = ix.findMatches(BigUint64Array.from(local));
  const out = new Map<string, number>();
  for (let i = 0; i < m.count; i++) {
    const w = ix.slotWorker(m.slots[i]!)!;
    out.set(`${w.workerId}:${w.dpRank}`, m.depths[i]!);
  }
  expect(out.size).toBeLessThanOrEqual(slots);
  return out;
};

describe('PrefixIndex slot export and import (issue 15 warm start)', () => {
  it('a slot copied to another index matches the same prompts, and later events resolve against the copy', () => {
    const a = new PrefixIndex();
    const b = new PrefixIndex();
    // Worker 1 holds a chain of 3 blocks, worker 2 the first 2 of it and a branch.
    a.applyStored(1, 0, null, [101n, 102n, 103n], [11n, 12n, 13n]);
    a.applyStored(2, 1, null, [201n, 202n], [11n, 12n]);
    a.applyStored(2, 1, 202n, [203n], [99n]);
    for (const [w, r] of [
      [1, 0],
      [2, 1],
    ] as const) {
      const pairs = a.exportSlot(w, r);
      expect(pairs.length).toBe(a.blockCount(w, r) * 2);
      expect(b.importSlot(w, r, pairs)).toBe(a.blockCount(w, r));
      // Idempotent: the same pairs again add nothing.
      expect(b.importSlot(w, r, pairs)).toBe(0);
    }
    expect(b.size).toBe(a.size);
    expect(b.distinctBlocks).toBe(a.distinctBlocks);
    for (const prompt of [
      [11n, 12n, 13n],
      [11n, 12n, 99n],
      [11n, 5n],
    ])
      expect(seqOf(b, prompt, 2)).toEqual(seqOf(a, prompt, 2));
    expect(seqOf(b, [11n, 12n, 13n], 2)).toEqual(
      new Map([
        ['1:0', 3],
        ['2:1', 2],
      ]),
    );

    // The engine's next events name the blocks by its own hashes: the copy resolves them.
    for (const ix of [a, b]) {
      ix.applyStored(1, 0, 103n, [104n], [14n]);
      expect(ix.applyRemoved(2, 1, [202n, 203n])).toEqual({ removed: 2, missing: 0 });
    }
    for (const prompt of [
      [11n, 12n, 13n, 14n],
      [11n, 12n, 99n],
    ])
      expect(seqOf(b, prompt, 2)).toEqual(seqOf(a, prompt, 2));
    expect(seqOf(b, [11n, 12n, 13n, 14n], 2)).toEqual(
      new Map([
        ['1:0', 4],
        ['2:1', 1],
      ]),
    );
    a.dispose();
    b.dispose();
  });

  it('a slot larger than one page crosses in several batched calls', () => {
    const a = new PrefixIndex();
    const n = 70_000;
    const eng = new BigUint64Array(n).map((_, i) => BigInt(i + 1));
    const local = new BigUint64Array(n).map((_, i) => BigInt(i * 7 + 3));
    a.applyStored(3, 0, null, eng, local);
    const pairs = a.exportSlot(3, 0);
    expect(pairs.length).toBe(2 * n);
    expect(new Set(Array.from({ length: n }, (_, i) => pairs[2 * i]!)).size).toBe(n);
    const b = new PrefixIndex();
    expect(b.importSlot(3, 0, pairs)).toBe(n);
    expect(seqOf(b, Array.from(local), 1).get('3:0')).toBe(n);
    expect(b.exportSlot(9, 0).length).toBe(0);
    a.dispose();
    b.dispose();
  });
});
