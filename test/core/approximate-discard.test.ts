/**
 * The approximate index (routing decisions recorded with a TTL, in the request path) when the WebAssembly
 * module fails an allocation in its prefix index: the decision's recording throws nothing (no request fails
 * for it), the index and its deadlines start over empty, and the next recording is kept.
 */
import { describe, expect, it } from 'vitest';
import { ApproximateIndex } from '../../src/core/approximate.js';
import { ManualClock } from '../../src/common/index.js';
import { PrefixIndex, promptHashes } from '../../src/wasm/index.js';

describe('ApproximateIndex after an allocation failure in its index', () => {
  it('recording goes on: nothing thrown, the index and its deadlines start over, the next decision is kept', () => {
    const clock = new ManualClock();
    const approx = new ApproximateIndex(new PrefixIndex(), { clock });
    const a = promptHashes(
      Array.from({ length: 64 }, (_, i) => i + 1),
      16,
    );
    const b = promptHashes(
      Array.from({ length: 4096 }, (_, i) => 10_000 + i),
      16,
    );
    approx.record(1, 0, a);
    expect(approx.size).toBe(4);
    approx.index.failNextAllocation();
    // 256 new blocks: the index must allocate, and that allocation fails.
    expect(() => approx.record(2, 0, b)).not.toThrow();
    expect(approx.size).toBe(0);
    expect(approx.index.size).toBe(0);
    approx.record(2, 0, b);
    expect(approx.size).toBe(256);
    expect(approx.index.findMatches(b.local).count).toBe(1);
    clock.advance(approx.ttlMs);
    expect(approx.expire()).toBe(256);
    expect(approx.index.size).toBe(0);
  });
});
