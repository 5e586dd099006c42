import { describe, expect, it } from 'vitest';
import { Backoff, seededRng } from '../../src/common/index.js';

describe('Backoff', () => {
  it('doubles from the minimum up to the maximum, each delay in [step/2, step]', () => {
    const b = new Backoff(500, 10_000, seededRng(7));
    const steps = [500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000];
    for (const step of steps) {
      const d = b.next();
      expect(d).toBeGreaterThanOrEqual(step / 2);
      expect(d).toBeLessThanOrEqual(step);
    }
    expect(b.attempts).toBe(steps.length);
  });

  it('draws its jitter from the rng: the extremes of the rng give the extremes of the step', () => {
    expect(new Backoff(400, 400, () => 0).next()).toBe(200);
    expect(new Backoff(400, 400, () => 0.999_999_9).next()).toBe(400);
    // Two clients with different draws wait different times for the same attempt.
    const a = new Backoff(1000, 1000, seededRng(1));
    const b = new Backoff(1000, 1000, seededRng(2));
    expect(a.next()).not.toBe(b.next());
  });

  it('is deterministic for a seed', () => {
    const run = (): number[] => {
      const b = new Backoff(250, 5000, seededRng(42));
      return Array.from({ length: 10 }, () => b.next());
    };
    expect(run()).toEqual(run());
  });

  it('starts from the minimum again after reset, and stays bounded after many failures', () => {
    const b = new Backoff(100, 3000, () => 1);
    for (let i = 0; i < 2000; i++) expect(b.next()).toBeLessThanOrEqual(3000);
    b.reset();
    expect(b.attempts).toBe(0);
    expect(b.next()).toBe(100);
  });

  it('refuses bounds that are not 0 < min <= max', () => {
    expect(() => new Backoff(0, 10, Math.random)).toThrow(RangeError);
    expect(() => new Backoff(20, 10, Math.random)).toThrow(RangeError);
  });
});
