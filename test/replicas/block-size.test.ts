/**
 * Replicas whose model runs with different KV block sizes: a peer's prompt hashes mean nothing under another
 * block size, so its bookings are refused (logged once as an error, counted), in its batches, its snapshots
 * and its warm-start index; a peer that predates the block size on the wire is taken as before, and one that
 * restarts with the same block size is taken again.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { KvScheduler, type SyncedBooking } from '../../src/core/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { SyncChannel, type ChannelHost } from '../../src/replicas/channel.js';
import { encodeBatch, opsSubject } from '../../src/replicas/protocol.js';
import { MemoryBus } from './memory-bus.js';
import { replica } from './test-replica.js';

const KEY = 'mock-model/aggregated';

function scheduler(blockSize: number): KvScheduler {
  const s = new KvScheduler({ blockSize, clock: new ManualClock(0), rng: seededRng(1) });
  s.addWorker(1);
  return s;
}

async function counter(metrics: KvgateMetrics, name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name);
  return (m?.values ?? [])
    .filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
    .reduce((n, v) => n + v.value, 0);
}

function replicaOf(bus: MemoryBus, id: string, blockSize: number) {
  const lines: Record<string, unknown>[] = [];
  const { sync, metrics } = replica(bus, id, { lines });
  const kv = scheduler(blockSize);
  return { sync, metrics, lines, kv, attach: () => sync.attach(KEY, { kv, workerTypeOf: () => 'aggregated' }) };
}

function booking(requestId: string): SyncedBooking {
  return {
    requestId,
    workerId: 1,
    dpRank: 0,
    seq: BigUint64Array.from([1n, 2n, 3n]),
    privateBlocks: 0,
    prefillTokens: 48,
    expectedOutputTokens: undefined,
    prefillCompleted: false,
    outputBlocks: 0,
    decay: undefined,
  };
}

describe('replica sync: peers with another block size', () => {
  it("a peer's batches under another block size are refused: logged once, counted, its bookings ignored", async () => {
    const bus = new MemoryBus();
    const a = replicaOf(bus, 'a', 32);
    const b = replicaOf(bus, 'b', 16);
    const c = replicaOf(bus, 'c', 32);
    for (const r of [a, b, c]) r.attach();
    for (let i = 0; i < 3; i++) {
      const h = BigUint64Array.from({ length: 4 }, (_, j) => BigInt(i * 100 + j + 1));
      a.kv.addRequest({ requestId: `r${i}`, workerId: 1, isl: 128, hashes: { local: h, seq: h } });
      a.sync.flush();
    }
    // C shares A's block size: it holds A's bookings. B does not.
    expect(c.kv.peers.replicaCounts().get('a')).toBe(3);
    expect(b.kv.peers.replicaCounts().get('a')).toBeUndefined();
    expect(b.kv.load({ workerId: 1, dpRank: 0 })!.activeRequests).toBe(0);
    const errors = b.lines.filter((l) => l['level'] === 50);
    expect(errors).toEqual([expect.objectContaining({ peer: 'a', channel: KEY, peerBlockSize: 32, blockSize: 16 })]);
    expect(await counter(b.metrics, 'kvgate_replica_peer_refusals_total', { reason: 'block_size' })).toBe(1);
    expect(
      await counter(b.metrics, 'kvgate_replica_sync_messages_dropped_total', { direction: 'in', reason: 'block_size' }),
    ).toBe(3);
    expect(await counter(c.metrics, 'kvgate_replica_peer_refusals_total')).toBe(0);
    // Nor does B ask the refused peer for a snapshot.
    expect(bus.requests.filter((r) => r.subject.includes('.snap.'))).toEqual([]);
    await Promise.all([a, b, c].map((r) => r.sync.close()));
  });

  it('a model of two pools (prefill, decode) refuses a peer on both: one error line per peer and model, each refusal counted', async () => {
    const bus = new MemoryBus();
    // Two models of two pools each; a pool's scheduler runs its replica's block size.
    const pools = (r: ReturnType<typeof replicaOf>) =>
      ['pd-model', 'other-model'].flatMap((model) =>
        ['prefill', 'decode'].map((role) => {
          const kv = scheduler(r.kv.blockSize);
          r.sync.attach(`${model}/${role}`, { kv, workerTypeOf: () => role });
          return kv;
        }),
      );
    /** One booking on each of `r`'s pools, in one turn. */
    const bookAll = (r: ReturnType<typeof replicaOf>, kvs: KvScheduler[], prefix: string) => {
      kvs.forEach((kv, i) => {
        const h = BigUint64Array.from([BigInt(i + 1)]);
        kv.addRequest({ requestId: `${prefix}${i}`, workerId: 1, isl: 32, hashes: { local: h, seq: h } });
      });
      r.sync.flush();
    };
    const a = replicaOf(bus, 'a', 32);
    const b = replicaOf(bus, 'b', 16);
    const onA = pools(a);
    pools(b);
    bookAll(a, onA, 'r');
    bookAll(a, onA, 's');
    const errors = () => b.lines.filter((l) => l['level'] === 50);
    // Two models, each refused on its two pools: one line per model, a refusal counted per pool, every message dropped.
    expect(errors().map((l) => [l['peer'], l['model']])).toEqual([
      ['a', 'pd-model'],
      ['a', 'other-model'],
    ]);
    expect(await counter(b.metrics, 'kvgate_replica_peer_refusals_total', { reason: 'block_size' })).toBe(4);
    expect(
      await counter(b.metrics, 'kvgate_replica_sync_messages_dropped_total', { direction: 'in', reason: 'block_size' }),
    ).toBe(8);
    // A restarts (a new incarnation), still with block size 32: a new episode, told again once per model.
    await a.sync.close();
    const a2 = replicaOf(bus, 'a', 32);
    bookAll(a2, pools(a2), 't');
    expect(errors()).toHaveLength(4);
    expect(await counter(b.metrics, 'kvgate_replica_peer_refusals_total', { reason: 'block_size' })).toBe(8);
    await Promise.all([a2.sync.close(), b.sync.close()]);
  });

  it("a peer's snapshot under another block size is refused; one that predates the field is taken; a restart mends", () => {
    const host: ChannelHost & { refusals: boolean[] } = {
      refusals: [],
      admit: () => true,
      schedule: () => {},
      requestSnapshot: () => {},
      applied: () => {},
      refused({ first }) {
        this.refusals.push(first);
      },
    };
    const kv = scheduler(16);
    const ch = new SyncChannel(KEY, kv, host);
    const snap = (incarnation: string, blockSize: number | undefined) => ({
      routerId: 'p',
      incarnation,
      seq: 1,
      bookings: [booking('r1')],
      sessions: [],
      blockSize,
    });
    // A peer that predates the field (no block size said): taken, as before.
    expect(ch.applySnapshot(snap('i0', undefined))).toBe(true);
    expect(kv.peers.replicaCounts().get('p')).toBe(1);
    // It restarts with block size 32: refused, its bookings dropped; a later message without the field too.
    expect(ch.applySnapshot(snap('i1', 32))).toBe(false);
    expect(kv.peers.replicaCounts().get('p')).toBeUndefined();
    expect(ch.applyBatch({ routerId: 'p', incarnation: 'i1', seq: 2, sentAt: 0, ops: [] })).toBe(true);
    expect(host.refusals).toEqual([true, false]);
    // It restarts with block size 16: taken again.
    expect(ch.applySnapshot(snap('i2', 16))).toBe(true);
    expect(kv.peers.replicaCounts().get('p')).toBe(1);
    expect(ch.refuses('p', 'i2')).toBe(false);
  });

  it('a batch without a block size (an older replica) is applied', () => {
    const bus = new MemoryBus();
    const b = replicaOf(bus, 'b', 16);
    b.attach();
    const bytes = encodeBatch({
      routerId: 'old',
      incarnation: 'i1',
      seq: 1,
      sentAt: 0,
      ops: [{ kind: 'added', booking: booking('r1') }],
    });
    bus.transport().publish(opsSubject('kvgate.test', KEY), bytes);
    expect(b.kv.peers.replicaCounts().get('old')).toBe(1);
  });

  it('a warm start from a peer with another block size starts cold: refused, counted', async () => {
    const bus = new MemoryBus();
    const a = replicaOf(bus, 'a', 32);
    await a.sync.warmStart([KEY], 5000, 32); // the first replica: its own index is complete, it answers
    a.attach();
    const b = replicaOf(bus, 'b', 16);
    const got = await b.sync.warmStart([KEY], 5000, 16);
    expect(got.size).toBe(0);
    expect(
      await counter(b.metrics, 'kvgate_replica_snapshot_transfers_total', {
        direction: 'warm_start',
        outcome: 'refused',
      }),
    ).toBe(1);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });
});
