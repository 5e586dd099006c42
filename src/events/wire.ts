/**
 * Wire shapes of vLLM and SGLang KV-event payloads, exactly as msgpack gives
 * them to us (vLLM's msgspec batches and SGLang's variant). These types are
 * tolerant on purpose and only `decode.ts` reads them.
 *
 * The payload is msgspec's `EventBatch`, always positional:
 * `[ts, events, data_parallel_rank | attn_dp_rank]` (old vLLM: 2 elements).
 * Each event is either
 * - a tagged array `[tag, ...fields]` (vLLM <= 0.23, SGLang <= ~0.5.19), whose
 *   length grows with the engine version (trailing nils are still written), or
 * - a tagged map `{type: tag, field: value, ...}` (vLLM after #42892, SGLang
 *   after #37482), where fields at their default are omitted.
 */
import { Decoder } from '@msgpack/msgpack';

export interface WireMapEvent {
  readonly type: string;
  readonly [field: string]: unknown;
}

/** Field names of `BlockStored` in positional order (index 0 of the array is the tag). */
export const STORED_FIELDS = [
  'block_hashes',
  'parent_block_hash',
  'token_ids',
  'block_size',
  'lora_id',
  'medium',
  'lora_name',
  'extra_keys',
  'group_idx',
  'kv_cache_spec_kind',
  'kv_cache_spec_sliding_window',
] as const;

/** Field names of `BlockRemoved` in positional order. */
export const REMOVED_FIELDS = ['block_hashes', 'medium', 'group_idx'] as const;

/** Tag + block_hashes, parent_block_hash, token_ids, block_size: the oldest vLLM/SGLang positional layout. */
export const STORED_MIN_ARRAY_LENGTH = 5;
export const REMOVED_MIN_ARRAY_LENGTH = 2;

/**
 * One shared decoder: `useBigInt64` makes uint64/int64 values `bigint` so
 * hashes above 2^53 keep every bit; smaller ints (token ids, block sizes,
 * fixint hashes) still come back as `number`.
 */
const decoder = new Decoder({ useBigInt64: true });

/** Decodes one msgpack value. Throws (RangeError/DecodeError) on malformed or trailing bytes. */
export function decodeMsgpack(bytes: Uint8Array): unknown {
  return decoder.decode(bytes);
}

export function isWireMapEvent(value: unknown): value is WireMapEvent {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

/** Reads a positional event into a name-keyed record (missing trailing fields are absent). */
export function arrayEventFields(ev: readonly unknown[], names: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const n = Math.min(ev.length - 1, names.length);
  for (let i = 0; i < n; i++) out[names[i]!] = ev[i + 1];
  return out;
}
