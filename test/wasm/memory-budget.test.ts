import { describe, expect, it } from 'vitest';
import { PrefixIndex, sequenceHashes, type EvictionReport } from '../../src/wasm/index.js';
import { seededRng } from '../../src/common/index.js';

function randomHashes(rng: () => number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++)
    out[i] = (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
  return out;
}

describe('PrefixIndex memory budget', () => {
  it('never holds more than its budget, evicts the least recently matched blocks, one episode', () => {
    const rng = seededRng(11);
    const index = new PrefixIndex();
    const budget = 4 * 2 ** 20;
    const reports: EvictionReport[] = [];
    index.setMemoryBudget(budget, (r) => reports.push(r));
    // A system prompt every slot holds, matched after every store: it must survive.
    const hot = randomHashes(rng, 64);
    for (let s = 0; s < 96; s++) index.applyStored(s, 0, null, sequenceHashes(hot), hot);
    // A cold document stored once and never matched: it goes first.
    const cold = randomHashes(rng, 64);
    index.applyStored(5, 0, null, sequenceHashes(cold), cold);
    let peak = 0;
    for (let i = 0; i < 3000; i++) {
      index.applyStored(i % 96, 0, null, randomHashes(rng, 32), randomHashes(rng, 32));
      peak = Math.max(peak, index.bytes);
      expect(index.findMatches(hot).count).toBeGreaterThan(0);
    }
    expect(reports.length).toBeGreaterThan(0);
    expect(peak).toBeLessThanOrEqual(budget);
    expect(reports.every((r) => r.bytesAfter <= budget * 0.9 && r.entries > 0)).toBe(true);
    expect(reports.filter((r) => r.episodeStart)).toHaveLength(1);
    expect(index.evictedEntries).toBe(reports.reduce((a, r) => a + r.entries, 0));
    const hit = index.findMatches(hot);
    expect(hit.count).toBe(96);
    expect(Math.min(...hit.depths)).toBe(64);
    expect(index.findMatches(cold).count).toBe(0);
    expect(index.blockCount(5)).toBeLessThan(64 + (3000 / 96) * 32);
    index.dispose();
  });

  it('a new episode starts once the index fell under three quarters of its budget', () => {
    const rng = seededRng(12);
    const index = new PrefixIndex();
    const reports: EvictionReport[] = [];
    index.setMemoryBudget(2 * 2 ** 20, (r) => reports.push(r));
    const fill = (): void => {
      for (let i = 0; i < 1500; i++) index.applyStored(i % 8, 0, null, randomHashes(rng, 32), randomHashes(rng, 32));
    };
    fill();
    for (let s = 0; s < 8; s++) index.clearSlot(s, 0);
    index.setMemoryBudget(4 * 2 ** 20, (r) => reports.push(r)); // under 3/4 of it now
    fill();
    fill();
    expect(reports.filter((r) => r.episodeStart).length).toBe(2);
    index.dispose();
  });

  it('shared by several indexes bounds them together, trimming the largest to a common level', () => {
    const rng = seededRng(13);
    const budget = 4 * 2 ** 20;
    const reports: EvictionReport[] = [];
    // The router's index, a small group beside it, and a group an engine floods.
    const primary = new PrefixIndex();
    const small = new PrefixIndex();
    const flooded = new PrefixIndex();
    primary.setMemoryBudget(budget, (r) => reports.push(r));
    small.shareMemoryBudget(primary);
    flooded.shareMemoryBudget(small);
    for (let i = 0; primary.bytes < budget * 0.6; i++)
      primary.applyStored(i % 32, 0, null, randomHashes(rng, 32), randomHashes(rng, 32));
    const doc = randomHashes(rng, 16);
    small.applyStored(1, 0, null, sequenceHashes(doc), doc);
    expect(reports).toEqual([]);
    let peak = 0;
    for (let i = 0; i < 3000; i++) {
      flooded.applyStored(i % 32, 0, null, randomHashes(rng, 32), randomHashes(rng, 32));
      peak = Math.max(peak, primary.bytes + small.bytes + flooded.bytes);
    }
    expect(peak).toBeLessThanOrEqual(budget);
    expect(reports.filter((r) => r.episodeStart)).toHaveLength(1);
    expect(reports.reduce((a, r) => a + r.entries, 0)).toBe(primary.evictedEntries + flooded.evictedEntries);
    // The index under the common level kept all it held; the two large ones share the rest, evenly at worst.
    expect(small.evictedEntries).toBe(0);
    expect(small.findMatches(doc).depths[0]).toBe(16);
    expect(primary.evictedEntries).toBeGreaterThan(0);
    expect(primary.bytes).toBeGreaterThan(budget * 0.35);
    expect(flooded.bytes).toBeLessThan(budget * 0.55);
    expect(primary.pooledBytes).toBe(primary.bytes + small.bytes + flooded.bytes);
    // A disposed index leaves the budget; the others still share it.
    flooded.dispose();
    expect(small.pooledBytes).toBe(primary.bytes + small.bytes);
    primary.dispose();
    small.dispose();
  });

  it('refuses a budget that is not a byte count', () => {
    const index = new PrefixIndex();
    expect(() => index.setMemoryBudget(-1)).toThrow(/byte count/);
    expect(() => index.setMemoryBudget(1.5)).toThrow(/byte count/);
    index.dispose();
  });
});
