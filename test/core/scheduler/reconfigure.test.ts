/**
 * issue 16 (hot reconfiguration): the scheduler takes new knobs at runtime for
 * what it schedules next (here the queue threshold, read by the filter and
 * admission; router_track_output_blocks, read by other replicas' bookings too), keeps its bookkeeping, and
 * refuses a structural knob.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvScheduler, type ScheduleOutcome } from '../../../src/core/index.js';
import { promptHashes } from '../../../src/wasm/index.js';

const BS = 4;

function schedule(s: KvScheduler, requestId: string, base: number): ScheduleOutcome {
  const tokens = Array.from({ length: 120 }, (_, i) => base + i);
  return s.schedule({ requestId, isl: tokens.length, hashes: promptHashes(tokens, BS) });
}

describe('KvScheduler.reconfigure', () => {
  it('applies new knobs to the queue at once and keeps the requests in flight', async () => {
    const s = new KvScheduler({
      blockSize: BS,
      config: { routerQueueThreshold: 1.0, routerTemperature: 0 },
      clock: new ManualClock(),
      rng: seededRng(1),
    });
    for (const w of [1, 2]) s.addWorker(w, { maxNumBatchedTokens: 100 });
    expect(schedule(s, 'a', 0).status).toBe('routed');
    expect(schedule(s, 'b', 1000).status).toBe('routed');
    const parked = schedule(s, 'c', 2000);
    expect(parked.status).toBe('queued');
    s.reconfigure({ routerQueueThreshold: null, routerTemperature: 0.5 });
    expect(s.config.routerTemperature).toBe(0.5);
    if (parked.status !== 'queued') throw new Error('unreachable');
    expect((await parked.ticket.admitted).status).toBe('routed');
    expect(s.activeRequestCount).toBe(3);
  });

  it('refuses a structural knob, naming it, and keeps the knobs in force', () => {
    const s = new KvScheduler({ blockSize: BS, config: { routerTemperature: 0.1 } });
    expect(() => s.reconfigure({ useKvEvents: false, routerTemperature: 0.9 })).toThrow(
      /useKvEvents cannot change on a running router/,
    );
    expect(() => s.reconfigure({ routerTemperature: -1 })).toThrow(/router_temperature|routerTemperature/);
    expect(s.config.routerTemperature).toBe(0.1);
  });

  it("applies router_track_output_blocks to other replicas' bookings too, both ways", () => {
    const s = new KvScheduler({ blockSize: BS, config: { routerTrackOutputBlocks: false } });
    s.addWorker(1);
    const booking = (requestId: string) => ({
      requestId,
      workerId: 1,
      dpRank: 0,
      seq: null,
      privateBlocks: 1,
      prefillTokens: 4,
      expectedOutputTokens: undefined,
      prefillCompleted: true,
      outputBlocks: 0,
      decay: undefined,
    });
    const blocks = (): number => s.load({ workerId: 1, dpRank: 0 })!.activeDecodeBlocks;
    s.peers.add('b', booking('r1'));
    const before = blocks();
    s.reconfigure({ routerTrackOutputBlocks: true });
    expect(s.peers.outputBlocks('b', 'r1', 3, undefined)).toBe('applied');
    expect(blocks()).toBe(before + 3);
    s.reconfigure({ routerTrackOutputBlocks: false });
    expect(s.peers.outputBlocks('b', 'r1', 5, undefined)).toBe('duplicate');
    expect(blocks()).toBe(before + 3);
  });
});
