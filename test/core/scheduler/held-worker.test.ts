/**
 * A worker held (`removeWorker(id, true)`: marked down for a while) is out of routing but keeps its bookings:
 * never eligible nor pinnable, its requests' frees work while it is held, its load is back on its return, and
 * removing it for good drops them (the observer told once). The default removal drops them at once, as before.
 * Its entries in the approximate indexes are kept as its KV events' are, and dropped with it.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvScheduler, type SchedulingRequest } from '../../../src/core/index.js';
import { promptHashes } from '../../../src/wasm/index.js';
import { freedRecorder } from '../../helpers/freed-recorder.js';
import { kvgateErrorOf } from '../../helpers/kvgate-error.js';

const BS = 4;

function setup(): { s: KvScheduler; freed: string[] } {
  const s = new KvScheduler({ blockSize: BS, clock: new ManualClock(0), rng: seededRng(5) });
  s.addWorker(1, { maxNumBatchedTokens: 100 });
  s.addWorker(2, { maxNumBatchedTokens: 100 });
  const { observer, freed } = freedRecorder();
  s.observe(observer);
  return { s, freed };
}

function req(requestId: string, base: number, extra: Partial<SchedulingRequest> = {}): SchedulingRequest {
  const tokens = Array.from({ length: 32 }, (_, i) => base + i);
  return { requestId, isl: tokens.length, hashes: promptHashes(tokens, BS), ...extra };
}

/** Books two requests on worker 1 (pinned). */
function bookTwo(s: KvScheduler): void {
  s.select(req('a', 100, { pinWorkerId: 1 }));
  s.select(req('b', 900, { pinWorkerId: 1 }));
}

describe('a held worker', () => {
  it('is not eligible nor pinnable, and keeps its bookings out of the load listing', () => {
    const { s, freed } = setup();
    bookTwo(s);
    expect(s.removeWorker(1, true)).toBe(true);
    expect(s.hasWorker(1)).toBe(false);
    expect(s.workers().map((w) => w.workerId)).toEqual([2]);
    expect(s.loads().map((l) => l.workerId)).toEqual([2]);
    expect(s.load({ workerId: 1, dpRank: 0 })).toBeUndefined();
    for (let i = 0; i < 20; i++) expect(s.select(req(`q${i}`, 5000 + i * 100), 'query').workerId).toBe(2);
    expect(kvgateErrorOf(() => s.select(req('pin', 7000, { pinWorkerId: 1 }))).code).toBe('KVG_ERR_UNKNOWN_WORKER');
    expect(kvgateErrorOf(() => s.select(req('only', 7000, { allowedWorkerIds: [1] }))).code).toBe('KVG_ERR_NO_WORKERS');
    expect(s.activeRequestCount).toBe(2);
    expect(s.activeRequest('a')).toMatchObject({ workerId: 1, dpRank: 0 });
    expect(freed).toEqual([]);
    // Held once: a second hold finds it not registered.
    expect(s.removeWorker(1, true)).toBe(false);
  });

  it('frees its requests while held (with or without an owner), and its return carries what still runs', () => {
    const { s, freed } = setup();
    bookTwo(s);
    const before = s.load({ workerId: 1, dpRank: 0 })!;
    expect(before.activeRequests).toBe(2);
    s.removeWorker(1, true);
    expect(s.free('a', { workerId: 1, dpRank: 0 })).toBe(true);
    expect(s.free('a')).toBe(false);
    expect(freed).toEqual(['a']);
    s.addWorker(1, { maxNumBatchedTokens: 100 });
    const back = s.load({ workerId: 1, dpRank: 0 })!;
    expect(back.activeRequests).toBe(1);
    expect(back.activePrefillTokens).toBe(32);
    expect(back.activeDecodeBlocks).toBe(8);
    expect(s.free('b')).toBe(true);
    expect(s.load({ workerId: 1, dpRank: 0 })).toEqual({
      activeRequests: 0,
      activePrefillTokens: 0,
      activeDecodeBlocks: 0,
    });
    expect(freed).toEqual(['a', 'b']);
  });

  it('loses its bookings when removed for good, the observer told once; the default removal drops them at once', () => {
    const { s, freed } = setup();
    bookTwo(s);
    s.removeWorker(1, true);
    expect(s.removeWorker(1)).toBe(true);
    expect(s.activeRequestCount).toBe(0);
    expect(freed.sort()).toEqual(['a', 'b']);
    expect(s.free('b')).toBe(false);
    expect(s.removeWorker(1)).toBe(false);
    // Back as a new worker: nothing of the old requests.
    s.addWorker(1);
    expect(s.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(0);

    s.select(req('c', 300, { pinWorkerId: 2 }));
    expect(s.removeWorker(2)).toBe(true);
    expect(s.free('c')).toBe(false);
    expect(freed).toContain('c');
  });

  // Approximate mode's index, and a KV-events router's event fallback and predicted index: the router's own record
  // of what it routed there, kept as its KV events' entries are (its engine keeps its cache through a flap).
  it.each([
    { what: 'approximate mode', opts: { config: { useKvEvents: false } } },
    { what: 'the event fallback', opts: { eventFallback: () => true } },
    { what: 'the predicted index', opts: { config: { routerPredictedTtlSecs: 60 } } },
  ])('keeps its entries in $what for its return, and loses them when removed for good', ({ opts }) => {
    const s = new KvScheduler({ blockSize: BS, clock: new ManualClock(0), rng: seededRng(5), ...opts });
    s.addWorker(1);
    s.addWorker(2);
    s.select(req('a', 100, { pinWorkerId: 1 }));
    s.free('a');
    const routed = (): { workerId: number; overlapBlocks: number } => s.select(req('q', 100), 'query');
    expect(routed()).toMatchObject({ workerId: 1, overlapBlocks: 8 });
    s.removeWorker(1, true);
    s.addWorker(1);
    expect(routed()).toMatchObject({ workerId: 1, overlapBlocks: 8 });
    s.removeWorker(1, true);
    s.removeWorker(1);
    s.addWorker(1);
    expect(routed().overlapBlocks).toBe(0);
  });

  it('drops the ranks it no longer advertises on its return, with their requests', () => {
    const s = new KvScheduler({ blockSize: BS, clock: new ManualClock(0), rng: seededRng(5) });
    s.addWorker(1, { dataParallelSize: 2 });
    s.select(req('r0', 100, { pinWorkerId: 1, pinDpRank: 0 }));
    s.select(req('r1', 500, { pinWorkerId: 1, pinDpRank: 1 }));
    s.removeWorker(1, true);
    s.addWorker(1, { dataParallelSize: 1 });
    expect(s.activeRequest('r0')).toBeDefined();
    expect(s.activeRequest('r1')).toBeUndefined();
    expect(s.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(1);
  });
});
