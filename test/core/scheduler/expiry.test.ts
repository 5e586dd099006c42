/**
 * A booking whose request's end is never seen is force-freed `activeRequestExpirySecs` after it started, and
 * whoever hosts the scheduler hears of every such expiry: those the tick frees (`expiredRequests`) and those a
 * later booking's own expiry check frees between two ticks (`expiredBetweenTicks`, the observer told at once).
 * Before, the second kind was dropped silently: no peer replica was told, and no tick reported it.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvScheduler, type SchedulingRequest } from '../../../src/core/index.js';
import { promptHashes } from '../../../src/wasm/index.js';
import { freedRecorder } from '../../helpers/freed-recorder.js';

const BS = 4;
const EXPIRY_S = 60;

function setup(): { s: KvScheduler; clock: ManualClock; freed: string[] } {
  const clock = new ManualClock(0);
  const s = new KvScheduler({
    blockSize: BS,
    clock,
    rng: seededRng(7),
    config: { activeRequestExpirySecs: EXPIRY_S },
  });
  s.addWorker(1, { maxNumBatchedTokens: 1000 });
  const { observer, freed } = freedRecorder();
  s.observe(observer);
  return { s, clock, freed };
}

function req(requestId: string, base: number): SchedulingRequest {
  const tokens = Array.from({ length: 32 }, (_, i) => base + i);
  return { requestId, isl: tokens.length, hashes: promptHashes(tokens, BS) };
}

describe('bookings force-freed on expiry', () => {
  it('by the tick: reported with their ids, the observer told', () => {
    const { s, clock, freed } = setup();
    s.select(req('lost', 100));
    clock.advance(EXPIRY_S * 1000 - 1);
    expect(s.tick().expiredRequests).toEqual([]);
    clock.advance(1);
    expect(s.tick()).toMatchObject({ expiredRequests: ['lost'], expiredBetweenTicks: 0 });
    expect(freed).toEqual(['lost']);
    expect(s.activeRequestCount).toBe(0);
  });

  it("by a later booking's own check between two ticks: the observer told at once, the next tick counts it", () => {
    const { s, clock, freed } = setup();
    s.select(req('lost', 100));
    // No tick for longer than the expiry (a host that ticks rarely, or a stalled loop): the next booking checks.
    clock.advance(EXPIRY_S * 1000 + 30_000);
    s.select(req('next', 900));
    expect(s.activeRequest('lost')).toBeUndefined();
    expect(freed).toEqual(['lost']);
    expect(s.tick()).toMatchObject({ expiredRequests: [], expiredBetweenTicks: 1 });
    // Counted once.
    expect(s.tick()).toMatchObject({ expiredRequests: [], expiredBetweenTicks: 0 });
    expect(s.activeRequestCount).toBe(1);
  });
});
