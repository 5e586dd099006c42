/**
 * A leg's progress deadlines keep one timer per deadline kind: output on a
 * running stream moves the idle deadline without a timer of its own, and the
 * deadline still expires on time after the last output (issue 18, round 2:
 * leg timers not recreated on every read).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { LegTimers } from '../../src/engines/leg-timers.js';
import type { KvgateError } from '../../src/errors/index.js';
import { until } from '../helpers/until.js';

const ctx = { worker: 'http://127.0.0.1:1', path: '/v1/completions' };

afterEach(() => {
  vi.restoreAllMocks();
});

describe('LegTimers', () => {
  it('a leg arms one timer: the first output and a thousand reads after it arm none', () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const timers = new LegTimers(ctx, 60_000, 30_000, () => undefined);
    timers.progress(); // first output: the first-byte deadline is met, the idle one starts
    const armed = spy.mock.calls.length;
    expect(armed).toBe(1);
    for (let i = 0; i < 1000; i++) timers.progress();
    expect(spy.mock.calls.length).toBe(armed);
    timers.stop();
  });

  it('the idle deadline expires that long after the last output, not after the first', async () => {
    let expired: KvgateError | undefined;
    const timers = new LegTimers(ctx, undefined, 80, (err) => (expired = err));
    const start = performance.now();
    let last = start;
    // Output every 10 ms for 200 ms: longer than the idle deadline, so only a moved deadline survives it.
    while (performance.now() - start < 200) {
      await new Promise((r) => setTimeout(r, 10));
      expect(expired).toBeUndefined();
      timers.progress();
      last = performance.now();
    }
    await until(() => expired !== undefined, 'the idle deadline');
    expect(performance.now() - last).toBeGreaterThanOrEqual(79);
    expect(expired!.code).toBe('KVG_ERR_ENGINE_STREAM_IDLE_TIMEOUT');
    expect(expired!.detail).toMatchObject({ timeoutMs: 80, migratable: true });
  });

  // Shorter and longer than the idle deadline: the first timer sleeps for the shorter one, the deadline stays its own.
  for (const [firstByteMs, idleMs] of [
    [50, 1_000],
    [120, 40],
  ] as const) {
    it(`a first-byte deadline of ${firstByteMs} ms (idle ${idleMs} ms) expires at its own time, as a first-byte timeout`, async () => {
      let expired: KvgateError | undefined;
      const start = performance.now();
      new LegTimers(ctx, firstByteMs, idleMs, (err) => (expired = err));
      await until(() => expired !== undefined, 'the first-byte deadline');
      expect(performance.now() - start).toBeGreaterThanOrEqual(firstByteMs - 1);
      expect(expired!.code).toBe('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT');
      expect(expired!.detail).toMatchObject({ timeoutMs: firstByteMs });
    });
  }
});
