/**
 * `EndpointPicker` with two listed pods on one endpoint (an IP reused while the old pod is still listed;
 * `EndpointOwners`, src/fleet): the endpoint handed back stays routable, its booking on it kept, booked again
 * with its hints.
 */
import { describe, expect, it } from 'vitest';
import type { PoolEndpoint } from '../../src/fleet/index.js';
import { EndpointPicker } from '../../src/picker/endpoint-picker.js';
import { promptHashes } from '../../src/wasm/index.js';
import { pickerOf } from '../helpers/endpoint-picker.js';

const X = '10.0.0.1:8000';
const Y = '10.0.0.2:8000';
const OLD: PoolEndpoint = { name: 'b-old', endpoint: X, created: '2026-01-01T00:00:00Z' };
const NEW: PoolEndpoint = { name: 'a-new', endpoint: X, created: '2026-01-01T00:10:00Z' };
const OTHER: PoolEndpoint = { name: 'c', endpoint: Y, created: '2026-01-01T00:00:00Z' };

/** A picker over model `m` (approximate mode: KV events off), three endpoints in its answers. */
const pickerOver = (): EndpointPicker =>
  pickerOf({ router: { use_kv_events: false }, level: 'silent', fallbacks: 3 }).picker;

describe('EndpointPicker: an endpoint handed over between two listed pods', () => {
  it('stays routable, with its request in flight booked on its new owner once', async () => {
    const picker = pickerOver();
    const ids = Uint32Array.from({ length: 32 }, (_, i) => i + 1);
    const request = (requestId: string, subset?: string[]) => ({
      requestId,
      tokenIds: ids,
      hashes: promptHashes(ids, 16),
      hints: { annotations: [] },
      subset,
    });
    try {
      expect(picker.setEndpoints([OLD, OTHER])).toMatchObject({ joined: [X, Y], handedOver: [] });
      expect(picker.pick(request('r1', [X]))).toEqual([X]);
      expect(picker.setEndpoints([OLD, NEW, OTHER])).toEqual({
        joined: [X],
        left: [X],
        handedOver: [X],
        shadowed: ['b-old'],
      });
      // One worker per endpoint: X is named once.
      expect(picker.pick(request('r2')).sort()).toEqual([X, Y]);
      picker.end('r2');
      expect(picker.setEndpoints([NEW, OTHER])).toEqual({ joined: [], left: [], handedOver: [], shadowed: [] });
      expect(picker.pick(request('r3', [X]))).toEqual([X]);
      expect(picker.bookings()).toEqual({ [X]: 2 });
      picker.end('r1');
      picker.end('r3');
      expect(picker.footprint()).toMatchObject({ endpoints: 2, ids: 2, names: 2, routerWorkers: 2, bookings: 0 });
    } finally {
      await picker.close();
    }
  });

  it("keeps its request's hints across the handover and a fallback: an override not to count prompt load holds", async () => {
    const picker = pickerOver();
    const ids = Uint32Array.from({ length: 64 }, (_, i) => i + 1);
    const hints = { annotations: [], routerConfigOverride: { trackPrefillTokens: false }, expectedOutputTokens: 300 };
    const idle = { activeRequests: 0, activePrefillTokens: 0, activeDecodeBlocks: 0 };
    try {
      picker.setEndpoints([OLD, OTHER]);
      picker.pick({ requestId: 'r1', tokenIds: ids, hashes: promptHashes(ids, 16), hints, subset: [X] });
      const booked = { activeRequests: 1, activePrefillTokens: 0, activeDecodeBlocks: 4 };
      expect(picker.loads()).toEqual({ [X]: booked, [Y]: idle });
      picker.setEndpoints([OLD, NEW, OTHER]);
      expect(picker.loads()).toEqual({ [X]: booked, [Y]: idle });
      picker.served('r1', Y);
      expect(picker.loads()).toEqual({ [X]: idle, [Y]: booked });
      picker.end('r1');
      expect(picker.loads()).toEqual({ [X]: idle, [Y]: idle });
    } finally {
      await picker.close();
    }
  });
});
