/**
 * The concurrency slots' request deadlines: one timer for every slot held
 * (all share the timeout, so the oldest deadline is the next), each request
 * still aborted with KVG_ERR_REQUEST_TIMEOUT at its own deadline, a released
 * one never (issue 18, round 2: no timer per request); and the per-client
 * bound inside them (`limits.max_concurrent_requests_per_client`): one client
 * at its bound is refused while others are admitted, each episode logged once.
 */
import type { Logger } from 'pino';
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

describe('ConcurrencySlots per client', () => {
  /** A logger keeping the message of each warn and info line. */
  function lines(): { logger: Logger; got: string[] } {
    const got: string[] = [];
    const line = (_fields: unknown, msg: string): void => void got.push(msg);
    return { logger: { warn: line, info: line } as unknown as Logger, got };
  }

  it('a client at its bound is refused with its own code while another is admitted; one release admits it again', () => {
    const { logger, got } = lines();
    const slots = new ConcurrencySlots(10, 60_000, () => undefined, { logger });
    slots.perClient.max = 2;
    const held = [new AbortController(), new AbortController()];
    for (const c of held) slots.take(c, '203.0.113.7');
    for (let i = 0; i < 3; i++) {
      let refused: unknown;
      try {
        slots.take(new AbortController(), '203.0.113.7');
      } catch (err) {
        refused = err;
      }
      expect(isKvgateError(refused, 'KVG_ERR_TOO_MANY_CLIENT_REQUESTS')).toBe(true);
    }
    // Refusals take no slot; another client, and a request counted as nobody's, are admitted.
    expect(slots.size).toBe(2);
    slots.take(new AbortController(), '198.51.100.1');
    slots.take(new AbortController());
    expect(slots.size).toBe(4);
    // Three refusals, one line; the release that ends the episode, one more.
    expect(got).toHaveLength(1);
    expect(got[0]).toMatch(/max_concurrent_requests_per_client/);
    slots.release(held[0]!);
    expect(got).toHaveLength(2);
    expect(got[1]).toMatch(/admitted/);
    slots.take(new AbortController(), '203.0.113.7');
    expect(slots.perClient.heldBy('203.0.113.7')).toBe(2);
    slots.release(held[1]!);
    expect(slots.perClient.heldBy('203.0.113.7')).toBe(1);
    expect(got).toHaveLength(2);
  });

  it('counts the clients at their bound as they reach and leave it, and recounts when a reload changes the bound', () => {
    const reported: number[] = [];
    const slots = new ConcurrencySlots(10, 60_000, () => undefined, { atBound: (n) => reported.push(n) });
    const take = (client: string): AbortController => {
      const c = new AbortController();
      slots.take(c, client);
      return c;
    };
    // No bound: nobody is at it.
    const a1 = take('a');
    expect(slots.perClient.atBound).toBe(0);
    slots.perClient.max = 2;
    const a2 = take('a');
    const b1 = take('b');
    expect(slots.perClient.atBound).toBe(1);
    const b2 = take('b');
    expect(slots.perClient.atBound).toBe(2);
    slots.release(a2);
    expect(slots.perClient.atBound).toBe(1);
    // Lowered to 1: every client holding one or more is at it; raised: none is; off: none.
    slots.perClient.max = 1;
    expect(slots.perClient.atBound).toBe(2);
    slots.release(b2);
    slots.release(b1);
    expect(slots.perClient.atBound).toBe(1);
    slots.perClient.max = 5;
    expect(slots.perClient.atBound).toBe(0);
    slots.perClient.max = 1;
    slots.perClient.max = 0;
    slots.release(a1);
    // Each change reported once, none repeated.
    expect(reported).toEqual([1, 2, 1, 2, 1, 0, 1, 0]);
  });

  it('the gateway-wide bound still applies to a client below its own, and a refusal there counts nothing for it', () => {
    const slots = new ConcurrencySlots(1, 60_000, () => undefined);
    slots.perClient.max = 5;
    slots.take(new AbortController(), '198.51.100.1');
    expect(() => slots.take(new AbortController(), '203.0.113.7')).toThrow(/1 requests are in flight/);
    expect(slots.perClient.heldBy('203.0.113.7')).toBe(0);
  });

  it('0 is no bound', () => {
    const slots = new ConcurrencySlots(100, 60_000, () => undefined);
    for (let i = 0; i < 50; i++) slots.take(new AbortController(), '203.0.113.7');
    expect(slots.size).toBe(50);
  });
});
