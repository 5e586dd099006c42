/**
 * The load-imbalance chart's data: busiest engine / mean over a sliding window, only while the fleet carries its
 * load. In the drain after the last arrival a few requests left on one engine made the ratio the engine count (8 on
 * 8 engines), and that spike set the chart's y axis.
 */
import { describe, expect, it } from 'vitest';
import { windowedImbalance, type PoolRun } from '../../src/replay/index.js';

const BUCKET_MS = 100;
const ENGINES = 8;

/** 200 loaded buckets (engine 0 at 12 in flight, the others at 10), then a 40-bucket drain: 4 requests on engine 0. */
function overloadedThenDrain(): PoolRun['buckets'] {
  const loaded = Array.from({ length: 200 }, (_, i) => ({
    startMs: i * BUCKET_MS,
    perEngine: Array.from({ length: ENGINES }, (_, e) => (e === 0 ? 12 : 10)),
  }));
  const drain = Array.from({ length: 40 }, (_, i) => ({
    startMs: (200 + i) * BUCKET_MS,
    perEngine: Array.from({ length: ENGINES }, (_, e) => (e === 0 ? 4 : 0)),
  }));
  return [...loaded, ...drain];
}

describe('load imbalance over time (chart data)', () => {
  it('leaves the drain out: no point reaches the engine count, the loaded span keeps its ratio', () => {
    const points = windowedImbalance(overloadedThenDrain(), BUCKET_MS);
    expect(points).toHaveLength(240);
    const shown = points.filter(([, v]) => !Number.isNaN(v));
    // Before, the drain's windows (4 in flight: half a request per engine) were drawn at up to 8; now the last
    // windows shown still hold mostly loaded buckets.
    expect(Math.max(...shown.map(([, v]) => v))).toBeLessThan(2);
    for (const [, v] of points.slice(210)) expect(v).toBeNaN();
    for (const [, v] of points.slice(0, 200)) expect(v).toBeCloseTo(12 / (82 / 8), 9);
    expect(points[0]![0]).toBe(0.1);
  });

  it("a light run keeps its loaded span: the threshold follows the run's own load, at least half a request", () => {
    const light = Array.from({ length: 50 }, (_, i) => ({
      startMs: i * BUCKET_MS,
      perEngine: Array.from({ length: ENGINES }, (_, e) => (e < 4 ? 1 : 0.5)),
    }));
    const points = windowedImbalance(light, BUCKET_MS);
    expect(points.every(([, v]) => Math.abs(v - 1 / 0.75) < 1e-9)).toBe(true);
    expect(windowedImbalance([], BUCKET_MS)).toEqual([]);
  });
});
