/**
 * The tokenizer agreement probe's block comparison: kvgate's token ids of the canary against the
 * BlockStored events the engine published, block by block (issue 16, tokenizer agreement probe).
 */
import { describe, expect, it } from 'vitest';
import type { StoredBlocksEvent } from '../../src/events/index.js';
import { compareStoredBlocks } from '../../src/routing/index.js';

const BS = 4;
let nextHash = 1n;

/** Stored events for `tokens` (whole blocks), split into events of `perEvent` blocks, chained from the root. */
function stored(
  tokens: number[],
  perEvent = 2,
  blockSize = BS,
  salt?: { vllm?: string; sglang?: string },
): StoredBlocksEvent[] {
  const out: StoredBlocksEvent[] = [];
  let parent: bigint | null = null;
  const blocks = Math.floor(tokens.length / blockSize);
  for (let b = 0; b < blocks; b += perEvent) {
    const n = Math.min(perEvent, blocks - b);
    const hashes = BigUint64Array.from(Array.from({ length: n }, () => nextHash++));
    out.push({
      type: 'stored',
      tier: 'device',
      parentHash: parent,
      blockHashes: hashes,
      tokenIds: Uint32Array.from(tokens.slice(b * blockSize, (b + n) * blockSize)),
      blockSize,
      droppedBlocks: 0,
      loraName: undefined,
      loraId: undefined,
      cacheSalt: salt?.sglang,
      mmHashes: undefined,
      ...(salt?.vllm !== undefined && parent === null ? { extraKeyStrings: [salt.vllm] } : {}),
      groupIdx: 0,
    });
    parent = hashes[n - 1]!;
  }
  return out;
}

const ids = (n: number, from = 100): number[] => Array.from({ length: n }, (_, i) => from + i);

describe('compareStoredBlocks', () => {
  it('agreement: every full block equal (the partial tail is not stored)', () => {
    const mine = ids(18);
    expect(compareStoredBlocks(Uint32Array.from(mine), stored(mine.slice(0, 16)))).toEqual({
      outcome: 'ok',
      blocks: 4,
      blockSize: BS,
    });
  });

  it('names the first differing block, its offset and a few ids of each side', () => {
    const mine = ids(16);
    const theirs = [...mine];
    theirs[9] = 7;
    const c = compareStoredBlocks(Uint32Array.from(mine), stored(theirs));
    expect(c).toEqual({
      outcome: 'mismatch',
      block: 2,
      offset: 1,
      blockSize: BS,
      gateway: [109, 110, 111],
      engine: [7, 110, 111],
    });
  });

  it('fewer blocks than expected, all agreeing: incomplete (more may arrive); nothing stored: incomplete', () => {
    const mine = ids(16);
    expect(compareStoredBlocks(Uint32Array.from(mine), stored(mine.slice(0, 8)))).toEqual({
      outcome: 'incomplete',
      agreeing: 2,
      expected: 4,
    });
    expect(compareStoredBlocks(Uint32Array.from(mine), []).outcome).toBe('incomplete');
  });

  it("an engine block past kvgate's full blocks must open with kvgate's tail (the rest was generated)", () => {
    const mine = ids(11);
    expect(compareStoredBlocks(Uint32Array.from(mine), stored([...mine, 999])).outcome).toBe('ok');
    const longer = compareStoredBlocks(Uint32Array.from(mine), stored([...ids(8), 108, 5, 6, 7]));
    expect(longer).toMatchObject({ outcome: 'mismatch', block: 2, offset: 1 });
  });

  it("picks the canary's chain among other requests' blocks", () => {
    const mine = ids(16);
    const other = stored(ids(16, 5000));
    const theirs = [...mine];
    theirs[14] = 1;
    expect(compareStoredBlocks(Uint32Array.from(mine), [...other, ...stored(theirs)])).toMatchObject({
      outcome: 'mismatch',
      block: 3,
      offset: 2,
    });
    expect(compareStoredBlocks(Uint32Array.from(mine), [...other, ...stored(mine)]).outcome).toBe('ok');
  });

  it('of chains that differ in the same block, the one that agrees further is reported', () => {
    const mine = ids(16);
    const early = [...mine];
    early[8] = 1;
    const late = [...mine];
    late[10] = 2;
    for (const order of [
      [...stored(early), ...stored(late)],
      [...stored(late), ...stored(early)],
    ])
      expect(compareStoredBlocks(Uint32Array.from(mine), order)).toMatchObject({
        outcome: 'mismatch',
        block: 2,
        offset: 2,
      });
  });

  it("compares in the engine's block size", () => {
    const mine = ids(16);
    expect(compareStoredBlocks(Uint32Array.from(mine), stored(mine, 1, 8))).toEqual({
      outcome: 'ok',
      blocks: 2,
      blockSize: 8,
    });
  });

  describe("with the canary's salt (other requests store blocks meanwhile)", () => {
    const mine = ids(16);
    const client = ids(16, 5000);

    it('a chain with no salt that differs from the first block is not a mismatch: incomplete, counted', () => {
      expect(compareStoredBlocks(Uint32Array.from(mine), stored(client), 'k')).toEqual({
        outcome: 'incomplete',
        agreeing: 0,
        expected: -1,
        unattributed: 1,
      });
      // Nor without a salt to look for: nothing attributes it to the canary.
      expect(compareStoredBlocks(Uint32Array.from(mine), stored(client))).toMatchObject({ unattributed: 1 });
    });

    it("the chain carrying the canary's salt answers, ok or a mismatch from block 0 on", () => {
      for (const salt of [{ vllm: 'k' }, { sglang: 'k' }]) {
        const others = [...stored(client), ...stored(client, 2, BS, { vllm: 'tenant' })];
        expect(compareStoredBlocks(Uint32Array.from(mine), [...others, ...stored(mine, 2, BS, salt)], 'k')).toEqual({
          outcome: 'ok',
          blocks: 4,
          blockSize: BS,
        });
        const theirs = [...mine];
        theirs[1] = 7;
        expect(
          compareStoredBlocks(Uint32Array.from(mine), [...others, ...stored(theirs, 2, BS, salt)], 'k'),
        ).toMatchObject({
          outcome: 'mismatch',
          block: 0,
          offset: 1,
        });
      }
    });

    it('a chain under another salt is never compared; once the salted chain is seen, unsalted chains are not either', () => {
      const theirs = [...mine];
      theirs[9] = 7;
      expect(compareStoredBlocks(Uint32Array.from(mine), stored(theirs, 2, BS, { sglang: 'other' }), 'k')).toEqual({
        outcome: 'incomplete',
        agreeing: 0,
        expected: -1,
      });
      const salted = stored(mine.slice(0, 8), 2, BS, { vllm: 'k' });
      expect(compareStoredBlocks(Uint32Array.from(mine), [...stored(theirs), ...salted], 'k')).toEqual({
        outcome: 'incomplete',
        agreeing: 2,
        expected: 4,
      });
    });
  });
});
