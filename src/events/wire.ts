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

/** A payload whose containers hold more elements in all than the bound allows: refused before it is decoded. */
export class TooManyElements extends Error {
  constructor(readonly max: number) {
    super(`the payload holds more than ${max} msgpack elements`);
  }
}

/**
 * Decodes one msgpack value. Throws (RangeError/DecodeError) on malformed or trailing bytes, and
 * before decoding when a container claims more elements than the bytes left could hold (`claimsFit`);
 * `TooManyElements`, before decoding too, when its containers claim more than `maxElements` in all.
 */
export function decodeMsgpack(bytes: Uint8Array, maxElements = Number.POSITIVE_INFINITY): unknown {
  const fits = claimsFit(bytes, maxElements);
  if (fits === TOO_MANY) throw new TooManyElements(maxElements);
  if (!fits) throw new RangeError('a msgpack container claims more elements than the payload holds');
  return decoder.decode(bytes);
}

/** Big-endian unsigned of `n` bytes at `at` (0 past the end: the caller's bounds check fails then). */
function uintAt(bytes: Uint8Array, at: number, n: number): number {
  let v = 0;
  for (let i = 0; i < n; i++) v = v * 256 + (bytes[at + i] ?? 0);
  return v;
}

const INVALID = -1;
const VARIABLE = -2;

/** Per head byte, the bytes its value takes after the head when that is fixed; INVALID (0xc1) or VARIABLE (a length or count follows). */
const FIXED_BODY: Int8Array = (() => {
  const t = new Int8Array(256);
  for (let b = 0xa0; b <= 0xbf; b++) t[b] = b & 0x1f;
  t[0xc1] = INVALID;
  for (const b of [0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xd9, 0xda, 0xdb, 0xdc, 0xdd, 0xde, 0xdf]) t[b] = VARIABLE;
  // float32/64, uint8-64, int8-64
  const widths = [
    [0xca, 4],
    [0xcb, 8],
    [0xcc, 1],
    [0xcd, 2],
    [0xce, 4],
    [0xcf, 8],
    [0xd0, 1],
    [0xd1, 2],
    [0xd2, 4],
    [0xd3, 8],
  ] as const;
  for (const [b, n] of widths) t[b] = n;
  for (let k = 0; k <= 4; k++) t[0xd4 + k] = 1 + (1 << k);
  return t;
})();

/**
 * For a VARIABLE head byte: the bytes after the head that the value takes before any elements (its
 * length or count field, ext's type byte, a bin/str/ext body), and the elements a container opens.
 */
function variableBody(b: number, bytes: Uint8Array, at: number): { body: number; elements: number } {
  const width =
    b === 0xc4 || b === 0xc7 || b === 0xd9
      ? 1
      : b === 0xc5 || b === 0xc8 || b === 0xda || b === 0xdc || b === 0xde
        ? 2
        : 4;
  const n = uintAt(bytes, at, width);
  if (b >= 0xdc) return { body: width, elements: b >= 0xde ? 2 * n : n };
  return { body: width + (b >= 0xc7 && b <= 0xc9 ? 1 : 0) + n, elements: 0 };
}

/**
 * Whether one msgpack value's headers are consistent with its length: every element takes at
 * least a byte, so the elements still owed (summed over the open containers) can never exceed the
 * bytes left. One pass, no allocation on the common path. The decoder trusts a header's count and
 * allocates it first, so without this a frame of nested 4 GiB headers would cost an allocation per claim.
 */
function claimsFit(bytes: Uint8Array, maxElements: number): boolean | typeof TOO_MANY {
  const end = bytes.byteLength;
  let owed = 1;
  let at = 0;
  // Elements claimed by the containers so far: summed at each container's header, so a payload over the bound is
  // refused at the header that passes it, before its elements are read. A claim the bytes cannot hold is checked
  // first: that payload is malformed (`msgpack`), not too large.
  let claimed = 0;
  while (owed > 0) {
    if (at >= end) return false;
    const b = bytes[at++]!;
    let body = FIXED_BODY[b]!;
    owed--;
    if (body === INVALID) return false;
    if (body === VARIABLE) {
      const v = variableBody(b, bytes, at);
      body = v.body;
      owed += v.elements;
      claimed += v.elements;
    } else if (b >= 0x80 && b <= 0x9f) {
      const n = b <= 0x8f ? 2 * (b & 0x0f) : b & 0x0f;
      owed += n;
      claimed += n;
    }
    at += body;
    if (at > end || owed > end - at) return false;
    if (claimed > maxElements) return TOO_MANY;
  }
  return true;
}

const TOO_MANY = 'too_many';

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
