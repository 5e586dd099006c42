/**
 * Domain types of KV-cache events, after decoding and normalisation.
 *
 * These are strict: hashes are u64 `bigint`s, tokens are a `Uint32Array`
 * covering whole blocks, the storage tier is resolved. The tolerant shapes
 * that arrive on the wire (vLLM tagged arrays and tagged maps, SGLang's
 * flavour) live in `wire.ts` and never leave the decoder.
 */

/** Where a block lives; each tier has its own prefix index so routing can weight them. */
export type StorageTier = 'device' | 'host_pinned' | 'disk' | 'external';
export const STORAGE_TIERS: readonly StorageTier[] = ['device', 'host_pinned', 'disk', 'external'];

/** `BlockStored`: consecutive full blocks under `parentHash` (null = the root). */
export interface StoredBlocksEvent {
  readonly type: 'stored';
  readonly tier: StorageTier;
  /** The engine's opaque id of the block before the first one, u64; null at the root. */
  readonly parentHash: bigint | null;
  /** The engine's opaque ids of the stored blocks, oldest first, u64. */
  readonly blockHashes: BigUint64Array;
  /**
   * Tokens of the stored blocks: exactly `(leadingNullBlocks + blockHashes.length) * blockSize`; hashed
   * block i is `tokenIds.subarray((leadingNullBlocks + i) * blockSize, (leadingNullBlocks + i + 1) * blockSize)`.
   */
  readonly tokenIds: Uint32Array;
  /**
   * Tokens per block as the event states it (may differ from the router's). 0 only for vLLM's offloading placeholder:
   * no tokens and no block kvgate can hash (`blockHashes` empty, every hash in `droppedBlocks`).
   */
  readonly blockSize: number;
  /** Block hashes the engine sent beyond the blocks its `token_ids` cover; those blocks are dropped. */
  readonly droppedBlocks: number;
  readonly loraName: string | undefined;
  /** Deprecated numeric LoRA id; set without `loraName` it means "a LoRA we cannot name". */
  readonly loraId: number | undefined;
  /** SGLang's per-request cache salt (legacy 8th element or map key `cache_salt`). */
  readonly cacheSalt: string | undefined;
  /** Per block, multimodal content hashes found in vLLM's `extra_keys` (64-hex digests, first 16 hex digits). */
  readonly mmHashes: readonly (readonly bigint[] | undefined)[] | undefined;
  /**
   * vLLM's `extra_keys`, first entry: its strings other than multimodal digests (the request's LoRA name and
   * `cache_salt`, unlabelled, on a request's first block). Reported, never hashed. Absent: none (older vLLM, SGLang).
   */
  readonly extraKeyStrings?: readonly string[];
  /** KV-cache group (hybrid models); 0 when absent. */
  readonly groupIdx: number;
  /** vLLM's `kv_cache_spec_kind` of the group (`sliding_window`, `mamba`, ...); absent for full attention. */
  readonly specKind?: string | undefined;
  /** vLLM's `kv_cache_spec_sliding_window`: the group's window in tokens; undefined when absent. */
  readonly slidingWindow?: number | undefined;
  /**
   * Blocks of `tokenIds` before the first hashed block. vLLM skips the null blocks of a sliding-window or
   * Mamba group (blocks that slid out of the window, states not saved) but still sends the tokens of the
   * whole range: `blockHashes[i]` is then block `leadingNullBlocks + i` of `tokenIds`. Absent: 0.
   */
  readonly leadingNullBlocks?: number;
  /**
   * Eagle (speculative decoding) events only: the token after the last block of `tokenIds`. Such an engine sent
   * bigrams, and hashes each block over its tokens plus the next one (Dynamo's `is_eagle` windows).
   */
  readonly eagleNextToken?: number;
  /**
   * Our own hashes of the blocks' tokens (the applier's `storedLocalHashes`), when an ingestion thread
   * computed them before handing the batch over (batch-codec.ts); absent, the applier computes them.
   */
  readonly localHashes?: BigUint64Array;
}

/** `BlockRemoved`: blocks evicted from one tier. Not cascading. */
export interface RemovedBlocksEvent {
  readonly type: 'removed';
  readonly tier: StorageTier;
  readonly blockHashes: BigUint64Array;
  readonly groupIdx: number;
}

/** `AllBlocksCleared`: the publisher dropped its whole cache. */
export interface AllBlocksClearedEvent {
  readonly type: 'cleared';
}

export type KvCacheEvent = StoredBlocksEvent | RemovedBlocksEvent | AllBlocksClearedEvent;
export type KvCacheEventType = KvCacheEvent['type'];

/**
 * Why a message, a batch or one event of a batch could not be used.
 * - `frame_count`: a multipart message without exactly 3 frames.
 * - `bad_sequence`: the sequence frame is not 8 bytes.
 * - `msgpack`: the payload is not one msgpack value.
 * - `batch_shape`: the payload is not `[ts, events, dp_rank?]`.
 * - `unknown_tag`: an event whose tag is not BlockStored/BlockRemoved/AllBlocksCleared: a kind kvgate does not
 *   know, not a malformed event. Reported beside the batch's events as the others are, but the slot writer skips it
 *   (counted by `onUnknownSkipped`, never as a decode error) and applies the rest of the batch (`isUnknownKind`).
 * - `bad_event`: an event with a missing or mistyped field.
 * - `bad_hash`: a block hash that is neither an integer nor non-empty bytes.
 * - `unknown_medium`: a `medium` we cannot map to a storage tier.
 * - `dp_rank_mismatch`: the batch names a dp rank other than the subscription's.
 * - `too_large`: a payload holding more msgpack elements (hashes, tokens) than a batch may (`MAX_BATCH_ELEMENTS`),
 *   refused before it is decoded: decoding it would hold the event loop.
 */
export type DecodeErrorKind =
  | 'frame_count'
  | 'bad_sequence'
  | 'msgpack'
  | 'batch_shape'
  | 'unknown_tag'
  | 'bad_event'
  | 'bad_hash'
  | 'unknown_medium'
  | 'dp_rank_mismatch'
  | 'too_large';

export const DECODE_ERROR_KINDS: readonly DecodeErrorKind[] = [
  'frame_count',
  'bad_sequence',
  'msgpack',
  'batch_shape',
  'unknown_tag',
  'bad_event',
  'bad_hash',
  'unknown_medium',
  'dp_rank_mismatch',
  'too_large',
];

/** An event of a kind kvgate does not know: skipped, the rest of its batch applied (slot-writer.ts, `accept`). */
export function isUnknownKind(error: KvEventDecodeError): boolean {
  return error.kind === 'unknown_tag';
}

/**
 * A decode failure, returned as a value (never thrown): a garbled payload is
 * an input, not a bug, and thousands of them must not cost a stack trace each.
 */
export interface KvEventDecodeError {
  readonly kind: DecodeErrorKind;
  readonly message: string;
  /** Index of the event inside its batch, for per-event failures. */
  readonly eventIndex?: number;
}

/** One decoded `KVEventBatch`. Events that failed to decode are in `errors`; the rest are usable. */
export interface KvEventBatch {
  /** Engine wall-clock seconds when the batch was emitted: carried, never read (any number, NaN included, is taken). */
  readonly ts: number;
  /** `data_parallel_rank` (vLLM) / `attn_dp_rank` (SGLang); null when the engine did not send it. */
  readonly dpRank: number | null;
  readonly events: readonly KvCacheEvent[];
  readonly errors: readonly KvEventDecodeError[];
}

export type DecodeResult =
  { readonly ok: true; readonly batch: KvEventBatch } | { readonly ok: false; readonly error: KvEventDecodeError };
