/**
 * A replica converges after a NATS outage (replica sync, faults): the
 * snapshot a peer answers with decodes even while a sticky session is live,
 * and a gap in a peer's batches is asked for again on every heartbeat until a
 * snapshot fills it, however many fetches fail.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { KvScheduler, type SyncedBooking } from '../../src/core/index.js';
import { SyncChannel, type ChannelHost } from '../../src/replicas/channel.js';
import { decodeBatch, decodeSnapshot, encodeBatch, encodeSnapshot, type SyncOp } from '../../src/replicas/protocol.js';
import { StickySessions } from '../../src/routing/sticky-sessions.js';

const KEY = 'mock-model/aggregated';

function scheduler(): KvScheduler {
  const s = new KvScheduler({ blockSize: 16, clock: new ManualClock(0), rng: seededRng(1) });
  s.addWorker(1);
  return s;
}

function booking(requestId: string): SyncedBooking {
  return {
    requestId,
    workerId: 1,
    dpRank: 0,
    seq: null,
    privateBlocks: 2,
    prefillTokens: 32,
    expectedOutputTokens: undefined,
    prefillCompleted: false,
    outputBlocks: 0,
    decay: undefined,
  };
}

/** A channel on a real scheduler whose host records every snapshot it is asked to fetch. */
function channel(): { ch: SyncChannel; kv: KvScheduler; asked: string[] } {
  const asked: string[] = [];
  const host: ChannelHost = {
    admit: () => true,
    schedule: () => {},
    requestSnapshot: (replica) => asked.push(replica),
    applied: () => {},
  };
  const kv = scheduler();
  return { ch: new SyncChannel(KEY, kv, host), kv, asked };
}

const batch = (seq: number, ops: SyncOp[]) => ({ routerId: 'b', incarnation: 'i1', seq, sentAt: 0, ops });

describe('replica resync after an outage', () => {
  it("a live session's remaining TTL on a fractional clock encodes as whole ms: the snapshot and the batch decode", () => {
    // The system clock is performance.now(): fractional milliseconds.
    const clock = new ManualClock(1000.25);
    const sessions = new StickySessions(clock, 60_000);
    sessions.bind('conversation-42', { workerId: 2, dpRank: 0 });
    clock.advance(12.5);
    const live = sessions.liveBindings();
    expect(live[0]!.ttlMs).toBe(59_987.5);

    const s = decodeSnapshot(
      encodeSnapshot({ routerId: 'b', incarnation: 'i1', seq: 3, bookings: [booking('r1')], sessions: live }),
    );
    expect(s.sessions).toEqual([{ session: 'conversation-42', workerId: 2, dpRank: 0, ttlMs: 59_988 }]);
    expect(s.bookings.map((x) => x.requestId)).toEqual(['r1']);
    const b = decodeBatch(
      encodeBatch({ ...batch(4, []), ops: [{ kind: 'session', binding: { ...live[0]!, ttlMs: 0.5 } }] }),
    );
    expect(b.ops).toEqual([
      { kind: 'session', binding: { session: 'conversation-42', workerId: 2, dpRank: 0, ttlMs: 1 } },
    ]);
  });

  it('a gap whose snapshot fetch failed is asked for again on every heartbeat until a snapshot fills it', () => {
    const { ch, kv, asked } = channel();
    ch.applyBatch(batch(1, [{ kind: 'added', booking: booking('r1') }]));
    expect(kv.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(1);
    // The outage: batch 2 (r1 freed) never arrives; batch 3 shows the gap.
    ch.applyBatch(batch(3, []));
    expect(asked).toEqual(['b']);
    // That fetch failed. The heartbeat names seq 3, which the cursor has reached: still behind.
    ch.checkBehind('b', 'i1', 3);
    ch.checkBehind('b', 'i1', 3);
    expect(asked).toEqual(['b', 'b', 'b']);
    expect(kv.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(1);

    // A snapshot finally arrives: r1 is gone, and heartbeats stop asking.
    expect(ch.applySnapshot({ routerId: 'b', incarnation: 'i1', seq: 3, bookings: [], sessions: [] })).toBe(true);
    expect(kv.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(0);
    ch.checkBehind('b', 'i1', 3);
    expect(asked).toHaveLength(3);
  });

  it('a first batch past seq 1 whose snapshot fetch failed is asked for again on the next heartbeat', () => {
    const { ch, asked } = channel();
    ch.applyBatch(batch(7, []));
    expect(asked).toEqual(['b']);
    ch.checkBehind('b', 'i1', 7);
    expect(asked).toEqual(['b', 'b']);
    // A stale snapshot (older than a batch already applied) leaves the gap open.
    ch.applyBatch(batch(8, []));
    expect(ch.applySnapshot({ routerId: 'b', incarnation: 'i1', seq: 7, bookings: [], sessions: [] })).toBe(false);
    ch.checkBehind('b', 'i1', 8);
    expect(asked).toEqual(['b', 'b', 'b']);
  });
});
