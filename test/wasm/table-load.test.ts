import { describe, expect, it } from 'vitest';
import { PrefixIndex } from '../../src/wasm/index.js';
import { mulberry32 } from '../helpers/rng.js';

/** `n` random u64 block hashes from `rng`. */
function randomHashes(rng: () => number, n: number): BigUint64Array {
  const u32 = new Uint32Array(2 * n);
  for (let i = 0; i < u32.length; i++) u32[i] = Math.floor(rng() * 2 ** 32);
  return new BigUint64Array(u32.buffer);
}

describe('PrefixIndex memory at any fill', () => {
  // A private block (one slot holds it) costs its 24-byte record, an 8-byte bucket in the id table and a
  // 12-byte bucket in its slot's table. The tables grow by a quarter once 80 % full, so they stay at least
  // 64 % full: at most 24 + 8 / 0.64 + 12 / 0.64 = 55.25 bytes per entry, plus the slack of the last chunk of
  // records. A table that doubled would be 40 % full right after growing: 74 bytes per entry.
  it('holds private blocks in at most 56 bytes each, right after every table growth too', () => {
    const rng = mulberry32(28);
    for (const slots of [1, 3]) {
      const index = new PrefixIndex();
      let worst = 0;
      let worstAt = 0;
      for (let s = 0; index.size < 300_000; s = (s + 1) % slots) {
        const local = randomHashes(rng, 256);
        index.applyStored(s, 0, null, randomHashes(rng, 256), local);
        if (index.size < 100_000) continue;
        const perEntry = index.bytes / index.size;
        if (perEntry > worst) [worst, worstAt] = [perEntry, index.size];
      }
      expect(index.distinctBlocks).toBe(index.size);
      expect(worst, `${slots} slots: ${worst.toFixed(1)} bytes per entry at ${worstAt} entries`).toBeLessThanOrEqual(
        56,
      );
      index.dispose();
    }
  });
});
