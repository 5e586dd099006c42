/**
 * The in-flight prompt trie against a plain list of prompts per slot, under random bookings and frees:
 * every answer (blocks already held at insert, kept at remove, held by others, each slot's depth) is the
 * longest common prefix the list gives. Block hashes are drawn so that siblings very often agree on their
 * low 32 bits and differ only above them: children told apart by their high words alone are found, split,
 * merged and dropped like any other, in a node's list and in the module's children table.
 */
import { describe, expect, it } from 'vitest';
import { isKvgateError } from '../../src/errors/index.js';
import { ActivePromptTrie, failIndexAllocation, type TrieNode } from '../../src/wasm/index.js';
import { wasm } from '../../src/wasm/instance.js';
import { mulberry32 } from '../helpers/rng.js';

/** Chained hashes of a prompt given as choices: one id per distinct prefix, in the high 32 bits. */
function hasher(): (choices: readonly number[]) => BigUint64Array {
  const ids = new Map<string, number>();
  // The low words of a block's three possible hashes: the first two are equal, the third differs only in
  // the top two bits, so siblings always share the 30 bits a child is filed under and often the 32.
  const LOW = [0x12345678n, 0x12345678n, 0xd2345678n];
  return (choices) => {
    const out = new BigUint64Array(choices.length);
    for (let i = 0; i < choices.length; i++) {
      const key = choices.slice(0, i + 1).join(',');
      let id = ids.get(key);
      if (id === undefined) ids.set(key, (id = ids.size + 1));
      out[i] = (BigInt(id) << 32n) | LOW[choices[i]!]!;
    }
    return out;
  };
}

function lcp(a: BigUint64Array, b: BigUint64Array): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/**
 * The answers a trie must give, from a plain list of the prompts in flight and their slots: the blocks of
 * `seq` that `slot` holds through them (but the one at `except`), the longest common prefix.
 */
function listModel(): {
  live: { seq: BigUint64Array; slot: number }[];
  held: (seq: BigUint64Array, slot: number, except?: number) => number;
} {
  const live: { seq: BigUint64Array; slot: number }[] = [];
  const held = (seq: BigUint64Array, slot: number, except?: number): number =>
    Math.max(0, ...live.filter((r, i) => r.slot === slot && i !== except).map((r) => lcp(seq, r.seq)));
  return { live, held };
}

/**
 * Removes the prompt at `i` of the list from the trie, checking what it still holds as the list does: by its
 * hashes, or (`end`) from the node its insert ended on.
 */
function removeChecked(trie: ActivePromptTrie, model: ReturnType<typeof listModel>, i: number, end?: TrieNode): void {
  const { seq, slot } = model.live[i]!;
  const others = model.held(seq, slot, i);
  expect(trie.heldByOthers(seq, slot)).toBe(others);
  model.live.splice(i, 1);
  expect(end !== undefined ? trie.removeAt(end, slot) : trie.remove(seq, slot)).toBe(others);
}

describe('ActivePromptTrie', () => {
  it('answers as a list of prompts per slot does, through colliding keys, splits and merges', () => {
    const rng = mulberry32(2028);
    const hash = hasher();
    const trie = new ActivePromptTrie();
    const { live, held } = listModel();
    for (let step = 0; step < 3000; step++) {
      if (live.length > 0 && rng() < 0.45) {
        const i = Math.floor(rng() * live.length);
        const { seq, slot } = live[i]!;
        const others = held(seq, slot, i);
        expect(trie.heldByOthers(seq, slot)).toBe(others);
        live.splice(i, 1);
        expect(trie.remove(seq, slot)).toBe(others);
      } else {
        const choices = Array.from({ length: 1 + Math.floor(rng() * 6) }, () => Math.floor(rng() * 3));
        const seq = hash(choices);
        const slot = Math.floor(rng() * 4);
        expect(trie.insert(seq, slot)).toBe(held(seq, slot));
        live.push({ seq, slot });
      }
      const probe = hash(Array.from({ length: 6 }, () => Math.floor(rng() * 3)));
      const depths = new Float64Array(4);
      trie.depthsInto(probe, depths);
      expect([...depths]).toEqual([0, 1, 2, 3].map((s) => held(probe, s)));
      expect(trie.size).toBe(live.length);
    }
  });
});

describe('ActivePromptTrie: a booking resumes the walk of its match', () => {
  it('answers as the list does when each insert follows a depth query of the same prompt, changed or not, and removes start from where inserts ended', () => {
    const rng = mulberry32(4099);
    const hash = hasher();
    const trie = new ActivePromptTrie();
    const model = listModel();
    const { live, held } = model;
    // The node each insert ended on: half the removes start from it.
    const ends = new Map<BigUint64Array, TrieNode>();
    const removeOne = (): void => {
      const i = Math.floor(rng() * live.length);
      removeChecked(trie, model, i, rng() < 0.5 ? ends.get(live[i]!.seq) : undefined);
    };
    const depthsOf = (seq: BigUint64Array): number[] => {
      const depths = new Float64Array(6);
      trie.depthsInto(seq, depths);
      return [...depths];
    };
    for (let step = 0; step < 3000; step++) {
      if (live.length > 0 && rng() < 0.4) {
        removeOne();
        continue;
      }
      const seq = hash(Array.from({ length: 1 + Math.floor(rng() * 8) }, () => Math.floor(rng() * 3)));
      const slot = Math.floor(rng() * 6);
      expect(depthsOf(seq)).toEqual([0, 1, 2, 3, 4, 5].map((s) => held(seq, s)));
      const between = rng();
      if (between < 0.15 && live.length > 0) {
        // The trie changes between the match and the booking: the walk is stale.
        removeOne();
      } else if (between < 0.3) {
        // The same array, its hashes rewritten to another prompt's (a caller reusing its buffer).
        seq.set(hash(Array.from({ length: seq.length }, () => Math.floor(rng() * 3))));
      }
      const expected = held(seq, slot);
      const viaCopy = rng() < 0.2 ? seq.slice() : seq;
      expect(trie.insert(viaCopy, slot)).toBe(expected);
      ends.set(viaCopy, trie.lastEnd);
      live.push({ seq: viaCopy, slot });
      expect(trie.size).toBe(live.length);
    }
  });
});

describe('ActivePromptTrie: wide nodes', () => {
  it('answers as the list does when nodes have up to twelve children, filed in the children table and emptied again', () => {
    // Twelve possible blocks after each prefix, three in four sharing the low 32 bits: a node's children
    // outgrow its list (eight), are filed in the module's children table too, and leave it again at four.
    const ids = new Map<string, number>();
    const hash = (choices: readonly number[]): BigUint64Array => {
      const out = new BigUint64Array(choices.length);
      for (let i = 0; i < choices.length; i++) {
        const key = choices.slice(0, i + 1).join(',');
        let id = ids.get(key);
        if (id === undefined) ids.set(key, (id = ids.size + 1));
        out[i] = (BigInt(id) << 32n) | 0x12345678n | (BigInt(choices[i]! % 4 === 3 ? 3 : 0) << 30n);
      }
      return out;
    };
    const rng = mulberry32(77);
    const trie = new ActivePromptTrie();
    const model = listModel();
    const { live, held } = model;
    const draw = (): BigUint64Array =>
      hash(Array.from({ length: 1 + Math.floor(rng() * 4) }, () => Math.floor(rng() * 12)));
    for (let step = 0; step < 4000; step++) {
      // Grow to about 150 prompts, then drain to none, twice: nodes go from lists to maps and back.
      const draining = step % 2000 >= 1200;
      if (live.length > 0 && (draining || rng() < 0.3)) {
        removeChecked(trie, model, Math.floor(rng() * live.length));
      } else if (!draining) {
        const seq = draw();
        const slot = Math.floor(rng() * 5);
        const depths = new Float64Array(5);
        trie.depthsInto(seq, depths);
        expect([...depths]).toEqual([0, 1, 2, 3, 4].map((s) => held(seq, s)));
        expect(trie.insert(seq, slot)).toBe(held(seq, slot));
        live.push({ seq, slot });
      }
      const probe = draw();
      const depths = new Float64Array(5);
      trie.depthsInto(probe, depths);
      expect([...depths]).toEqual([0, 1, 2, 3, 4].map((s) => held(probe, s)));
      expect(trie.size).toBe(live.length);
    }
  });
});

describe('ActivePromptTrie: many slots', () => {
  it('answers as the list does with slots beyond 32 (bit sets of several words, grown while prompts are in), and frees every node when drained', () => {
    const rng = mulberry32(9001);
    const hash = hasher();
    const trie = new ActivePromptTrie();
    const model = listModel();
    const { live, held } = model;
    const SLOTS = 100;
    const ends = new Map<BigUint64Array, TrieNode>();
    const probeSlots = (seq: BigUint64Array): void => {
      const depths = new Float64Array(SLOTS);
      trie.depthsInto(seq, depths);
      for (let s = 0; s < SLOTS; s++) expect(depths[s]).toBe(held(seq, s));
    };
    for (let step = 0; step < 2500; step++) {
      const draining = step >= 2000;
      if (live.length > 0 && (draining || rng() < 0.4)) {
        const i = Math.floor(rng() * live.length);
        removeChecked(trie, model, i, rng() < 0.5 ? ends.get(live[i]!.seq) : undefined);
      } else if (!draining) {
        const seq = hash(Array.from({ length: 1 + Math.floor(rng() * 7) }, () => Math.floor(rng() * 3)));
        // Slots drawn from a range that widens: the bit sets grow with prompts already in.
        const slot = Math.floor(rng() * Math.min(SLOTS, 8 + step / 10));
        probeSlots(seq);
        expect(trie.insert(seq, slot)).toBe(held(seq, slot));
        ends.set(seq, trie.lastEnd);
        live.push({ seq, slot });
      }
      if (step % 7 === 0) probeSlots(hash(Array.from({ length: 7 }, () => Math.floor(rng() * 3))));
      expect(trie.size).toBe(live.length);
    }
    expect(live.length).toBe(0);
    expect(trie.nodeCount).toBe(1);
  });
});

describe('ActivePromptTrie: an allocation that fails', () => {
  it('an insert that cannot allocate throws KVG_ERR_WASM and changes nothing: the trie answers as the list does, and takes the insert again', () => {
    const rng = mulberry32(515);
    const hash = hasher();
    const trie = new ActivePromptTrie();
    const model = listModel();
    const { live, held } = model;
    const SLOTS = 70;
    const depthsOf = (seq: BigUint64Array): number[] => {
      const depths = new Float64Array(SLOTS);
      trie.depthsInto(seq, depths);
      return [...depths];
    };
    const expected = (seq: BigUint64Array): number[] => Array.from({ length: SLOTS }, (_, s) => held(seq, s));
    let failures = 0;
    for (let step = 0; step < 1500; step++) {
      if (live.length > 0 && rng() < 0.35) {
        removeChecked(trie, model, Math.floor(rng() * live.length));
        continue;
      }
      const seq = hash(Array.from({ length: 1 + Math.floor(rng() * 8) }, () => Math.floor(rng() * 3)));
      // Slots from a widening range: the bit sets grow (the pool is laid out again) as well as the node records.
      const slot = Math.floor(rng() * Math.min(SLOTS, 4 + step / 20));
      if (rng() < 0.5) expect(depthsOf(seq)).toEqual(expected(seq));
      const nodes = trie.nodeCount;
      // The first, second or third allocation of the insert fails (if it makes that many).
      failIndexAllocation(1 + Math.floor(rng() * 3));
      let thrown: unknown;
      try {
        expect(trie.insert(seq, slot)).toBe(held(seq, slot));
        live.push({ seq, slot });
      } catch (err) {
        thrown = err;
      } finally {
        failIndexAllocation(0);
      }
      if (thrown === undefined) continue;
      failures++;
      expect(isKvgateError(thrown, 'KVG_ERR_WASM')).toBe(true);
      expect((thrown as { detail?: unknown }).detail).toEqual({ op: 'insert' });
      expect(trie.size).toBe(live.length);
      expect(trie.nodeCount).toBe(nodes);
      expect(depthsOf(seq)).toEqual(expected(seq));
      expect(trie.insert(seq, slot)).toBe(held(seq, slot));
      live.push({ seq, slot });
    }
    expect(failures).toBeGreaterThan(100);
    while (live.length > 0) removeChecked(trie, model, Math.floor(rng() * live.length));
    expect(trie.nodeCount).toBe(1);
  });

  it('an insert whose one allocation is the bit sets growing (a slot beyond 32) fails whole, then succeeds', () => {
    const hash = hasher();
    const trie = new ActivePromptTrie();
    const a = hash([0, 1, 2]);
    const b = hash([0, 1, 0, 0]);
    trie.insert(a, 0);
    trie.insert(b, 31);
    // `a` is in the trie already: no new node, no prompt copy; only the bit sets must grow for slot 40.
    failIndexAllocation(1);
    try {
      expect(() => trie.insert(a, 40)).toThrow(/could not allocate memory for the in-flight prompt trie's insert/);
    } finally {
      failIndexAllocation(0);
    }
    const depths = new Float64Array(41);
    trie.depthsInto(a, depths);
    expect([depths[0], depths[31], depths[40]]).toEqual([3, 2, 0]);
    expect(trie.size).toBe(2);
    expect(trie.insert(a, 40)).toBe(0);
    trie.depthsInto(b, depths);
    expect([depths[0], depths[31], depths[40]]).toEqual([2, 4, 2]);
  });

  it('a prompt removed by its hashes that is not in the trie is refused, and the trie is unchanged', () => {
    const hash = hasher();
    const trie = new ActivePromptTrie();
    const seq = hash([0, 1, 2, 0]);
    trie.insert(seq, 3);
    expect(() => trie.remove(hash([0, 1]), 3)).toThrow(/not in the trie/);
    expect(() => trie.remove(hash([0, 2, 2, 0]), 3)).toThrow(/not in the trie/);
    expect(trie.size).toBe(1);
    expect(trie.heldByOthers(seq, 3)).toBe(0);
    expect(trie.remove(seq, 3)).toBe(0);
    expect(trie.nodeCount).toBe(1);
  });
});

describe('ActivePromptTrie: memory', () => {
  it('gives back the prompt copies and nodes of what is removed: fill and drain cycles do not grow the module', () => {
    const rng = mulberry32(31337);
    const trie = new ActivePromptTrie();
    const memory = (): number => wasm().exports.memory.buffer.byteLength;
    const cycle = (): void => {
      const ends: { end: TrieNode; slot: number }[] = [];
      for (let i = 0; i < 2000; i++) {
        // 64 blocks: a shared 16-block head, then the prompt's own (a copy of 520 bytes each).
        const seq = new BigUint64Array(64);
        for (let b = 0; b < 64; b++) seq[b] = b < 16 ? BigInt(b + 1) : (BigInt(i + 1) << 32n) | BigInt(b);
        const slot = Math.floor(rng() * 8);
        trie.insert(seq, slot);
        ends.push({ end: trie.lastEnd, slot });
      }
      for (const { end, slot } of ends) trie.removeAt(end, slot);
      expect(trie.size).toBe(0);
      expect(trie.nodeCount).toBe(1);
    };
    cycle();
    const after = memory();
    for (let c = 0; c < 4; c++) cycle();
    // A leak of the copies would be 4 x 2,000 x 520 bytes, about 4 MiB.
    expect(memory()).toBe(after);
  });
});
