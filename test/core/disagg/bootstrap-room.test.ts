import { describe, expect, it } from 'vitest';
import { computeBootstrapRoom, I64_MAX, randomRoomSeed } from '../../../src/core/disagg/index.js';
import { seededRng } from '../../../src/common/index.js';

describe('computeBootstrapRoom', () => {
  it('spec vectors and fall-back cases', () => {
    expect(computeBootstrapRoom(undefined, undefined, 12345n)).toBe(12345n);
    expect(computeBootstrapRoom(3, undefined, 12345n)).toBe(12345n);
    expect(computeBootstrapRoom(undefined, 8, 12345n)).toBe(12345n);
    expect(computeBootstrapRoom(0, 0, 12345n)).toBe(12345n);
    expect(computeBootstrapRoom(7, 48, 123456789n)).toBe(5925925879n);
    expect(computeBootstrapRoom(3, 8, I64_MAX)).toBe(9223372036854775803n);
  });

  it('sweep: every size and rank, r = i64::MAX and random r: room % size == rank, room <= i64::MAX, deterministic', () => {
    const rng = seededRng(2026);
    const rs = [I64_MAX, 0n, 1n, I64_MAX - 1n, ...Array.from({ length: 20 }, () => randomRoomSeed(rng))];
    for (const size of [3, 5, 6, 7, 9, 16, 32, 48, 49, 64, 128]) {
      for (let rank = 0; rank < size; rank++) {
        for (const r of rs) {
          const room = computeBootstrapRoom(rank, size, r);
          expect(room % BigInt(size)).toBe(BigInt(rank));
          expect(room >= 0n && room <= I64_MAX).toBe(true);
          expect(computeBootstrapRoom(rank, size, r)).toBe(room);
        }
      }
    }
  });

  it('random seeds are within [0, i64::MAX]; out-of-range inputs are typed errors', () => {
    const rng = seededRng(1);
    for (let i = 0; i < 1000; i++) {
      const r = randomRoomSeed(rng);
      expect(r >= 0n && r <= I64_MAX).toBe(true);
    }
    expect(() => computeBootstrapRoom(1, 4, -1n)).toThrow(/i64::MAX/);
    expect(() => computeBootstrapRoom(4, 4, 1n)).toThrow(/not in/);
  });
});
