/**
 * Replica sync's bus connects while the fleet is built, before the gateway binds its logger and metrics, and
 * peers are heard as soon as it does: over a real nats-server, what happened before `bind` is logged once
 * (marked early) and counted when it binds, and what happens after as it happens. Two live replicas given one
 * router id are reported by each of them and by their peers.
 */
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { NatsTransport, ReplicaSync } from '../../../src/replicas/index.js';
import type { NatsTransportOptions } from '../../../src/replicas/transport.js';
import { startNatsServer, type NatsServer } from '../../helpers/nats-server.js';
import { until } from '../../helpers/until.js';

function replica(
  nats: NatsServer,
  id: string,
  opts: NatsTransportOptions = {},
): { sync: ReplicaSync; transport: NatsTransport } {
  const transport = new NatsTransport([nats.url], id, opts);
  const sync = new ReplicaSync({
    transport,
    routerId: id,
    heartbeatMs: 50,
    peerTimeoutMs: 60_000,
    maxQueuedOps: 100,
    subjectPrefix: 'kvgate.bus-status-test',
    chunkBytes: 1 << 16,
    maxSnapshotBytes: 1 << 20,
  });
  sync.start();
  return { sync, transport };
}

async function value(metrics: KvgateMetrics, name: string, labels: Record<string, string> = {}): Promise<number> {
  const m = (await metrics.registry.getMetricsAsJSON()).find((x) => x.name === name);
  return (m?.values ?? [])
    .filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
    .reduce((n, v) => n + v.value, 0);
}

describe('replica sync: the bus and the peers before the gateway binds', () => {
  const cleanups: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('a connection and a peer from before bind are logged once and counted at bind; a later loss as it happens', async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    const a = replica(nats, 'a');
    cleanups.push(() => a.sync.close());
    const b = replica(nats, 'b');
    cleanups.push(() => b.sync.close());
    await a.transport.ready();
    expect(a.transport.connected).toBe(true);
    await until(() => a.sync.peers().includes('b'), "A hears B's heartbeat");

    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    const metrics = new KvgateMetrics({ processMetrics: false });
    a.sync.bind(logger, metrics);
    expect(lines.map((l) => [l['msg'], l['early']])).toEqual([
      ['replica sync bus connected', true],
      ['replica b joined', true],
    ]);
    expect(lines[0]).toMatchObject({ component: 'replica-sync', routerId: 'a', level: 30 });
    expect(String(lines[0]!['detail'])).toMatch(/^connected to /);
    expect(await value(metrics, 'kvgate_replica_sync_bus_up')).toBe(1);
    expect(await value(metrics, 'kvgate_replica_sync_bus_transitions_total', { transition: 'connected' })).toBe(1);
    expect(await value(metrics, 'kvgate_replica_peers')).toBe(1);

    // Bound once: a second model's bind reports nothing again.
    a.sync.bind(logger, metrics);
    expect(lines).toHaveLength(2);

    await nats.stop();
    await until(() => !a.transport.connected, 'A loses the bus');
    expect(lines.at(-1)).toMatchObject({ level: 40, msg: expect.stringMatching(/^replica sync bus unavailable/) });
    expect(lines.at(-1)!['early']).toBeUndefined();
    expect(await value(metrics, 'kvgate_replica_sync_bus_up')).toBe(0);
    expect(await value(metrics, 'kvgate_replica_sync_bus_transitions_total', { transition: 'disconnected' })).toBe(1);
  });

  it('a connection the client closed for good (it gave up reconnecting) is an error, counted; a new one is opened', async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    // The client gives up after two attempts 50 ms apart: its connection closes for good soon after NATS stops.
    const a = replica(nats, 'a', {
      maxReconnectAttempts: 2,
      reconnectTimeWaitMs: 50,
      reopenMinMs: 50,
      reopenMaxMs: 200,
    });
    cleanups.push(() => a.sync.close());
    const b = replica(nats, 'b');
    cleanups.push(() => b.sync.close());
    const lines: Record<string, unknown>[] = [];
    const metrics = new KvgateMetrics({ processMetrics: false });
    a.sync.bind(pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }), metrics);
    await a.transport.ready();
    await until(() => a.sync.peers().includes('b'), "A hears B's heartbeat");

    await nats.stop();
    const closed = () => lines.find((l) => String(l['msg']).startsWith('replica sync bus connection closed for good'));
    await until(() => closed() !== undefined, 'A reports its connection closed for good');
    expect(closed()).toMatchObject({
      level: 50,
      detail: expect.stringMatching(/^connection closed by the NATS client/),
    });
    expect(a.transport.connected).toBe(false);
    expect(await value(metrics, 'kvgate_replica_sync_bus_up')).toBe(0);
    expect(await value(metrics, 'kvgate_replica_sync_bus_transitions_total', { transition: 'closed' })).toBe(1);

    // NATS is back: A opens a new connection by itself, its subscriptions on it (B's heartbeats heard again).
    await nats.restart();
    await until(() => a.transport.connected, 'A reconnects');
    expect(lines.at(-1)).toMatchObject({ level: 30, msg: 'replica sync bus connected' });
    expect(await value(metrics, 'kvgate_replica_sync_bus_up')).toBe(1);
    const heard = await value(metrics, 'kvgate_replica_sync_messages_received_total', { kind: 'heartbeat' });
    await until(
      async () => (await value(metrics, 'kvgate_replica_sync_messages_received_total', { kind: 'heartbeat' })) > heard,
      "A hears B's heartbeats on the new connection",
    );
  });

  it('two live replicas with one router id: both and their peer report it once, as an error, and count it', async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    const bound = ['twin', 'twin', 'c'].map((id) => {
      const r = replica(nats, id);
      cleanups.push(() => r.sync.close());
      const lines: Record<string, unknown>[] = [];
      const metrics = new KvgateMetrics({ processMetrics: false });
      r.sync.bind(pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }), metrics);
      return { metrics, lines };
    });
    const conflicts = (m: KvgateMetrics) => value(m, 'kvgate_replica_router_id_conflicts_total');
    for (const [i, b] of bound.entries())
      await until(async () => (await conflicts(b.metrics)) === 1, `replica ${i} reports the shared id`);
    // Heartbeats go on every 50 ms: once each, whatever more of them come.
    await until(() => bound[2]!.lines.filter((l) => l['msg'] === 'replica twin restarted').length >= 4, 'flips');
    for (const b of bound) {
      expect(await conflicts(b.metrics)).toBe(1);
      expect(b.lines.filter((l) => l['level'] === 50).map((l) => l['peer'])).toEqual(['twin']);
    }
  });
});
