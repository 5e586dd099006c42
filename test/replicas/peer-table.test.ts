/**
 * The peer bookkeeping of replica sync on a manual clock: a replica's own
 * messages are no peer's; a replica first seen joins; a new incarnation
 * replaces its former self, whose bookings are forgotten; a peer silent for
 * the timeout is dropped with its bookings. Each change logged and counted.
 * Two live replicas with one router id are told from a restart by their
 * heartbeats, and reported once.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../src/common/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { PeerTable } from '../../src/replicas/peer-table.js';

const TIMEOUT_MS = 3000;

interface Table {
  readonly peers: PeerTable;
  readonly clock: ManualClock;
  readonly metrics: KvgateMetrics;
  /** The replicas whose bookings were forgotten, in order. */
  readonly forgotten: string[];
  readonly lines: Record<string, unknown>[];
}

function table(): Table {
  const clock = new ManualClock();
  const forgotten: string[] = [];
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  const peers = new PeerTable({
    selfId: 'a',
    incarnation: 'a1',
    clock,
    timeoutMs: TIMEOUT_MS,
    forget: (replica) => {
      forgotten.push(replica);
      return 2;
    },
  });
  const metrics = new KvgateMetrics({ processMetrics: false });
  peers.bind(logger, metrics.replicas);
  return { peers, clock, metrics, forgotten, lines };
}

describe('PeerTable', () => {
  it('ignores its own replica, records a join, and replaces a restarted peer forgetting its former bookings', async () => {
    const { peers, metrics, forgotten, lines } = table();
    expect(peers.heard('a', 'a1')).toBe(false);
    expect(peers.size).toBe(0);
    expect(peers.heard('b', 'b1')).toBe(true);
    expect(peers.heard('b', 'b1')).toBe(true);
    expect([...peers.ids()]).toEqual(['b']);
    expect(forgotten).toEqual([]);
    expect(peers.heard('b', 'b2')).toBe(true);
    expect(forgotten).toEqual(['b']);
    expect(peers.size).toBe(1);
    expect(lines.map((l) => l.msg)).toEqual(['replica b joined', 'replica b restarted']);
    expect((await metrics.replicas.peers.get()).values[0]?.value).toBe(1);
  });

  it('drops a peer silent for the timeout with its bookings, logged and counted; a peer heard in time stays', async () => {
    const { peers, clock, metrics, forgotten, lines } = table();
    peers.heard('b', 'b1');
    peers.heard('c', 'c1');
    clock.advance(TIMEOUT_MS - 1);
    peers.heard('c', 'c1');
    peers.expire(clock.now());
    expect([...peers.ids()]).toEqual(['b', 'c']);
    clock.advance(1);
    peers.expire(clock.now());
    expect([...peers.ids()]).toEqual(['c']);
    expect(forgotten).toEqual(['b']);
    const warn = lines.find((l) => l.level === 40);
    expect(warn).toMatchObject({ peer: 'b', droppedBookings: 2, silentMs: TIMEOUT_MS });
    expect(warn?.msg).toBe(`replica b not heard from for ${TIMEOUT_MS} ms: dropped its 2 booking(s)`);
    expect((await metrics.replicas.peerTimeouts.get()).values[0]?.value).toBe(1);
  });

  it('reports a router id two live replicas share, once, where a restart is not reported', async () => {
    const { peers, metrics, lines } = table();
    const hb = (routerId: string, incarnation: string) =>
      peers.heartbeat({ routerId, incarnation, sentAt: 0, seqs: {}, echoes: new Map() });
    const conflicts = async () => (await metrics.replicas.routerIdConflicts.get()).values[0]?.value ?? 0;
    // B restarts: its former incarnation is never heard again.
    hb('b', 'b1');
    hb('b', 'b2');
    hb('b', 'b2');
    expect(await conflicts()).toBe(0);
    // C's former incarnation speaks again: two processes run as C.
    hb('c', 'c1');
    hb('c', 'c2');
    hb('c', 'c1');
    hb('c', 'c2');
    // Another process runs with our own id.
    expect(hb('a', 'a9')).toBe(false);
    hb('a', 'a9');
    expect(await conflicts()).toBe(2);
    expect(lines.filter((l) => l.level === 50).map((l) => [l.peer, l.self, l.incarnations])).toEqual([
      ['c', false, ['c2', 'c1']],
      ['a', true, ['a1', 'a9']],
    ]);
  });
});
