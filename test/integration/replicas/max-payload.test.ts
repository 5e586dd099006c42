/**
 * A turn's batch larger than the NATS server's `max_payload` (a burst of bookings with long prompts) crosses
 * cut into messages that fit, consecutive sequence numbers each, so peers apply every op without a snapshot;
 * one op that cannot fit at all is counted and logged, its sequence number skipped, and peers take it from a
 * (chunked) snapshot. Heartbeats (a sequence per channel, an echo per peer) are cut the same way, so peers
 * hear each other, resync and measure lag under a tiny `max_payload`; an entry that fits no message is counted
 * and logged once. Over a real nats-server with a small `max_payload`.
 */
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvScheduler } from '../../../src/core/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { NatsTransport, ReplicaSync } from '../../../src/replicas/index.js';
import { startNatsServer, type NatsServer } from '../../helpers/nats-server.js';
import { until } from '../../helpers/until.js';

const KEY = 'mock-model/aggregated';
const MAX_PAYLOAD = 8192;

async function value(metrics: KvgateMetrics, name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name);
  return (m?.values ?? [])
    .filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
    .reduce((n, v) => n + v.value, 0);
}

function replica(nats: NatsServer, id: string, keys: readonly string[] = [KEY], peerTimeoutMs = 600_000) {
  const transport = new NatsTransport([nats.url], id);
  const sync = new ReplicaSync({
    transport,
    routerId: id,
    // A lost batch would be asked for by the next heartbeat: a snapshot fetched, which the test counts.
    heartbeatMs: 100,
    peerTimeoutMs,
    maxQueuedOps: 10_000,
    subjectPrefix: 'kvgate.max-payload-test',
    chunkBytes: 1 << 16,
    maxSnapshotBytes: 1 << 22,
  });
  const lines: Record<string, unknown>[] = [];
  const metrics = new KvgateMetrics({ processMetrics: false });
  sync.bind(pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }), metrics);
  // One scheduler per pool; the first pool's is the one under test.
  const kvs = keys.map((key) => {
    const kv = new KvScheduler({ blockSize: 16, clock: new ManualClock(0), rng: seededRng(1) });
    kv.addWorker(1);
    sync.attach(key, { kv, workerTypeOf: () => 'aggregated' });
    return kv;
  });
  sync.start();
  return { sync, transport, metrics, lines, kv: kvs[0]! };
}

function book(kv: KvScheduler, id: string, blocks: number, salt: number): void {
  const h = BigUint64Array.from({ length: blocks }, (_, j) => BigInt(salt * 1_000_000 + j + 1));
  kv.addRequest({ requestId: id, workerId: 1, isl: blocks * 16, hashes: { local: h, seq: h } });
}

describe('replica sync: batches larger than the bus max_payload', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a batch over max_payload crosses in messages that fit; an op that cannot fit is counted and resynced', async () => {
    const nats = await startNatsServer({ maxPayload: MAX_PAYLOAD });
    cleanups.push(() => nats.stop());
    const a = replica(nats, 'a');
    cleanups.push(() => a.sync.close());
    const b = replica(nats, 'b');
    cleanups.push(() => b.sync.close());
    await Promise.all([a.transport.ready(), b.transport.ready()]);
    await until(() => a.sync.peers().includes('b') && b.sync.peers().includes('a'), 'A and B hear each other');
    expect(a.transport.maxPayload).toBe(MAX_PAYLOAD);
    const onB = () => b.kv.peers.replicaCounts().get('a') ?? 0;

    // 200 bookings of 40 blocks in one turn: about 70 KB of ops, several times max_payload.
    for (let i = 0; i < 200; i++) book(a.kv, `r${i}`, 40, i + 1);
    a.sync.flush();
    await until(() => onB() === 200, "B holds A's 200 bookings");
    expect(await value(a.metrics, 'kvgate_replica_sync_messages_sent_total', { kind: 'ops' })).toBeGreaterThan(8);
    expect(await value(a.metrics, 'kvgate_replica_sync_messages_dropped_total')).toBe(0);
    expect(await value(b.metrics, 'kvgate_replica_snapshot_transfers_total', { direction: 'fetched' })).toBe(0);

    // One booking of 2000 blocks (16 KB of hashes) fits no message: not sent, counted, logged.
    book(a.kv, 'huge', 2000, 999);
    book(a.kv, 'after', 4, 998);
    a.sync.flush();
    expect(
      await value(a.metrics, 'kvgate_replica_sync_messages_dropped_total', { direction: 'out', reason: 'too_large' }),
    ).toBe(1);
    expect(a.lines.find((l) => String(l['msg']).includes('max_payload'))).toMatchObject({
      level: 40,
      requestId: 'huge',
      maxPayload: MAX_PAYLOAD,
    });
    // Its skipped sequence number is a gap: B fetches A's snapshot (chunked to fit) and holds it too.
    await until(() => onB() === 202, 'B holds the oversized booking from a snapshot');
    expect(
      await value(b.metrics, 'kvgate_replica_snapshot_transfers_total', { direction: 'fetched', outcome: 'ok' }),
    ).toBe(1);
  });

  it('heartbeats over max_payload cross in messages that fit: peers hear each other, resync from chunked snapshots', async () => {
    const small = 512;
    const nats = await startNatsServer({ maxPayload: small });
    cleanups.push(() => nats.stop());
    // 16 pools of long model names: a heartbeat's sequences alone are about 800 bytes, over max_payload.
    const keys = [KEY, ...Array.from({ length: 16 }, (_, i) => `a-model-with-a-rather-long-name-${i}/aggregated`)];
    const a = replica(nats, 'a', [...keys, `${'x'.repeat(600)}/aggregated`], 2000);
    cleanups.push(() => a.sync.close());
    await a.transport.ready();
    // Bookings on A before B starts: B learns of them from A's heartbeat (its sequence) and a snapshot.
    for (let i = 0; i < 30; i++) book(a.kv, `r${i}`, 12, i + 1);
    a.sync.flush();
    const b = replica(nats, 'b', keys, 2000);
    cleanups.push(() => b.sync.close());
    const c = replica(nats, 'c', keys, 2000);
    cleanups.push(() => c.sync.close());
    await Promise.all([b.transport.ready(), c.transport.ready()]);
    const all = [a, b, c];
    const ids = ['a', 'b', 'c'];
    await until(
      () => all.every((r, i) => ids.every((id, j) => i === j || r.sync.peers().includes(id))),
      'every replica hears the other two',
    );
    await until(() => (b.kv.peers.replicaCounts().get('a') ?? 0) === 30, "B holds A's 30 bookings from a snapshot");
    const fetched = { direction: 'fetched', outcome: 'ok' };
    expect(await value(b.metrics, 'kvgate_replica_snapshot_transfers_total', fetched)).toBeGreaterThanOrEqual(1);
    // The snapshot (about 4 KB) crossed in chunks that fit.
    expect(await value(b.metrics, 'kvgate_replica_snapshot_bytes_total', { direction: 'received' })).toBeGreaterThan(
      small * 4,
    );
    // Echoes crossed too: a batch's age is measured once a round trip gave A's clock offset.
    await until(async () => {
      book(a.kv, `lag${performance.now()}`, 2, 5000);
      a.sync.flush();
      return (await value(b.metrics, 'kvgate_replica_sync_lag_seconds')) > 0;
    }, "B measures the lag of A's batches");
    // Heartbeats keep every peer alive past the peer timeout, each beat several messages.
    const sent = await value(b.metrics, 'kvgate_replica_sync_messages_sent_total', { kind: 'heartbeat' });
    await until(
      async () =>
        (await value(b.metrics, 'kvgate_replica_sync_messages_sent_total', { kind: 'heartbeat' })) > sent + 40,
      'B sends 40 more heartbeat messages',
    );
    for (const r of all) expect(await value(r.metrics, 'kvgate_replica_peer_timeouts_total')).toBe(0);
    expect(await value(b.metrics, 'kvgate_replica_sync_messages_dropped_total', { direction: 'out' })).toBe(0);
    // A's 600-byte channel key fits no heartbeat: counted at each beat, logged once.
    expect(
      await value(a.metrics, 'kvgate_replica_sync_messages_dropped_total', { direction: 'out', reason: 'too_large' }),
    ).toBeGreaterThan(1);
    const unsent = a.lines.filter((l) => String(l['msg']).includes('heartbeat entries'));
    expect(unsent).toEqual([expect.objectContaining({ level: 50, maxPayload: small })]);
    expect(unsent[0]!['unsent']).toEqual([
      { entry: 'seq', key: `${'x'.repeat(600)}/aggregated`, bytes: expect.any(Number) },
    ]);
  });
});
