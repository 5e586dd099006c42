/**
 * The reuse rule of hybrid models, group by group and combined, on hand-made caches: a full-attention group
 * needs every block before the hit point, a sliding window only the blocks inside the window before it, a
 * Mamba group the state saved at it; the combination is the longest prefix every group serves.
 */
import { describe, expect, it } from 'vitest';
import { hybridHitBlocks, kvGroupLabel, kvGroupSpecOf } from '../../src/core/index.js';

const held =
  (...blocks: number[]) =>
  (i: number): boolean =>
    blocks.includes(i);
const BS = 16;

describe('KV-cache group specs from vLLM event fields', () => {
  it('maps every kv_cache_spec_kind vLLM sends', () => {
    expect(kvGroupLabel(kvGroupSpecOf(undefined, undefined))).toBe('full');
    expect(kvGroupLabel(kvGroupSpecOf('full_attention', undefined))).toBe('full');
    expect(kvGroupLabel(kvGroupSpecOf('mla_attention', undefined))).toBe('full');
    expect(kvGroupLabel(kvGroupSpecOf('sliding_window', 128))).toBe('sliding:128');
    expect(kvGroupLabel(kvGroupSpecOf('sliding_window_mla', 4096))).toBe('sliding:4096');
    expect(kvGroupLabel(kvGroupSpecOf('mamba', undefined))).toBe('mamba');
    // A window without its size, and kinds kvgate has no rule for, are unknown (never full attention).
    expect(kvGroupLabel(kvGroupSpecOf('sliding_window', undefined))).toBe('unknown(sliding_window)');
    expect(kvGroupLabel(kvGroupSpecOf('chunked_local_attention', undefined))).toBe('unknown(chunked_local_attention)');
  });
});

describe('hybridHitBlocks', () => {
  const full = kvGroupSpecOf('full_attention', undefined);
  // 128 tokens of window over blocks of 16: ceil(127 / 16) = 8 blocks before the hit point.
  const sliding = kvGroupSpecOf('sliding_window', 128);
  const mamba = kvGroupSpecOf('mamba', undefined);
  const all = Array.from({ length: 20 }, (_, i) => i);

  it('full attention alone is the leading run', () => {
    expect(hybridHitBlocks([{ spec: full, held: held(0, 1, 2, 4, 5) }], BS, 10)).toBe(3);
  });

  it('a sliding window needs only the 8 blocks before the hit point', () => {
    // Blocks 0..3 slid out; 4..11 are the window before 12.
    const sw = held(...all.slice(4, 12));
    expect(hybridHitBlocks([{ spec: sliding, held: sw }], BS, 12)).toBe(12);
    // With full attention beside it, the full group's hole at block 0 ends the hit at 0...
    expect(
      hybridHitBlocks(
        [
          { spec: full, held: held(...all.slice(1)) },
          { spec: sliding, held: sw },
        ],
        BS,
        12,
      ),
    ).toBe(0);
    // ...and with the full group whole, the window decides: a hole at block 9 moves the hit below it, and a
    // window of 8 blocks no longer fits before 9, so only a run from block 0 counts (none here).
    const holed = held(...all.slice(4, 12).filter((b) => b !== 9));
    expect(
      hybridHitBlocks(
        [
          { spec: full, held: held(...all) },
          { spec: sliding, held: holed },
        ],
        BS,
        12,
      ),
    ).toBe(0);
    // A short prompt whose every block is held: the run from block 0 is a hit though shorter than the window.
    expect(hybridHitBlocks([{ spec: sliding, held: held(0, 1, 2) }], BS, 3)).toBe(3);
  });

  it('Mamba needs the state saved at the hit point', () => {
    expect(
      hybridHitBlocks(
        [
          { spec: full, held: held(...all) },
          { spec: mamba, held: held(3, 7) },
        ],
        BS,
        10,
      ),
    ).toBe(8);
    expect(
      hybridHitBlocks(
        [
          { spec: full, held: held(...all.slice(0, 6)) },
          { spec: mamba, held: held(3, 7) },
        ],
        BS,
        10,
      ),
    ).toBe(4);
    expect(
      hybridHitBlocks(
        [
          { spec: full, held: held(...all) },
          { spec: mamba, held: held() },
        ],
        BS,
        10,
      ),
    ).toBe(0);
  });

  it('groups shorten each other until none does', () => {
    // Mamba saved at 12 and 6; the window (33 tokens: ceil(32 / 16) = 2 blocks) holds 10..11 and 4..5; full holds 0..15.
    const w33 = kvGroupSpecOf('sliding_window', 33);
    const groups = [
      { spec: full, held: held(...all.slice(0, 16)) },
      { spec: mamba, held: held(11, 5) },
      { spec: w33, held: held(10, 11, 4, 5) },
    ];
    expect(hybridHitBlocks(groups, BS, 16)).toBe(12);
    // Without the window at 10..11 the Mamba state at 12 is useless: the next point all three serve is 6.
    groups[2] = { spec: w33, held: held(4, 5) };
    expect(hybridHitBlocks(groups, BS, 16)).toBe(6);
  });

  it('an unknown kind predicts no reuse', () => {
    const unknown = kvGroupSpecOf('chunked_local_attention', undefined);
    expect(
      hybridHitBlocks(
        [
          { spec: full, held: held(...all) },
          { spec: unknown, held: held(...all) },
        ],
        BS,
        10,
      ),
    ).toBe(0);
  });
});
