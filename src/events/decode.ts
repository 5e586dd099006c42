/**
 * Pure decoders from ZMQ frames and msgpack payloads to domain events.
 *
 * One decoder handles every flavour: vLLM tagged arrays of any length >= the
 * oldest layout, vLLM tagged maps, SGLang's arrays (with its 8th element, a
 * `{cache_salt}` map, in the slot where vLLM has `lora_name`) and SGLang's
 * maps. Hashes are normalised to u64 (`BigInt.asUintN(64, x)`, so SGLang's
 * signed int64 and old vLLM's negative Python hashes map bitwise), and digest
 * bytes (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) fold to their last 8
 * bytes big-endian, which is what vLLM itself sends in int mode.
 *
 * Nothing here throws on bad input: failures are `KvEventDecodeError` values.
 * A failure of the whole payload rejects the batch; a failure of one event
 * is reported beside the others (`errors`, by event index), and the slot writer then refuses the batch: its
 * stores, keeping its removals; an unknown tag only skips its event (slot-writer.ts, `accept`).
 */
import { blockSize as checkBlockSize, MAX_BLOCK_SIZE } from '../common/index.js';
import {
  EventError,
  hashList,
  mmHashesOf,
  normaliseHash,
  optionalIndex,
  optionalString,
  shown,
  tierOf,
  tokenArray,
} from './event-fields.js';
import {
  STORED_FIELDS,
  REMOVED_FIELDS,
  STORED_MIN_ARRAY_LENGTH,
  REMOVED_MIN_ARRAY_LENGTH,
  arrayEventFields,
  decodeMsgpack,
  isWireMapEvent,
  TooManyElements,
} from './wire.js';
import { extraKeyStringsOf } from './extra-keys.js';
import type {
  DecodeResult,
  KvCacheEvent,
  KvEventDecodeError,
  DecodeErrorKind,
  StoredBlocksEvent,
  RemovedBlocksEvent,
} from './types.js';

/** The sequence frame's encoder and replay end marker are shared with the mocker (the publisher side). */
export { encodeSeq, REPLAY_END_SEQ } from '../common/index.js';
/** The field readers' public pair (events' index and tests import them from here). */
export { mediumToTier, normaliseHash } from './event-fields.js';

/** A message as it comes off a SUB socket (or a replay DEALER after its empty delimiter). */
export interface SequencedPayload {
  readonly seq: bigint;
  readonly payload: Uint8Array;
}

export type FrameResult =
  { readonly ok: true; readonly value: SequencedPayload } | { readonly ok: false; readonly error: KvEventDecodeError };

function fail(kind: DecodeErrorKind, message: string, eventIndex?: number): KvEventDecodeError {
  return eventIndex === undefined ? { kind, message } : { kind, message, eventIndex };
}

/** Reads an 8-byte big-endian u64 sequence frame. */
export function readSeq(frame: Uint8Array): bigint | undefined {
  if (frame.byteLength !== 8) return undefined;
  return new DataView(frame.buffer, frame.byteOffset, 8).getBigUint64(0, false);
}

/**
 * Splits a 3-frame message: `[topic, seq, payload]` from the SUB socket, or
 * `[empty delimiter, seq, payload]` as a replay DEALER receives it.
 */
export function parseEventFrames(frames: readonly Uint8Array[]): FrameResult {
  if (frames.length !== 3) {
    return { ok: false, error: fail('frame_count', `expected 3 frames, got ${frames.length}`) };
  }
  const seq = readSeq(frames[1]!);
  if (seq === undefined) {
    return { ok: false, error: fail('bad_sequence', `sequence frame has ${frames[1]!.byteLength} bytes, expected 8`) };
  }
  return { ok: true, value: { seq, payload: frames[2]! } };
}

function decodeStored(f: Record<string, unknown>, sglangExtra: unknown, opts: DecodeOptions): StoredBlocksEvent {
  const hashes = hashList(f.block_hashes, 'block_hashes');
  const parentRaw = f.parent_block_hash;
  let parentHash: bigint | null = null;
  if (parentRaw !== null && parentRaw !== undefined) {
    const p = normaliseHash(parentRaw);
    if (p === undefined) throw new EventError('bad_hash', 'parent_block_hash is not a block hash');
    parentHash = p;
  }
  // vLLM's offloading connector stands for a chunk it cannot describe (another group's, or its self-describing
  // events off, the default) by a store of its hashes with no tokens and a block size of 0, in the same batch as the
  // step's GPU stores: a store of no block kvgate can hash (all dropped), not a malformed event that refuses them.
  const placeholder = f.block_size === 0 && Array.isArray(f.token_ids) && f.token_ids.length === 0;
  let blockSize = 0;
  if (!placeholder)
    try {
      blockSize = checkBlockSize(f.block_size);
    } catch {
      // The vocabulary's rule, reported as a decode error of this event (never thrown out of the decoder).
      throw new EventError(
        'bad_event',
        `block_size ${shown(f.block_size)} is not an integer in [1, ${MAX_BLOCK_SIZE}]`,
      );
    }
  const { flat, eagle } = tokenArray(f.token_ids, opts);
  let tokens = eagle ? flat.subarray(0, flat.length - 1) : flat;
  const specKind = optionalString(f.kv_cache_spec_kind, 'kv_cache_spec_kind');
  const slidingWindow = optionalIndex(f.kv_cache_spec_sliding_window, 'kv_cache_spec_sliding_window');
  const leadingNullBlocks = nullBlocksOf(specKind, tokens.length, hashes.length, blockSize);
  // Fewer tokens than blocks: keep the leading full blocks (Dynamo's publisher
  // stops at the first partial block); the rest cannot be hashed.
  const blocks = placeholder ? 0 : Math.floor(tokens.length / blockSize) - leadingNullBlocks;
  let blockHashes = hashes;
  if (blocks < hashes.length) {
    blockHashes = hashes.slice(0, blocks);
    tokens = tokens.subarray(0, (leadingNullBlocks + blocks) * blockSize);
  }
  let cacheSalt = optionalString(f.cache_salt, 'cache_salt');
  if (isWireMapEvent(sglangExtra)) cacheSalt ??= optionalString(sglangExtra.cache_salt, 'cache_salt');
  return {
    type: 'stored',
    tier: tierOf(f.medium),
    parentHash,
    blockHashes,
    tokenIds: tokens,
    blockSize,
    droppedBlocks: hashes.length - blocks,
    loraName: optionalString(f.lora_name, 'lora_name') || undefined,
    loraId: optionalIndex(f.lora_id, 'lora_id'),
    cacheSalt: cacheSalt || undefined,
    mmHashes: mmHashesOf(f.extra_keys, blocks),
    ...extraKeyStringsOf(f.extra_keys),
    groupIdx: optionalIndex(f.group_idx, 'group_idx') ?? 0,
    // Full attention is what an absent kind means: only the other kinds are carried.
    ...(specKind !== undefined && specKind !== 'full_attention' ? { specKind } : {}),
    ...(slidingWindow !== undefined ? { slidingWindow } : {}),
    ...(leadingNullBlocks > 0 ? { leadingNullBlocks } : {}),
    ...(eagle ? { eagleNextToken: flat[tokens.length]! } : {}),
  };
}

/** Kinds whose groups hold null blocks vLLM leaves out of `block_hashes` (`BlockPool.cache_full_blocks`). */
const SPARSE_KINDS = new Set(['sliding_window', 'sliding_window_mla', 'mamba', 'chunked_local_attention']);

/**
 * Blocks of `token_ids` that have no hash. For a full-attention group (or no kind) that is an error, as
 * before: every block of the range is stored. A sliding-window or Mamba group skips its null blocks, which
 * lead the range (blocks outside the window, states not saved), so the hashes are the trailing blocks.
 */
function nullBlocksOf(specKind: string | undefined, tokens: number, hashes: number, blockSize: number): number {
  if (tokens <= hashes * blockSize) return 0;
  if (specKind !== undefined && SPARSE_KINDS.has(specKind.toLowerCase()) && tokens % blockSize === 0)
    return tokens / blockSize - hashes;
  throw new EventError('bad_event', `token_ids has ${tokens} tokens, more than ${hashes} blocks of ${blockSize}`);
}

function decodeRemoved(f: Record<string, unknown>): RemovedBlocksEvent {
  return {
    type: 'removed',
    tier: tierOf(f.medium),
    blockHashes: hashList(f.block_hashes, 'block_hashes'),
    groupIdx: optionalIndex(f.group_idx, 'group_idx') ?? 0,
  };
}

const CLEARED: KvCacheEvent = Object.freeze({ type: 'cleared' });

function decodeEvent(ev: unknown, opts: DecodeOptions): KvCacheEvent {
  if (Array.isArray(ev)) {
    const tag = ev[0];
    if (typeof tag !== 'string') throw new EventError('bad_event', 'event array does not start with a tag string');
    switch (tag) {
      case 'BlockStored': {
        if (ev.length < STORED_MIN_ARRAY_LENGTH)
          throw new EventError(
            'bad_event',
            `BlockStored array has ${ev.length} elements, expected >= ${STORED_MIN_ARRAY_LENGTH}`,
          );
        const f = arrayEventFields(ev, STORED_FIELDS);
        // SGLang puts a `{cache_salt}` map where vLLM has `lora_name`.
        let extra: unknown;
        if (isWireMapEvent(f.lora_name)) {
          extra = f.lora_name;
          delete f.lora_name;
        }
        return decodeStored(f, extra, opts);
      }
      case 'BlockRemoved':
        if (ev.length < REMOVED_MIN_ARRAY_LENGTH)
          throw new EventError(
            'bad_event',
            `BlockRemoved array has ${ev.length} elements, expected >= ${REMOVED_MIN_ARRAY_LENGTH}`,
          );
        return decodeRemoved(arrayEventFields(ev, REMOVED_FIELDS));
      case 'AllBlocksCleared':
        return CLEARED;
      default:
        throw new EventError('unknown_tag', `unknown event tag ${shown(tag)}`);
    }
  }
  if (isWireMapEvent(ev)) {
    const tag = ev.type;
    if (typeof tag !== 'string') throw new EventError('bad_event', 'event map has no string "type"');
    switch (tag) {
      case 'BlockStored':
        if (!('block_hashes' in ev) || !('token_ids' in ev) || !('block_size' in ev)) {
          throw new EventError('bad_event', 'BlockStored map lacks block_hashes, token_ids or block_size');
        }
        return decodeStored(ev, undefined, opts);
      case 'BlockRemoved':
        if (!('block_hashes' in ev)) throw new EventError('bad_event', 'BlockRemoved map lacks block_hashes');
        return decodeRemoved(ev);
      case 'AllBlocksCleared':
        return CLEARED;
      default:
        throw new EventError('unknown_tag', `unknown event tag ${shown(tag)}`);
    }
  }
  throw new EventError('bad_event', 'event is neither a tagged array nor a tagged map');
}

/**
 * Msgpack elements (array items, map keys and values: a batch's hashes and tokens, nearly all) a batch may hold
 * by default. A payload is decoded whole, on the thread that reads it (the main thread without ingestion threads),
 * and its events then hold every hash, so its cost cannot be spread over event-loop turns as applying its events
 * is: about 100 ns a block hash and 35 ns a token, so one valid 64 MiB batch (a removal of 30M one-byte hashes)
 * held the event loop for 1.3 s. This bound holds a batch to about 100 ms at worst, and is far above what an
 * engine sends: one batch per scheduler step, whose stored tokens are at most the step's
 * (`max_num_batched_tokens`) and whose removals are one event per evicted block. A batch past it is refused
 * before it is decoded (`too_large`: counted and logged as any decode error).
 */
export const MAX_BATCH_ELEMENTS = 2 ** 20;

/** How a model's events are read. */
export interface DecodeOptions {
  /** The model hashes Eagle windows (its `eagle`): bigram `token_ids` are accepted, else they are a `bad_event`. */
  readonly eagle?: boolean | undefined;
  /** Msgpack elements a batch may hold in all (`MAX_BATCH_ELEMENTS` by default); past them it is `too_large`. */
  readonly maxElements?: number | undefined;
}

/** Decodes one msgpack `KVEventBatch` payload. Never throws. */
export function decodeKvEventBatch(payload: Uint8Array, opts: DecodeOptions = {}): DecodeResult {
  let raw: unknown;
  try {
    raw = decodeMsgpack(payload, opts.maxElements ?? MAX_BATCH_ELEMENTS);
  } catch (err) {
    if (err instanceof TooManyElements)
      return {
        ok: false,
        error: fail('too_large', `batch refused unread: ${err.message} (${payload.byteLength} bytes)`),
      };
    return {
      ok: false,
      error: fail('msgpack', `payload is not msgpack: ${err instanceof Error ? err.message : String(err)}`),
    };
  }
  if (!Array.isArray(raw) || raw.length < 2)
    return { ok: false, error: fail('batch_shape', 'payload is not an array [ts, events, dp_rank?]') };
  const [tsRaw, eventsRaw, rankRaw] = raw as unknown[];
  let ts: number;
  if (typeof tsRaw === 'number') ts = tsRaw;
  else if (typeof tsRaw === 'bigint') ts = Number(tsRaw);
  else return { ok: false, error: fail('batch_shape', 'batch ts is not a number') };
  if (!Array.isArray(eventsRaw)) return { ok: false, error: fail('batch_shape', 'batch events is not an array') };
  let dpRank: number | null = null;
  if (rankRaw !== null && rankRaw !== undefined) {
    if (typeof rankRaw !== 'number' || !Number.isInteger(rankRaw) || rankRaw < 0 || rankRaw > 0xffff) {
      return {
        ok: false,
        error: fail('batch_shape', `batch dp rank ${shown(rankRaw)} is not an integer in [0, 65535]`),
      };
    }
    dpRank = rankRaw;
  }
  const events: KvCacheEvent[] = [];
  const errors: KvEventDecodeError[] = [];
  for (let i = 0; i < eventsRaw.length; i++) {
    try {
      events.push(decodeEvent(eventsRaw[i], opts));
    } catch (err) {
      if (err instanceof EventError) errors.push(fail(err.kind, err.message, i));
      else errors.push(fail('bad_event', err instanceof Error ? err.message : String(err), i));
    }
  }
  return { ok: true, batch: { ts, dpRank, events, errors } };
}
