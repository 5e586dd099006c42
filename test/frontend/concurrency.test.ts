/**
 * The concurrency slots' request deadlines: one timer for every slot held
 * (all share the timeout, so the oldest deadline is the next), each request
 * still aborted with KVG_ERR_REQUEST_TIMEOUT at its own deadline, a released
 * one never (issue 18, round 2: no timer per request).
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { isKvgateError } from '../../src/errors/index.js';
import { ConcurrencySlots } from '../../src/frontend/concurrency.js';
import { until } from '../helpers/until.js';

afterEach(() => {
  vi.restoreAllMocks();
});

describe('ConcurrencySlots', () => {
  it('a thousand slots held arm one timer', () => {
    const spy = vi.spyOn(globalThis, 'setTimeout');
    const slots = new ConcurrencySlots(10_000, 60_000, () => undefined);
    const controllers = Array.from({ length: 1000 }, () => new AbortController());
    for (const c of controllers) slots.take(c);
    expect(spy.mock.calls.length).toBe(1);
    for (const c of controllers) slots.release(c);
    expect(slots.size).toBe(0);
  });

  it('each request is aborted at its own deadline; a released one is not', async () => {
    const slots = new ConcurrencySlots(10, 80, () => undefined);
    const first = new AbortController();
    const released = new AbortController();
    slots.take(first);
    slots.take(released);
    const firstAt = performance.now();
    await new Promise((r) => setTimeout(r, 40)); // the second request starts later: the stimulus, not a synchronisation
    const second = new AbortController();
    slots.take(second);
    const secondAt = performance.now();
    slots.release(released);
    await until(() => first.signal.aborted, 'the first deadline');
    expect(performance.now() - firstAt).toBeGreaterThanOrEqual(79);
    expect(second.signal.aborted).toBe(false);
    expect(isKvgateError(first.signal.reason, 'KVG_ERR_REQUEST_TIMEOUT')).toBe(true);
    await until(() => second.signal.aborted, 'the second deadline');
    expect(performance.now() - secondAt).toBeGreaterThanOrEqual(79);
    expect(released.signal.aborted).toBe(false);
    // Aborted requests hold their slot until they finish.
    expect(slots.size).toBe(2);
    slots.release(first);
    slots.release(second);
    expect(slots.size).toBe(0);
  });
});
