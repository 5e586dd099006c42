/**
 * A routing decision's match stage in one module call (`PrefixIndex.matchStage`, src/wasm/index-match.ts)
 * against the two calls it replaces: the index's `findMatches` by sequence hash and the trie's `depthsInto`.
 * Prompts are random walks over a small tree of blocks, so the index and the trie hold prefixes of every
 * length of each other's prompts; 70 slots (two bitset words in the index).
 */
import { describe, expect, it } from 'vitest';
import type { IndexMemoryError } from '../../src/errors/index.js';
import { ActivePromptTrie, PrefixIndex, sequenceHashes } from '../../src/wasm/index.js';
import { mulberry32 } from '../helpers/rng.js';

const SLOTS = 70;

/** A prompt of `len` blocks, each block one of three choices: local hashes that encode the choices made so far. */
function prompt(rng: () => number, len: number): { local: BigUint64Array; seq: BigUint64Array } {
  const local = new BigUint64Array(len);
  for (let i = 0; i < len; i++) local[i] = BigInt(1 + Math.floor(rng() * 3));
  return { local, seq: sequenceHashes(local) };
}

/** The two calls the stage replaces, on zeroed arrays. */
function separately(
  index: PrefixIndex,
  trie: ActivePromptTrie,
  seq: BigUint64Array,
): { dev: number[]; depth: number[] } {
  const dev = new Float64Array(SLOTS);
  const m = index.findMatches(seq, true);
  for (let i = 0; i < m.count; i++) dev[m.slots[i]!] = m.depths[i]!;
  const depth = new Float64Array(SLOTS);
  trie.depthsInto(seq, depth);
  return { dev: [...dev], depth: [...depth] };
}

describe('PrefixIndex.matchStage', () => {
  it('writes what findMatches and depthsInto write, leaves other entries as they were, and keeps the walk for an insert', () => {
    const rng = mulberry32(71);
    const index = new PrefixIndex();
    const trie = new ActivePromptTrie();
    for (let s = 0; s < SLOTS; s++) index.slotOf(s + 1, 0);
    let engine = 1n;
    for (let k = 0; k < 300; k++) {
      const { local, seq } = prompt(rng, 1 + Math.floor(rng() * 12));
      const slot = Math.floor(rng() * SLOTS);
      index.applyStored(
        slot + 1,
        0,
        null,
        Array.from(seq, () => engine++),
        local,
      );
      if (rng() < 0.3) trie.insert(seq, Math.floor(rng() * SLOTS));
    }
    let written = 0;
    for (let k = 0; k < 200; k++) {
      const { seq } = prompt(rng, 1 + Math.floor(rng() * 14));
      const want = separately(index, trie, seq);
      // -1 marks an entry the stage must not touch: every slot holding no prefix.
      const dev = new Float64Array(SLOTS).fill(-1);
      const depth = new Float64Array(SLOTS).fill(-1);
      index.matchStage(trie, seq, dev, depth);
      expect([...dev]).toEqual(want.dev.map((d) => (d > 0 ? d : -1)));
      expect([...depth]).toEqual(want.depth.map((d) => (d > 0 ? d : -1)));
      written += want.dev.filter((d) => d > 0).length + want.depth.filter((d) => d > 0).length;
      // A booking right after resumes the stage's walk: it answers the depth the stage gave its slot.
      const slot = Math.floor(rng() * SLOTS);
      expect(trie.insert(seq, slot)).toBe(Math.max(0, depth[slot]!));
    }
    expect(written).toBeGreaterThan(1000);
    index.dispose();
  });

  it('a match that cannot allocate discards the index, as any match, and still writes the trie depths', () => {
    const rng = mulberry32(72);
    const index = new PrefixIndex();
    const trie = new ActivePromptTrie();
    const heard: IndexMemoryError[] = [];
    index.onDiscard((e) => heard.push(e));
    // One block stored: no duplicate check ran, so the match's scratch is allocated by the match itself.
    const { local, seq } = prompt(rng, 1);
    index.applyStored(3, 0, null, [9n], local);
    trie.insert(seq, 2);
    index.failNextAllocation();
    const dev = new Float64Array(4);
    const depth = new Float64Array(4);
    index.matchStage(trie, seq, dev, depth);
    expect(heard.map((e) => e.detail)).toEqual([{ op: 'matching' }]);
    expect([...dev]).toEqual([0, 0, 0, 0]);
    expect([...depth]).toEqual([0, 0, 1, 0]);
    // The fresh index answers as an empty one, then as usual once stored again.
    index.matchStage(trie, seq, dev, depth);
    expect([...dev]).toEqual([0, 0, 0, 0]);
    index.applyStored(3, 0, null, [9n], local);
    index.matchStage(trie, seq, dev, depth);
    expect(dev[index.slotOf(3, 0)]).toBe(1);
    index.dispose();
  });
});
