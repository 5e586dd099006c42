/**
 * PeerBookings: the in-flight requests other router replicas booked, as this
 * router's cost model sees them. They live in the same `ActiveSequences` as
 * the router's own bookings, under ids `PEER_ID_PREFIX + replica + NUL + id`,
 * so their load adds to each slot's figures and a prompt prefix in flight on
 * a slot through several replicas counts once there (the active-prompt trie
 * is shared). This class keeps which replica booked what, so a replica's
 * bookings can be dropped at once (it went silent, or sent a snapshot).
 *
 * Every operation is idempotent: a repeated add is ignored, and output
 * progress is an absolute block count, so a message applied twice (a
 * duplicate, or a batch overlapping a snapshot) changes nothing.
 */
import type { WorkerRank } from '../common/index.js';
import type { PromptHashes } from '../wasm/index.js';
import { PEER_ID_PREFIX, type SyncedBooking } from './active-request.js';
import type { ActiveSequences } from './active-sequences.js';
import type { SlotTable } from './scheduler/slots.js';

/** What applying one peer operation did. */
export type PeerApplyOutcome = 'applied' | 'duplicate' | 'unknown_worker' | 'unknown_request';

interface PeerEntry extends WorkerRank {
  readonly key: string;
  outputBlocks: number;
}

export class PeerBookings {
  readonly #active: ActiveSequences;
  readonly #table: SlotTable;
  readonly #drain: () => void;
  /** `routerTrackOutputBlocks` in force: read at each update, since a reload may change the knob. */
  readonly #trackOutputBlocks: () => boolean;
  readonly #byReplica = new Map<string, Map<string, PeerEntry>>();

  constructor(opts: {
    active: ActiveSequences;
    table: SlotTable;
    drain: () => void;
    trackOutputBlocks: () => boolean;
  }) {
    this.#active = opts.active;
    this.#table = opts.table;
    this.#drain = opts.drain;
    this.#trackOutputBlocks = opts.trackOutputBlocks;
  }

  /** Books a peer's request on its (worker, rank) with the prefill load the peer computed. */
  add(replica: string, b: SyncedBooking): PeerApplyOutcome {
    let entries = this.#byReplica.get(replica);
    if (entries?.has(b.requestId) === true) return 'duplicate';
    const slot = this.#table.slotOf(b);
    if (slot === undefined) return 'unknown_worker';
    const key = `${PEER_ID_PREFIX}${replica}${PEER_ID_PREFIX}${b.requestId}`;
    const hashes: PromptHashes | null = b.seq === null ? null : { local: b.seq, seq: b.seq };
    this.#active.add({
      requestId: key,
      slot,
      hashes,
      privateBlocks: b.privateBlocks,
      prefillTokens: b.prefillCompleted ? 0 : b.prefillTokens,
      expectedOutputTokens: b.expectedOutputTokens,
    });
    if (b.prefillCompleted) this.#active.markPrefillCompleted(key);
    if (entries === undefined) this.#byReplica.set(replica, (entries = new Map()));
    const entry: PeerEntry = { key, workerId: b.workerId, dpRank: b.dpRank, outputBlocks: 0 };
    entries.set(b.requestId, entry);
    this.#advance(entry, b.outputBlocks, b.decay);
    return 'applied';
  }

  prefillCompleted(replica: string, requestId: string): PeerApplyOutcome {
    const e = this.#byReplica.get(replica)?.get(requestId);
    if (e === undefined) return 'unknown_request';
    if (!this.#active.markPrefillCompleted(e.key)) return 'duplicate';
    this.#drain();
    return 'applied';
  }

  /** The request now holds `outputBlocks` output blocks (an absolute count), the last with `decay`. */
  outputBlocks(replica: string, requestId: string, outputBlocks: number, decay: number | undefined): PeerApplyOutcome {
    const e = this.#byReplica.get(replica)?.get(requestId);
    if (e === undefined) return 'unknown_request';
    return this.#advance(e, outputBlocks, decay) ? 'applied' : 'duplicate';
  }

  free(replica: string, requestId: string): PeerApplyOutcome {
    const entries = this.#byReplica.get(replica);
    const e = entries?.get(requestId);
    if (entries === undefined || e === undefined) return 'unknown_request';
    entries.delete(requestId);
    if (entries.size === 0) this.#byReplica.delete(replica);
    if (this.#active.free(e.key)) this.#drain();
    return 'applied';
  }

  /** Drops every booking of a replica (it went silent, or its snapshot replaces them). Returns how many. */
  dropReplica(replica: string): number {
    const entries = this.#byReplica.get(replica);
    if (entries === undefined) return 0;
    this.#byReplica.delete(replica);
    for (const e of entries.values()) this.#active.free(e.key);
    this.#drain();
    return entries.size;
  }

  /** Forgets the entries of a worker that left (the bookkeeping dropped its requests with its slots). */
  dropWorker(workerId: number): void {
    for (const [replica, entries] of this.#byReplica) {
      for (const [id, e] of entries) if (e.workerId === workerId) entries.delete(id);
      if (entries.size === 0) this.#byReplica.delete(replica);
    }
  }

  /** Forgets entries the bookkeeping expired (a peer's free that never came). */
  prune(): void {
    for (const [replica, entries] of this.#byReplica) {
      for (const [id, e] of entries) if (!this.#active.has(e.key)) entries.delete(id);
      if (entries.size === 0) this.#byReplica.delete(replica);
    }
  }

  /** Peer requests in flight, per replica. */
  replicaCounts(): Map<string, number> {
    const out = new Map<string, number>();
    for (const [replica, entries] of this.#byReplica) out.set(replica, entries.size);
    return out;
  }

  /** Peer requests in flight on one (worker, rank). */
  requestsOn(slot: WorkerRank): number {
    let n = 0;
    const { workerId, dpRank } = slot;
    for (const entries of this.#byReplica.values())
      for (const e of entries.values()) if (e.workerId === workerId && e.dpRank === dpRank) n++;
    return n;
  }

  #advance(e: PeerEntry, outputBlocks: number, decay: number | undefined): boolean {
    if (!this.#trackOutputBlocks() || outputBlocks <= e.outputBlocks) return false;
    // One step, not one per block: a peer's count may be up to 2^20 (protocol.ts bounds it).
    this.#active.addOutputBlocks(e.key, outputBlocks - e.outputBlocks, decay);
    e.outputBlocks = outputBlocks;
    return true;
  }
}
