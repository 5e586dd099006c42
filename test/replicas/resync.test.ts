/**
 * A replica converges after a NATS outage (replica sync, faults): the
 * snapshot a peer answers with decodes even while a sticky session is live,
 * and a gap in a peer's batches is asked for again on every heartbeat until a
 * snapshot fills it, however many fetches fail; batches that arrive while the
 * snapshot crosses are replayed onto it rather than making it stale.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { KvScheduler, type SyncedBooking } from '../../src/core/index.js';
import { SyncChannel, type ChannelHost } from '../../src/replicas/channel.js';
import { decodeBatch, decodeSnapshot, encodeBatch, encodeSnapshot, type SyncOp } from '../../src/replicas/protocol.js';
import { StickySessions } from '../../src/routing/sticky-sessions.js';
import { until } from '../helpers/until.js';
import { MemoryBus } from './memory-bus.js';
import { replica } from './test-replica.js';

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
    refused: () => {},
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

  it('batches applied while a multi-chunk snapshot crosses are replayed onto it: the gap closes under traffic', async () => {
    const bus = new MemoryBus();
    const attached = (id: string) => {
      const kv = scheduler();
      const r = replica(bus, id);
      r.sync.attach(KEY, { kv, workerTypeOf: () => 'aggregated' });
      return { ...r, kv };
    };
    const a = attached('a');
    const b = attached('b');
    const onB = () => b.kv.peers.replicaCounts().get('a') ?? 0;
    // Six bookings of 40 blocks each: A's snapshot crosses in several chunks of 1 KiB.
    for (let i = 1; i <= 6; i++) {
      const h = BigUint64Array.from({ length: 40 }, (_, j) => BigInt(i * 1000 + j + 1));
      a.kv.addRequest({ requestId: `r${i}`, workerId: 1, isl: 640, hashes: { local: h, seq: h } });
    }
    a.sync.flush();
    expect(onB()).toBe(6);
    // Batch 2 (r2 freed) is lost on the bus; batch 3 (r7 booked) shows the gap and B asks for a snapshot.
    bus.hold = (subject) => subject.includes('.ops.');
    a.kv.free('r2');
    a.sync.flush();
    bus.hold = () => false;
    // Traffic goes on while the snapshot crosses: once its first chunk is in, A frees r1 (batch 4).
    let during = false;
    bus.lose = (subject) => {
      if (subject.includes('.chunk.') && !during) {
        during = true;
        a.kv.free('r1');
        a.sync.flush();
      }
      return false;
    };
    a.kv.addRequest({ requestId: 'r7', workerId: 1, isl: 64, hashes: null });
    a.sync.flush();
    const fetched = async () =>
      (await b.metrics.registry.getSingleMetric('kvgate_replica_snapshot_transfers_total')!.get()).values.filter(
        (v) => v.labels.direction === 'fetched',
      );
    await until(async () => (await fetched()).length > 0, "B's snapshot of A");
    expect(during).toBe(true);
    expect((await fetched()).map((v) => [v.labels.outcome, v.value])).toEqual([['ok', 1]]);
    // r3..r7: r2's free, lost on the bus, came with the snapshot; r1's, applied before it, was replayed onto it.
    expect(onB()).toBe(5);
    // B counts on worker 1 exactly the requests A has in flight there.
    const load = (kv: KvScheduler) => kv.load({ workerId: 1, dpRank: 0 })!.activeRequests;
    expect(load(b.kv)).toBe(load(a.kv));
    await Promise.all([a.sync.close(), b.sync.close()]);
  });
});
