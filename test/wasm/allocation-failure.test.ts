/**
 * The prefix index after the WebAssembly module fails an allocation (its memory exhausted): the failure is an
 * `IndexMemoryError`, never a trap reaching the caller; the index is discarded (empty, slots kept, usable)
 * and its owner told; a match answers as an empty index; other indexes of the module are untouched, and the
 * module's heap stays sound through many such failures. The failure is injected by the module's test hook,
 * which fails an allocation exactly as a failed `memory.grow` does.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../src/common/index.js';
import { IndexMemoryError, isKvgateError } from '../../src/errors/index.js';
import { PrefixIndex, failIndexAllocation, sequenceHashes } from '../../src/wasm/index.js';

function randomHashes(rng: () => number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++)
    out[i] = (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
  return out;
}

/** A prompt of `n` blocks stored by `slots` workers, as (engine hashes, local hashes). */
function fill(index: PrefixIndex, local: BigUint64Array, slots: number): void {
  for (let w = 0; w < slots; w++) index.applyStored(w, 0, null, sequenceHashes(local), local);
}

describe('PrefixIndex after an allocation failure in the module', () => {
  it('a stored event that cannot allocate: IndexMemoryError, the index discarded and usable, others intact', () => {
    const rng = seededRng(28);
    const other = new PrefixIndex();
    const otherPrompt = randomHashes(rng, 40);
    fill(other, otherPrompt, 3);
    const index = new PrefixIndex();
    const heard: IndexMemoryError[] = [];
    index.onDiscard((e) => heard.push(e));
    const before = randomHashes(rng, 20);
    fill(index, before, 2);
    expect(index.findMatches(before).count).toBe(2);

    failIndexAllocation(1);
    let thrown: unknown;
    try {
      // 4,096 new blocks: the records, the id table and the slot's table must grow.
      const big = randomHashes(rng, 4096);
      index.applyStored(0, 0, null, sequenceHashes(big), big);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(IndexMemoryError);
    expect(isKvgateError(thrown, 'KVG_ERR_INDEX_MEMORY')).toBe(true);
    expect((thrown as IndexMemoryError).detail).toEqual({ op: 'stored event' });
    expect(heard).toEqual([thrown]);
    // Discarded: empty, its slots still registered, and it takes events again.
    expect(index.size).toBe(0);
    expect(index.findMatches(before).count).toBe(0);
    expect(index.findSlot(1, 0)).toBe(1);
    fill(index, before, 2);
    const again = index.findMatches(before);
    expect(again.count).toBe(2);
    expect([...again.depths]).toEqual([20, 20]);
    // The other index of the same module kept everything.
    const kept = other.findMatches(otherPrompt);
    expect(kept.count).toBe(3);
    expect([...kept.depths]).toEqual([40, 40, 40]);
    index.dispose();
    other.dispose();
  });

  it('a match that cannot allocate answers as an empty index (nothing thrown) and discards the index', () => {
    const rng = seededRng(29);
    const index = new PrefixIndex();
    const heard: IndexMemoryError[] = [];
    index.onDiscard((e) => heard.push(e));
    // One block: no duplicate check, so the match's scratch is not allocated yet.
    const one = randomHashes(rng, 1);
    index.applyStored(7, 0, null, sequenceHashes(one), one);
    failIndexAllocation(1);
    const m = index.findMatches(one);
    expect(m.count).toBe(0);
    expect(heard).toHaveLength(1);
    expect(heard[0]!.detail).toEqual({ op: 'matching' });
    index.applyStored(7, 0, null, sequenceHashes(one), one);
    expect(index.findMatches(one).count).toBe(1);
    index.dispose();
  });

  it('clearing a slot that cannot allocate clears it all the same (the index discarded), nothing thrown', () => {
    const rng = seededRng(30);
    const index = new PrefixIndex();
    let heard = 0;
    index.onDiscard(() => heard++);
    const shared = randomHashes(rng, 4);
    // 640 slots (ten bitset words): a block they all hold is a bitset; once fewer than ten hold it, it narrows
    // to a list, an allocation.
    fill(index, shared, 640);
    for (let w = 639; w >= 10; w--) index.clearSlot(w, 0);
    expect(heard).toBe(0);
    failIndexAllocation(1);
    expect(index.clearSlot(9, 0)).toBe(4);
    expect(heard).toBe(1);
    expect(index.size).toBe(0);
    expect(index.findMatches(shared).count).toBe(0);
    index.dispose();
  });

  it("the module's heap stays sound through many failures at random points", () => {
    const rng = seededRng(31);
    const control = new PrefixIndex();
    const prompts: BigUint64Array[] = [];
    for (let round = 0; round < 40; round++) {
      const index = new PrefixIndex();
      failIndexAllocation(1 + Math.floor(rng() * 40));
      let failed = false;
      for (let i = 0; i < 200 && !failed; i++) {
        const p = randomHashes(rng, 1 + Math.floor(rng() * 64));
        try {
          index.applyStored(Math.floor(rng() * 96), 0, null, sequenceHashes(p), p);
          index.findMatches(p);
        } catch (err) {
          expect(err).toBeInstanceOf(IndexMemoryError);
          failed = true;
        }
      }
      failIndexAllocation(0);
      // Whatever was left behind, a control index built now is exact.
      const p = randomHashes(rng, 48);
      prompts.push(p);
      fill(control, p, 1 + (round % 5));
      index.dispose();
    }
    prompts.forEach((p, round) => {
      const m = control.findMatches(p);
      expect(m.count).toBe(1 + (round % 5));
      expect(Math.min(...m.depths)).toBe(48);
    });
    control.dispose();
  });
});
