/**
 * Replica sync lag measured without comparing two processes' clocks (issue
 * 23): each replica's clock is its own `performance.now()`, so two replicas'
 * readings differ by seconds. Two replicas on an in-process bus, with clocks
 * skewed by several seconds, must report the lag their batches really had:
 * 0 when delivered at once, D when every message spends D in flight, D when
 * only the batches do.
 */
import { encode } from '@msgpack/msgpack';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ManualClock, seededRng, type Clock } from '../../src/common/index.js';
import { KvScheduler } from '../../src/core/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { ReplicaSync } from '../../src/replicas/index.js';
import { PeerClock } from '../../src/replicas/peer-clock.js';
import { decodeHeartbeat, encodeHeartbeat } from '../../src/replicas/protocol.js';
import { MemoryBus } from './memory-bus.js';

const KEY = 'mock-model/aggregated';
const HEARTBEAT_MS = 1000;
/** B's clock reads this much ahead of A's (B's process started 7 s before A's). */
const SKEW_MS = 7000;
const silent = pino({ level: 'silent' });

interface Replica {
  readonly sync: ReplicaSync;
  readonly kv: KvScheduler;
  readonly metrics: KvgateMetrics;
}

function replica(bus: MemoryBus, id: string, clock: Clock): Replica {
  const metrics = new KvgateMetrics({ processMetrics: false });
  const sync = new ReplicaSync({
    transport: bus.transport(),
    routerId: id,
    heartbeatMs: HEARTBEAT_MS,
    peerTimeoutMs: 60_000,
    maxQueuedOps: 1000,
    subjectPrefix: 'kvgate.test',
    chunkBytes: 1 << 16,
    maxSnapshotBytes: 1 << 24,
    clock,
  });
  sync.bind(silent, metrics);
  const kv = new KvScheduler({ blockSize: 16, clock: new ManualClock(0), rng: seededRng(1) });
  kv.addWorker(1);
  sync.attach(KEY, { kv, workerTypeOf: () => 'aggregated' });
  sync.start();
  return { sync, kv, metrics };
}

/** The lag histogram's observations: how many, and their mean in seconds. */
async function lag(r: Replica): Promise<{ count: number; mean: number }> {
  const m = (await r.metrics.registry.getMetricsAsJSON()).find((x) => x.name === 'kvgate_replica_sync_lag_seconds')!;
  const value = (name: string) => m.values.find((v) => (v as { metricName?: string }).metricName === name)?.value ?? 0;
  const count = value('kvgate_replica_sync_lag_seconds_count');
  return { count, mean: count === 0 ? 0 : value('kvgate_replica_sync_lag_seconds_sum') / count };
}

/** Each replica observed `count` lags, of `seconds` on average. */
async function expectLag(replicas: readonly Replica[], count: number, seconds: number): Promise<void> {
  for (const r of replicas) {
    const l = await lag(r);
    expect(l.count).toBe(count);
    expect(l.mean).toBeCloseTo(seconds, 6);
  }
}

describe('replica sync lag between replicas whose clocks are skewed', () => {
  let bus: MemoryBus;
  let base: ManualClock;
  let a: Replica;
  let b: Replica;
  let n = 0;

  beforeEach(() => {
    // Only the heartbeat interval is faked: the test fires it; the replicas' clocks are manual.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    bus = new MemoryBus();
    base = new ManualClock(20_000);
    a = replica(bus, 'a', base);
    b = replica(bus, 'b', { now: () => base.now() + SKEW_MS });
  });

  afterEach(async () => {
    await Promise.all([a.sync.close(), b.sync.close()]);
    vi.useRealTimers();
  });

  /** Both replicas heartbeat; what is held spends `delayMs` in flight. */
  function beat(delayMs = 0): void {
    base.advance(HEARTBEAT_MS);
    vi.advanceTimersByTime(HEARTBEAT_MS);
    base.advance(delayMs);
    bus.release();
  }

  /** Each replica books a request; the batches spend `delayMs` in flight. */
  function exchange(delayMs: number): void {
    for (const r of [a, b]) {
      r.kv.addRequest({ requestId: `r${++n}`, workerId: 1, isl: 64, hashes: null });
      r.sync.flush();
    }
    base.advance(delayMs);
    bus.release();
  }

  it('no delay: both read 0, not the 7 s between their clocks', async () => {
    beat();
    beat();
    exchange(0);
    exchange(0);
    await expectLag([a, b], 2, 0);
    // The peers hold each other's bookings: the batches were applied.
    expect(a.kv.peers.requestsOn({ workerId: 1, dpRank: 0 })).toBe(2);
    expect(b.kv.peers.requestsOn({ workerId: 1, dpRank: 0 })).toBe(2);
  });

  it('every message 250 ms in flight (heartbeats too): both read 0.25 s', async () => {
    bus.hold = () => true;
    beat(250);
    beat(250);
    beat(250);
    exchange(250);
    exchange(250);
    await expectLag([a, b], 2, 0.25);
  });

  it('only the batches 400 ms in flight: both read 0.4 s; none is measured before a heartbeat round trip', async () => {
    bus.hold = (subject) => subject.includes('.ops.');
    exchange(400);
    // No round trip yet: the offset is unknown, so nothing is measured (rather than the skew).
    for (const r of [a, b]) expect((await lag(r)).count).toBe(0);
    beat();
    beat();
    exchange(400);
    await expectLag([a, b], 1, 0.4);
  });

  it('a restarted peer (a new clock) ignores echoes of its former self and measures only after its own round trip', async () => {
    beat();
    beat();
    await b.sync.close();
    // B again: a new process, a new incarnation and a clock 3 s behind A's.
    b = replica(bus, 'b', { now: () => base.now() - 3000 });
    bus.hold = (subject) => subject.includes('.ops.');
    // A's first heartbeat still echoes B's former self: B learns nothing from it.
    vi.advanceTimersByTime(HEARTBEAT_MS);
    exchange(120);
    expect((await lag(b)).count).toBe(0);
    beat();
    beat();
    exchange(120);
    await expectLag([b], 1, 0.12);
  });
});

describe('PeerClock', () => {
  it('takes the offset from the shortest round trip of its recent samples', () => {
    const c = new PeerClock();
    expect(c.ageOf(5000, 100)).toBeUndefined();
    // The peer's clock is ours + 5000. Our heartbeat left at 0 and the peer held it 100 ms.
    // Sample 1: out 10 ms, back 90 ms (queued on the way back): rtt 100, offset off by half the asymmetry.
    expect(c.sample({ incarnation: 'i', sentAt: 0, heldMs: 100 }, 5000 + 10 + 100, 200)).toBe(100);
    expect(c.offset).toBeCloseTo(4960, 9);
    // Sample 2: 5 ms each way: rtt 10, exact; it wins over the longer one.
    expect(c.sample({ incarnation: 'i', sentAt: 1000, heldMs: 100 }, 6000 + 5 + 100, 1110)).toBe(10);
    expect(c.offset).toBeCloseTo(5000, 9);
    expect(c.ageOf(7000, 2030)).toBeCloseTo(30, 9);
    // An impossible round trip (an echo that cannot be ours) is no sample; an age is never negative.
    expect(c.sample({ incarnation: 'i', sentAt: 3000, heldMs: 500 }, 8000, 3100)).toBeUndefined();
    expect(c.ageOf(7100, 2030)).toBe(0);
  });

  it('a heartbeat cut into several messages is held from the first of them', () => {
    const c = new PeerClock();
    c.heard(500, 1000);
    c.heard(500, 1040); // the same heartbeat's later message
    expect(c.echo('i', 1100)).toEqual({ incarnation: 'i', sentAt: 500, heldMs: 100 });
    c.heard(600, 1200);
    expect(c.echo('i', 1250)).toEqual({ incarnation: 'i', sentAt: 600, heldMs: 50 });
  });

  it('heartbeat echoes survive the wire format; a heartbeat without them (an older replica) decodes with none', () => {
    const echoes = new Map([['b', { incarnation: 'ib', sentAt: 1234.5, heldMs: 17.25 }]]);
    const hb = decodeHeartbeat(
      encodeHeartbeat({ routerId: 'a', incarnation: 'ia', sentAt: 99, seqs: { [KEY]: 3 }, echoes }),
    );
    expect(hb.echoes).toEqual(echoes);
    expect(hb.seqs).toEqual({ [KEY]: 3 });
    expect(decodeHeartbeat(encode({ r: 'a', i: 'ia', t: 99, s: {} })).echoes.size).toBe(0);
    expect(() => decodeHeartbeat(encode({ r: 'a', i: 'ia', t: 99, s: {}, e: { b: ['ib', -1, 0] } }))).toThrow(
      /e\.b\[1\]/,
    );
  });
});
