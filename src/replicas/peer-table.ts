/**
 * The peers replica sync has heard from: each one's incarnation, when it was
 * last heard and its clock (peer-clock.ts). A replica first seen joins, a new
 * incarnation (a restarted process) replaces its former self, whose bookings
 * are forgotten; a peer silent for the timeout is dropped with all its
 * bookings. Each of these is logged and counted.
 *
 * Two live processes with one router id (a `replicas.router_id` copied from
 * one replica's config to another's) look like a restart at every message:
 * each ignores the other's as its own, and every other replica replaces one's
 * bookings with the other's, back and forth. Heartbeats tell it apart (only a
 * live process sends them): one with our id and another incarnation, or a
 * peer's former incarnation heard again after it was replaced. Reported once
 * per id as an error, and counted.
 */
import type { Logger } from 'pino';
import type { Clock } from '../common/index.js';
import type { ReplicaMetrics } from '../metrics/index.js';
import { PeerClock, type Echo } from './peer-clock.js';
import type { Heartbeat } from './protocol.js';

interface Peer {
  incarnation: string;
  lastHeard: number;
  /** Its clock's offset from ours (heartbeat echoes), for the age of its batches. */
  readonly clock: PeerClock;
  /** The incarnation this one replaced, if any: its heartbeat heard again means two live replicas share the id. */
  readonly former: string | undefined;
}

export interface PeerTableOptions {
  /** This replica's id: its own messages (the bus echoes them) are no peer's. */
  readonly selfId: string;
  /** This replica's incarnation: an echo of a former one's heartbeat is no round trip of this clock. */
  readonly incarnation: string;
  readonly clock: Clock;
  readonly timeoutMs: number;
  /** Drops a replica's bookings on every channel; returns how many it held. */
  readonly forget: (replica: string) => number;
}

export class PeerTable {
  readonly #o: PeerTableOptions;
  readonly #peers = new Map<string, Peer>();
  /** Router ids reported as shared by two live replicas. */
  readonly #shared = new Set<string>();
  #logger: Logger | undefined;
  #metrics: ReplicaMetrics | undefined;

  constructor(opts: PeerTableOptions) {
    this.#o = opts;
  }

  /**
   * Where joins, restarts and timeouts are logged and counted (set once). Peers are heard as soon as the bus
   * connects, which is usually before the gateway binds: those known now are logged as joined (marked `early`)
   * and the peers gauge starts at their number.
   */
  bind(logger: Logger, metrics: ReplicaMetrics): void {
    if (this.#logger === undefined)
      for (const replica of this.#peers.keys())
        logger.info({ peer: replica, restarted: false, early: true }, `replica ${replica} joined`);
    this.#logger ??= logger;
    this.#metrics ??= metrics;
    this.#metrics.peers.set(this.#peers.size);
  }

  get size(): number {
    return this.#peers.size;
  }

  ids(): IterableIterator<string> {
    return this.#peers.keys();
  }

  /**
   * Notes a message from `replica`: false for our own, else true. A replica first seen joins; a new incarnation
   * of a known one replaces it, its former self's bookings forgotten.
   */
  heard(replica: string, incarnation: string): boolean {
    if (replica === this.#o.selfId) return false;
    const p = this.#peers.get(replica);
    const now = this.#o.clock.now();
    if (p !== undefined && p.incarnation === incarnation) {
      p.lastHeard = now;
      return true;
    }
    if (p !== undefined) this.#o.forget(replica);
    this.#peers.set(replica, { incarnation, lastHeard: now, clock: new PeerClock(), former: p?.incarnation });
    this.#logger?.info(
      { peer: replica, restarted: p !== undefined },
      `replica ${replica} ${p === undefined ? 'joined' : 'restarted'}`,
    );
    this.#metrics?.peers.set(this.#peers.size);
    return true;
  }

  /** Notes a peer's heartbeat and its echo of ours (a round trip, for its clock's offset); false for our own. */
  heartbeat(hb: Heartbeat): boolean {
    const p = this.#peers.get(hb.routerId);
    if (hb.routerId === this.#o.selfId && hb.incarnation !== this.#o.incarnation)
      this.#sharedId(hb.routerId, this.#o.incarnation, hb.incarnation);
    else if (p !== undefined && p.former === hb.incarnation) this.#sharedId(hb.routerId, p.incarnation, hb.incarnation);
    if (!this.heard(hb.routerId, hb.incarnation)) return false;
    const clock = this.#peers.get(hb.routerId)!.clock;
    const now = this.#o.clock.now();
    const echo = hb.echoes.get(this.#o.selfId);
    // An echo of our former incarnation's heartbeat is not a round trip of this clock.
    if (echo !== undefined && echo.incarnation === this.#o.incarnation) clock.sample(echo, hb.sentAt, now);
    clock.heard(hb.sentAt, now);
    return true;
  }

  /** Two live replicas run with router id `replica`: reported once bound (the heartbeats go on, so none is missed). */
  #sharedId(replica: string, incarnation: string, other: string): void {
    if (this.#logger === undefined || this.#shared.has(replica)) return;
    this.#shared.add(replica);
    this.#metrics?.routerIdConflicts.inc();
    const self = replica === this.#o.selfId;
    this.#logger.error(
      { peer: replica, self, incarnations: [incarnation, other] },
      `two live replicas run with router id ${replica}${self ? ' (this one and another)' : ''}: ` +
        "their bookings overwrite each other's on every replica; give each its own replicas.router_id",
    );
  }

  /** The age on our clock, in ms, of a message `replica` sent at `sentAt` on its own; undefined before a round trip. */
  ageOf(replica: string, sentAt: number): number | undefined {
    return this.#peers.get(replica)?.clock.ageOf(sentAt, this.#o.clock.now());
  }

  /** What our next heartbeat echoes to each peer (`now`: its send time). */
  echoes(now: number): Map<string, Echo> {
    const echoes = new Map<string, Echo>();
    for (const [replica, p] of this.#peers) {
      const e = p.clock.echo(p.incarnation, now);
      if (e !== undefined) echoes.set(replica, e);
    }
    return echoes;
  }

  /** Drops every peer silent for the timeout, with all its bookings. */
  expire(now: number): void {
    for (const [replica, p] of this.#peers) {
      if (now - p.lastHeard < this.#o.timeoutMs) continue;
      this.#peers.delete(replica);
      const dropped = this.#o.forget(replica);
      this.#metrics?.peerTimeouts.inc();
      this.#logger?.warn(
        { peer: replica, droppedBookings: dropped, silentMs: now - p.lastHeard },
        `replica ${replica} not heard from for ${now - p.lastHeard} ms: dropped its ${dropped} booking(s)`,
      );
    }
  }
}
