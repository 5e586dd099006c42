/**
 * One (worker, dp rank)'s part of a prefix-index snapshot, as one replica
 * hands it to another (replica warm start): the KV-event position the blocks
 * are consistent with, and the blocks themselves. Produced and consumed by
 * src/events, carried by src/replicas.
 */
import type { WorkerRank } from './vocabulary.js';

export interface KvSlotSnapshot extends WorkerRank {
  /** The KV-event endpoint the blocks came from: a replica seeds only a subscription to the same publisher. */
  readonly endpoint: string;
  /** Sequence number of the publisher's last batch applied in full to the blocks. */
  readonly cursor: bigint;
  /** Per storage tier holding any, the slot's blocks as interleaved (engine hash, sequence hash) pairs. */
  readonly tiers: readonly { readonly tier: string; readonly pairs: BigUint64Array }[];
  /**
   * The cache salt of the slot's salted blocks (src/events' salt memory), oldest first, as runs of consecutive
   * entries sharing a salt: vLLM names a chain's salt only on the event that starts at the root, so a later event
   * continuing a chain of the snapshot inherits its parent's salt from these. Absent when none (or from a replica
   * that predates them).
   */
  readonly salts?: readonly SaltRun[] | undefined;
  /**
   * A hybrid-attention model's KV-cache groups (src/events' group indexes): each group's spec and the slot's blocks
   * in it, the primary group's blocks being the tiers'. The replica seeded from them knows the model's layout and
   * what each group holds: the events that stored these blocks lie at or before the cursor, so it never sees them.
   * Absent for a one-group model (or from a replica that predates them).
   */
  readonly groups?: readonly KvGroupSnapshot[] | undefined;
}

/** Blocks of one slot, by engine hash, stored under one cache salt. */
export interface SaltRun {
  readonly salt: string;
  readonly hashes: BigUint64Array;
}

/** One KV-cache group of a hybrid model in a slot's snapshot: its spec as the engine announces it, and its blocks. */
export interface KvGroupSnapshot {
  /** The engine's group index (`group_idx`). */
  readonly groupIdx: number;
  /** The engine's name for the group's kind (`kv_cache_spec_kind`). */
  readonly kind: string;
  /** Tokens of the group's window (`kv_cache_spec_sliding_window`; sliding-window kinds only). */
  readonly slidingWindow?: number | undefined;
  /** The slot's blocks in the group as interleaved (engine hash, sequence hash) pairs (none for the primary group). */
  readonly pairs: BigUint64Array;
}
