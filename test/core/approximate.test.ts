import { describe, expect, it } from 'vitest';
import { ApproximateIndex } from '../../src/core/approximate.js';
import { ManualClock } from '../../src/common/index.js';
import { PrefixIndex, promptHashes } from '../../src/wasm/index.js';

function depths(index: PrefixIndex, local: BigUint64Array): Record<string, number> {
  const r = index.findMatches(local);
  const out: Record<string, number> = {};
  for (let i = 0; i < r.count; i++) {
    const w = index.slotWorker(r.slots[i]!)!;
    out[`${w.workerId}:${w.dpRank}`] = r.depths[i]!;
  }
  return out;
}

describe('ApproximateIndex (TTL-recorded routing decisions)', () => {
  const tokens = Array.from({ length: 64 }, (_, i) => i + 1);
  const { local, seq } = promptHashes(tokens, 16);

  it('records a decision as cached blocks and expires them after the TTL', () => {
    const clock = new ManualClock();
    const approx = new ApproximateIndex(new PrefixIndex(), { clock });
    expect(approx.ttlMs).toBe(120_000);
    approx.record(3, 1, { local, seq });
    expect(depths(approx.index, local)).toEqual({ '3:1': 4 });
    expect(approx.size).toBe(4);
    clock.advance(119_999);
    expect(approx.expire()).toBe(0);
    expect(depths(approx.index, local)).toEqual({ '3:1': 4 });
    clock.advance(1);
    expect(approx.expire()).toBe(4);
    expect(depths(approx.index, local)).toEqual({});
    expect(approx.index.size).toBe(0);
  });

  it('reuse refreshes the TTL; a shorter prompt refreshes only its prefix', () => {
    const clock = new ManualClock();
    const approx = new ApproximateIndex(new PrefixIndex(), { clock, ttlMs: 1000 });
    approx.record(1, 0, { local, seq });
    clock.advance(600);
    approx.record(1, 0, { local: local.subarray(0, 2), seq: seq.subarray(0, 2) });
    clock.advance(400);
    expect(approx.expire()).toBe(2); // blocks 3 and 4 were not refreshed
    expect(depths(approx.index, local)).toEqual({ '1:0': 2 });
    clock.advance(600);
    expect(approx.expire()).toBe(2);
    expect(approx.size).toBe(0);
  });

  it('keeps slots apart and survives heap compaction', () => {
    const clock = new ManualClock();
    const approx = new ApproximateIndex(new PrefixIndex(), { clock, ttlMs: 50, compactFactor: 1 });
    for (let i = 0; i < 3000; i++) {
      approx.record(i % 3, 0, { local, seq });
      clock.advance(0.01);
    }
    expect(approx.size).toBe(12);
    expect(depths(approx.index, local)).toEqual({ '0:0': 4, '1:0': 4, '2:0': 4 });
    clock.advance(50);
    expect(approx.expire()).toBe(12);
    expect(approx.index.size).toBe(0);
  });

  it('removeWorker forgets the worker at once', () => {
    const clock = new ManualClock();
    const approx = new ApproximateIndex(new PrefixIndex(), { clock });
    approx.record(1, 0, { local, seq });
    approx.record(2, 0, { local, seq });
    approx.removeWorker(1);
    expect(approx.size).toBe(4);
    expect(depths(approx.index, local)).toEqual({ '2:0': 4 });
    clock.advance(200_000);
    expect(approx.expire()).toBe(4);
  });

  it('rejects a non-positive TTL', () => {
    expect(() => new ApproximateIndex(new PrefixIndex(), { clock: new ManualClock(), ttlMs: 0 })).toThrow(/ttlMs/);
  });
});
