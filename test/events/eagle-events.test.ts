/**
 * Eagle (speculative decoding) KV events: an Eagle engine sends `token_ids` as bigrams and hashes each block over
 * its tokens plus the next one (Dynamo's `is_eagle`). A model with `eagle` on reads them and indexes the blocks
 * under Eagle-window hashes, so a prompt hashed the same way finds them and one hashed plainly does not.
 */
import { encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { KvEventApplier, decodeKvEventBatch, type StoredBlocksEvent } from '../../src/events/index.js';
import { blockHashes } from '../../src/wasm/index.js';

const BS = 2;
const W1 = { workerId: 1, dpRank: 0 };

/** Bigrams of `tokens`: each position's token with the next one. */
function bigrams(tokens: readonly number[]): number[][] {
  return tokens.slice(0, -1).map((t, i) => [t, tokens[i + 1]!]);
}

function stored(hashes: number[], tokenIds: unknown): unknown[] {
  return ['BlockStored', hashes, null, tokenIds, BS, null, 'GPU'];
}

function batch(events: unknown[], eagle: boolean) {
  return decodeKvEventBatch(encode([1.5, events, 0]), { eagle });
}

describe('Eagle bigram events', () => {
  it("decode to the blocks' tokens and the token after them when the model's eagle is on", () => {
    const r = batch([stored([11, 12], bigrams([0, 1, 2, 3, 4]))], true);
    expect(r.ok && r.batch.errors).toEqual([]);
    const ev = (r.ok ? r.batch.events[0] : undefined) as StoredBlocksEvent;
    expect([...ev.tokenIds]).toEqual([0, 1, 2, 3]);
    expect(ev.eagleNextToken).toBe(4);
    expect([...ev.blockHashes]).toEqual([11n, 12n]);
  });

  it('are a bad event for a model without eagle, and when a bigram does not continue the one before', () => {
    for (const [events, eagle] of [
      [[stored([11, 12], bigrams([0, 1, 2, 3, 4]))], false],
      [
        [
          stored(
            [11, 12],
            [
              [0, 1],
              [2, 3],
            ],
          ),
        ],
        true,
      ],
      [[stored([11], [[0, 1], 2])], true],
    ] as [unknown[], boolean][]) {
      const r = batch(events, eagle);
      expect(r.ok && r.batch.events).toEqual([]);
      expect(r.ok && r.batch.errors).toEqual([expect.objectContaining({ kind: 'bad_event', eventIndex: 0 })]);
    }
  });

  it('fewer bigrams than blocks keep the leading full blocks and the token after the last of them', () => {
    const r = batch([stored([11, 12, 13], bigrams([0, 1, 2, 3, 4, 5]))], true);
    const ev = (r.ok ? r.batch.events[0] : undefined) as StoredBlocksEvent;
    expect([...ev.blockHashes]).toEqual([11n, 12n]);
    expect([...ev.tokenIds]).toEqual([0, 1, 2, 3]);
    expect(ev.eagleNextToken).toBe(4);
    expect(ev.droppedBlocks).toBe(1);
  });

  it("are indexed under Dynamo's Eagle-window hashes: an Eagle prompt matches every block, a plain one none", () => {
    const a = new KvEventApplier({ blockSize: BS, eagle: true });
    const r = batch([stored([11, 12], bigrams([0, 1, 2, 3, 4]))], true);
    if (!r.ok) throw new Error(r.error.message);
    expect(a.applyBatch(W1, r.batch)).toBe(1);
    const prompt = [0, 1, 2, 3, 4, 5];
    const eagle = blockHashes(prompt, BS, { eagle: true });
    // Dynamo's vector (tokens 0..5, block size 2, windows [0,1,2] and [2,3,4]).
    expect([...eagle]).toEqual([11646242937812223497n, 9948816348502404300n]);
    const depth = (hashes: BigUint64Array): number => {
      const m = a.indexes.device.findMatches(hashes);
      return m.count === 0 ? 0 : m.depths[0]!;
    };
    expect(depth(eagle)).toBe(2);
    expect(depth(blockHashes(prompt, BS))).toBe(0);
  });
});
