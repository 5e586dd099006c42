import { describe, expect, it } from 'vitest';
import { RequestTracker } from '../../../src/core/disagg/index.js';
import { ManualClock } from '../../../src/common/index.js';

describe('RequestTracker', () => {
  it('phase permit: the next phase waits until the previous permit is released', async () => {
    const tracker = new RequestTracker(new ManualClock());
    const prefill = await tracker.setPhase('prefill');
    let decodeStarted = false;
    const decode = tracker.setPhase('decode').then((p) => {
      decodeStarted = true;
      return p;
    });
    await Promise.resolve();
    await Promise.resolve();
    expect(decodeStarted).toBe(false);
    expect(tracker.phase).toBe('prefill');
    tracker.recordWorker({ workerId: 5, dpRank: 1 }); // attributed to the prefill slot while the permit is held
    prefill.release();
    prefill.release(); // idempotent
    const permit = await decode;
    expect(decodeStarted).toBe(true);
    expect(tracker.phase).toBe('decode');
    tracker.recordWorker({ workerId: 9, dpRank: 0 });
    expect(tracker.workers()).toEqual({ prefillWorkerId: 5, prefillDpRank: 1, decodeWorkerId: 9, decodeDpRank: 0 });
    permit.release();
  });

  it('aggregated attribution fills both slots; slots are write-once', () => {
    const tracker = new RequestTracker(new ManualClock());
    tracker.recordWorker({ workerId: 3, dpRank: 0 });
    tracker.recordWorker({ workerId: 4, dpRank: 0 });
    expect(tracker.workers()).toEqual({ prefillWorkerId: 3, prefillDpRank: 0, decodeWorkerId: 3, decodeDpRank: 0 });
    expect(tracker.conflicts.length).toBe(2);
  });

  it('timestamps are write-once and derive TTFT and the KV transfer estimate', async () => {
    const clock = new ManualClock(100);
    const tracker = new RequestTracker(clock);
    clock.advance(10);
    tracker.recordPrefillStart();
    clock.advance(20);
    tracker.recordPrefillComplete();
    (await tracker.setPhase('decode')).release();
    clock.advance(5);
    tracker.recordFirstToken();
    clock.advance(5);
    tracker.recordFirstToken();
    expect(tracker.ttftMs()).toBe(35);
    expect(tracker.kvTransferEstimatedMs()).toBe(5);
    expect(tracker.times.prefillStart).toBe(110);
  });
});
