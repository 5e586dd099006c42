/**
 * A request without `nvext` and without routing headers gets one shared,
 * read-only set of hints, equal to what the full path gives it; any hint
 * header still goes the full path (issue 18, round 2: fewer objects per
 * request).
 */
import { describe, expect, it } from 'vitest';
import { isKvgateError } from '../../src/errors/index.js';
import { parseRoutingHints } from '../../src/frontend/hints.js';
import type { WorkerConfig } from '../../src/config/index.js';

const workers = [{ id: 1 }, { id: 2 }] as unknown as WorkerConfig[];

describe('parseRoutingHints', () => {
  it("no nvext and no routing header: the same shared answer every time, equal to the full path's", () => {
    const a = parseRoutingHints(undefined, { 'content-type': 'application/json' }, workers);
    const b = parseRoutingHints(undefined, {}, workers);
    expect(a).toBe(b);
    expect(Object.isFrozen(a.hints)).toBe(true);
    // The full path, for an empty nvext: the same hints.
    expect(parseRoutingHints({}, {}, workers)).toEqual(a);
    expect(a.queryOnly).toBe(false);
    expect(a.tokenData).toBeUndefined();
  });

  it('a routing header alone still takes the full path (a session, a pin, a bad pin)', () => {
    expect(parseRoutingHints(undefined, { 'x-session-id': 's1' }, workers).hints.session).toEqual({ id: 's1' });
    expect(parseRoutingHints(undefined, { 'x-worker-instance-id': '2' }, workers).hints.backendInstanceId).toBe(2);
    let err: unknown;
    try {
      parseRoutingHints(undefined, { 'x-worker-instance-id': '9' }, workers);
    } catch (e) {
      err = e;
    }
    expect(isKvgateError(err, 'KVG_ERR_UNKNOWN_WORKER')).toBe(true);
  });

  it('router_config_override: the values that would book a request below its load are dropped, the rest kept', () => {
    // track_prefill_tokens: false booked the prompt's prefill as 0 tokens, assume_kv_reuse: true its blocks as shared:
    // a client's load hidden from the overload thresholds and the queue (before: both kept as sent).
    const o = (raw: Record<string, unknown>) =>
      parseRoutingHints({ router_config_override: raw }, {}, workers).hints.routerConfigOverride;
    expect(o({ track_prefill_tokens: false, assume_kv_reuse: true, router_temperature: 0.5 })).toEqual({
      routerTemperature: 0.5,
    });
    expect(o({ track_prefill_tokens: true, assume_kv_reuse: false })).toEqual({
      trackPrefillTokens: true,
      assumeKvReuse: false,
    });
    expect(Object.isFrozen(o({ trackPrefillTokens: false }))).toBe(true);
  });
});
