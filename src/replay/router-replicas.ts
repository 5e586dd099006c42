/**
 * N router replicas in virtual time: what `kvgate serve` replicas do live,
 * measured on a trace. A front door spreads arrivals over the replicas
 * (round-robin, or a seeded random draw); each replica is a full router of
 * its own (scheduler, bookkeeping, queue, RNG) and receives every engine's
 * KV events, as each live replica subscribes to every engine. Its prefix
 * index is its own: the same events give every replica the same content.
 *
 * Sync on: every change a replica's KvRouter makes to its own bookings
 * (request added with its prompt's sequence hashes, prefill tokens and
 * expected output; prefill completed; output-block progress; freed) is
 * observed through the core's `BookkeepingObserver` and applied to every
 * other replica's `PeerBookings` `syncDelayMs` of virtual time later: the
 * same core calls the live replica sync makes when a batch arrives. Sync off:
 * each replica sees only the load it booked itself. Load-based policies keep
 * per-replica counts either way (live sync shares the KV router's
 * bookkeeping only). Mooncake traces carry no sessions, so sticky sessions
 * are not modelled.
 *
 * Determinism: deliveries are queued in virtual time (FIFO: every op has the
 * same delay and time only moves forward) and applied by the replay's event
 * loop (`runUntil`) or before a routing call at the same time; no wall clock.
 */
import { seededRng, type Clock } from '../common/index.js';
import type { BookkeepingObserver, PeerBookings, SyncedBooking } from '../core/index.js';
import { KvgateError } from '../errors/index.js';
import type { KvEvent } from '../mocker/index.js';
import type { ReplayRouter, RouteChoice, RouteRequest } from './policy.js';
import type { IndexUse } from './results.js';

export type FrontDoorMode = 'rr' | 'random';
export const FRONT_DOOR_MODES: readonly FrontDoorMode[] = ['rr', 'random'];
export const DEFAULT_SYNC_DELAY_MS = 1;

/** How many routers a run has and how they share their bookings. */
export interface ReplicaOptions {
  /** Router replicas (1: a single router, the default). */
  readonly count: number;
  /** Peers' bookings reach each replica's cost model (only with `count` > 1). */
  readonly sync: boolean;
  /** Virtual ms between a booking change on one replica and its application on the others. */
  readonly syncDelayMs: number;
  /** How arrivals are spread over the replicas. */
  readonly front: FrontDoorMode;
}

export const SINGLE_ROUTER: ReplicaOptions = { count: 1, sync: false, syncDelayMs: DEFAULT_SYNC_DELAY_MS, front: 'rr' };

/**
 * Checks replica options, naming the field at fault.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT with `field`.
 */
export function validateReplicaOptions(o: ReplicaOptions): void {
  const bad = (field: string, value: unknown, expected: string): KvgateError =>
    new KvgateError('KVG_ERR_INVALID_ARGUMENT', `replicas.${field} ${String(value)}: expected ${expected}`, {
      field: `replicas.${field}`,
    });
  if (!Number.isSafeInteger(o.count) || o.count < 1) throw bad('count', o.count, 'an integer >= 1');
  if (typeof o.sync !== 'boolean') throw bad('sync', o.sync, 'true or false');
  if (!Number.isFinite(o.syncDelayMs) || o.syncDelayMs < 0)
    throw bad('syncDelayMs', o.syncDelayMs, 'a number of ms >= 0');
  if (!FRONT_DOOR_MODES.includes(o.front)) throw bad('front', o.front, FRONT_DOOR_MODES.join(' or '));
}

/** The run's name suffix: none for a single router, else ` xN sync` / ` xN no-sync` (` xN` for load-based policies). */
export function replicaSuffix(o: ReplicaOptions, kvPolicy: boolean): string {
  if (o.count === 1) return '';
  return kvPolicy ? ` x${o.count} ${o.sync ? 'sync' : 'no-sync'}` : ` x${o.count}`;
}

/** The name of the same run with one router (`kv x4 sync@bootstrap` -> `kv@bootstrap`). */
export function singleRouterName(name: string): string {
  return name.replace(/ x\d+(?: sync| no-sync)?(?=@|$)/, '');
}

/** The front door: which replica receives each arrival, drawn in arrival order (deterministic for a seed). */
export class FrontDoor {
  readonly #count: number;
  readonly #next: () => number;

  constructor(o: ReplicaOptions, seed: number) {
    this.#count = o.count;
    if (o.front === 'rr') {
      let i = 0;
      this.#next = () => i++ % this.#count;
    } else {
      const rng = seededRng((seed ^ 0x5bd1e995) >>> 0);
      this.#next = () => Math.min(this.#count - 1, Math.floor(rng() * this.#count));
    }
  }

  pick(): number {
    return this.#count === 1 ? 0 : this.#next();
  }
}

/** What sync needs of a replica's KV router: the core's observer hook and peer view (a `KvRouter` is one). */
export interface SyncedRouter {
  observe(observer: BookkeepingObserver): void;
  readonly peers: PeerBookings;
}

interface Delivery {
  readonly at: number;
  readonly from: number;
  readonly apply: (peers: PeerBookings, replica: string) => void;
}

/** Peer name of replica `i` in the others' `PeerBookings`. */
function peerName(i: number): string {
  return `replica-${i}`;
}

/**
 * N routers behind one front door, as one `ReplayRouter` of a pool. A
 * request's later calls (prefill done, output, finished) reach the replica
 * that routed it.
 */
export class ReplicaSet implements ReplayRouter {
  readonly policy: string;
  readonly #routers: readonly ReplayRouter[];
  readonly #synced: readonly SyncedRouter[] | null;
  readonly #clock: Clock;
  readonly #delayMs: number;
  readonly #owner = new Map<string, number>();
  #queue: Delivery[] = [];
  #head = 0;
  /** Booking changes applied to peers (one per receiving replica). */
  delivered = 0;

  /** `synced`: each router's KV bookkeeping, in the same order, when sync is on; null for sync off. */
  constructor(
    routers: readonly ReplayRouter[],
    synced: readonly SyncedRouter[] | null,
    clock: Clock,
    syncDelayMs: number,
  ) {
    this.policy = routers[0]!.policy;
    this.#routers = routers;
    this.#synced = synced;
    this.#clock = clock;
    this.#delayMs = syncDelayMs;
    synced?.forEach((r, i) => r.observe(this.#observer(i)));
  }

  /** The replicas' routers, by replica index. */
  get replicas(): readonly ReplayRouter[] {
    return this.#routers;
  }

  route(req: RouteRequest, candidates: readonly number[]): RouteChoice | Promise<RouteChoice> {
    this.runUntil(this.#clock.now());
    const i = req.replica ?? 0;
    if (i < 0 || i >= this.#routers.length)
      throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `replica ${i} out of range (${this.#routers.length} replicas)`);
    this.#owner.set(req.key, i);
    try {
      return this.#routers[i]!.route(req, candidates);
    } catch (err) {
      this.#owner.delete(req.key);
      throw err;
    }
  }

  prefillCompleted(key: string): void {
    this.#ownerOf(key)?.prefillCompleted(key);
  }

  outputTokens(key: string, produced: number): void {
    this.#ownerOf(key)?.outputTokens(key, produced);
  }

  finished(key: string): void {
    const r = this.#ownerOf(key);
    this.#owner.delete(key);
    r?.finished(key);
  }

  applyKvEvents(workerId: number, events: readonly KvEvent[]): void {
    for (const r of this.#routers) r.applyKvEvents(workerId, events);
  }

  tick(): void {
    for (const r of this.#routers) r.tick();
  }

  /** The replicas' prefix indexes: the largest replica's peak (each holds its own index) and every eviction. */
  indexUse(): IndexUse | undefined {
    let use: IndexUse | undefined;
    for (const r of this.#routers) {
      const u = r.indexUse?.();
      if (u === undefined) continue;
      use =
        use === undefined
          ? u
          : {
              budgetBytes: u.budgetBytes,
              peakBytes: Math.max(use.peakBytes, u.peakBytes),
              evictedEntries: use.evictedEntries + u.evictedEntries,
            };
    }
    return use;
  }

  /** When the next sync delivery is due (undefined: none pending). */
  nextEventTime(): number | undefined {
    return this.#head < this.#queue.length ? this.#queue[this.#head]!.at : undefined;
  }

  /** Applies every sync delivery due by `t`, in the order the changes happened. */
  runUntil(t: number): void {
    const synced = this.#synced;
    if (synced === null) return;
    while (this.#head < this.#queue.length && this.#queue[this.#head]!.at <= t) {
      const d = this.#queue[this.#head++]!;
      const name = peerName(d.from);
      for (let j = 0; j < synced.length; j++) {
        if (j === d.from) continue;
        d.apply(synced[j]!.peers, name);
        this.delivered++;
      }
    }
    if (this.#head === this.#queue.length) {
      this.#queue = [];
      this.#head = 0;
    }
  }

  #ownerOf(key: string): ReplayRouter | undefined {
    const i = this.#owner.get(key);
    return i === undefined ? undefined : this.#routers[i];
  }

  /** Replica `from`'s booking changes, queued for the others (the observer must not call back into a scheduler). */
  #observer(from: number): BookkeepingObserver {
    const push = (apply: Delivery['apply']): void => {
      this.#queue.push({ at: this.#clock.now() + this.#delayMs, from, apply });
    };
    return {
      added: (b: SyncedBooking) => push((p, name) => p.add(name, b)),
      prefillCompleted: (id) => push((p, name) => p.prefillCompleted(name, id)),
      outputBlock: (id, blocks, decay) => push((p, name) => p.outputBlocks(name, id, blocks, decay)),
      freed: (id) => push((p, name) => p.free(name, id)),
    };
  }
}
