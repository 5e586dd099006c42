/**
 * One in-flight request as `ActiveSequences` holds it (`ActiveRequest`, the record) and the shapes that go in and out
 * of that bookkeeping: what a booking takes (`BookingInput`), a slot's load figures (`SlotLoad`), a request's snapshot
 * (`ActiveRequestInfo`), replica sync's record of one (`SyncedBooking`), and the id prefix of other replicas' bookings.
 */
import type { WorkerRank } from '../common/index.js';
import type { PromptHashes, TrieNode } from '../wasm/index.js';

/** Load figures of one slot. */
export interface SlotLoad {
  /** Uncached prompt tokens of requests whose prefill has not completed. */
  readonly activePrefillTokens: number;
  /** Distinct KV blocks held by in-flight requests (fractional output decay applied, rounded). */
  readonly activeDecodeBlocks: number;
  /** Requests in flight. */
  readonly activeRequests: number;
}

export interface BookingInput {
  /** Context id of the request; unique among in-flight requests. */
  readonly requestId: string;
  /** Scheduler slot id (registered with `ensureSlot`). */
  readonly slot: number;
  /** Prompt hashes whose blocks are shared with other requests on the slot; null = none tracked. */
  readonly hashes: PromptHashes | null;
  /** Prompt blocks counted as new and private to this request (assume_kv_reuse = false). */
  readonly privateBlocks?: number;
  /** Uncached prompt tokens this request adds to the slot's prefill load (0 when not tracking). */
  readonly prefillTokens: number;
  /** The client's expected output length, if it gave one. */
  readonly expectedOutputTokens?: number | undefined;
  /** Its start (clock ms, not after now: the caller checks) if booked again: expiry counts from then. Default: now. */
  readonly startedAt?: number | undefined;
}

/**
 * Ids starting with this character are bookings of other router replicas (`PeerBookings`); a local request id never
 * starts with it (HTTP header values and kvgate's leg ids cannot hold a NUL).
 */
export const PEER_ID_PREFIX = '\u0000';

/** One in-flight request with its shared prompt hashes: what replica sync sends, in both directions. */
export interface SyncedBooking extends WorkerRank {
  readonly requestId: string;
  /** Chained sequence hashes of the prompt blocks shared with other requests (null: none). */
  readonly seq: BigUint64Array | null;
  readonly privateBlocks: number;
  readonly prefillTokens: number;
  readonly expectedOutputTokens: number | undefined;
  readonly prefillCompleted: boolean;
  readonly outputBlocks: number;
  /** Weight of the request's fractional blocks after its last decayed output block (undefined: none). */
  readonly decay: number | undefined;
}

/** A snapshot of one in-flight request. */
export interface ActiveRequestInfo {
  readonly requestId: string;
  readonly slot: number;
  readonly promptBlocks: number;
  readonly prefillTokens: number;
  readonly prefillCompleted: boolean;
  readonly outputBlocks: number;
  readonly expectedOutputTokens: number | undefined;
  readonly startedAt: number;
}

export class ActiveRequest {
  constructor(
    readonly id: string,
    readonly slot: number,
    /** Prompt blocks shared through the trie (null: none). */
    readonly seq: BigUint64Array | null,
    /** The trie node `seq` ends on (what its free starts from; null without `seq`). */
    readonly end: TrieNode | null,
    readonly privateBlocks: number,
    public prefillTokens: number,
    readonly expectedOutputTokens: number | undefined,
    readonly startedAt: number,
  ) {}
  prefillCompleted = false;
  outputBlocks = 0;
  /** Weight of this request's fractional blocks (1 = none). */
  frac = 1;
  /** Blocks marked fractional at the last decayed output block. */
  fracBlocks = 0;
}
