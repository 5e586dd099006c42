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
  STORED_FIELDS,
  REMOVED_FIELDS,
  STORED_MIN_ARRAY_LENGTH,
  REMOVED_MIN_ARRAY_LENGTH,
  arrayEventFields,
  decodeMsgpack,
  isWireMapEvent,
  TooManyElements,
} from './wire.js';
import type {
  DecodeResult,
  KvCacheEvent,
  KvEventDecodeError,
  DecodeErrorKind,
  StorageTier,
  StoredBlocksEvent,
  RemovedBlocksEvent,
} from './types.js';

/** The sequence frame's encoder and replay end marker are shared with the mocker (the publisher side). */
export { encodeSeq, REPLAY_END_SEQ } from '../common/index.js';

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

/**
 * A wire value as a decode error's message names it: a string cut to 64 characters, a container by its
 * size, never rendered whole. The engine chose the value: `String()` of a deeply nested array overflows
 * the stack (a throw out of a decoder that must never throw), and of a large one builds a message (and a
 * log line) as large as the payload.
 */
function shown(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 64 ? `${value.slice(0, 64)}...` : value);
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (value instanceof Uint8Array) return `${value.byteLength} bytes`;
  return typeof value === 'object' && value !== null ? 'a map' : String(value);
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

/** vLLM/SGLang `medium` strings to tiers (Dynamo's mapping); null/absent is the device. */
const MEDIUM_TIERS = new Map<string, StorageTier>([
  ['GPU', 'device'],
  ['DEVICE', 'device'],
  ['CUDA', 'device'],
  ['CPU', 'host_pinned'],
  ['CPU_PINNED', 'host_pinned'],
  ['CPU_TIER1', 'host_pinned'],
  ['HOST', 'host_pinned'],
  ['CPU_TIER2', 'disk'],
  ['DISK', 'disk'],
  ['NVME', 'disk'],
  ['SSD', 'disk'],
  ['EXTERNAL', 'external'],
  ['NETWORK', 'external'],
  ['REMOTE', 'external'],
  ['SHARED', 'external'],
]);

export function mediumToTier(medium: unknown): StorageTier | undefined {
  if (medium === null || medium === undefined) return 'device';
  if (typeof medium !== 'string') return undefined;
  return MEDIUM_TIERS.get(medium) ?? MEDIUM_TIERS.get(medium.toUpperCase());
}

/** A wire hash as u64, or undefined when it is not a usable hash. */
export function normaliseHash(value: unknown): bigint | undefined {
  if (typeof value === 'bigint') return BigInt.asUintN(64, value);
  if (typeof value === 'number') return Number.isSafeInteger(value) ? BigInt.asUintN(64, BigInt(value)) : undefined;
  if (value instanceof Uint8Array) {
    if (value.byteLength === 0) return undefined;
    let h = 0n;
    for (let i = Math.max(0, value.byteLength - 8); i < value.byteLength; i++) h = (h << 8n) | BigInt(value[i]!);
    return h;
  }
  return undefined;
}

class EventError {
  constructor(
    readonly kind: DecodeErrorKind,
    readonly message: string,
  ) {}
}

function hashList(value: unknown, field: string): BigUint64Array {
  if (!Array.isArray(value)) throw new EventError('bad_event', `${field} is not an array`);
  const out = new BigUint64Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const h = normaliseHash(value[i]);
    if (h === undefined) throw new EventError('bad_hash', `${field}[${i}] is not a block hash`);
    out[i] = h;
  }
  return out;
}

/**
 * An index or id the engines only ever send as a non-negative integer (vLLM's KV-cache group id and LoRA adapter id,
 * a window in tokens), or nil. A negative one is no engine's: the event is refused, not read as a group, a LoRA or a
 * window no engine has (the applier would treat a negative LoRA id as no LoRA, and index the blocks as the base model's).
 */
function optionalIndex(value: unknown, field: string): number | undefined {
  if (value === null || value === undefined) return undefined;
  const n = typeof value === 'bigint' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n))
    throw new EventError('bad_event', `${field} is not an integer`);
  if (n < 0) throw new EventError('bad_event', `${field} ${n} is negative`);
  return n;
}

function optionalString(value: unknown, field: string): string | undefined {
  if (value === null || value === undefined) return undefined;
  if (typeof value === 'string') return value;
  throw new EventError('bad_event', `${field} is not a string`);
}

function tierOf(value: unknown): StorageTier {
  const tier = mediumToTier(value);
  if (tier === undefined) throw new EventError('unknown_medium', `medium ${shown(value)} has no storage tier`);
  return tier;
}

function u32Token(t: unknown): number | undefined {
  if (typeof t === 'number' && Number.isInteger(t) && t >= 0 && t <= 0xffffffff) return t;
  if (typeof t === 'bigint' && t >= 0n && t <= 0xffffffffn) return Number(t);
  return undefined;
}

/**
 * `token_ids` as the flat token sequence it stands for. Eagle (speculative) engines send bigrams, each position's
 * token with the next one (`[[t0, t1], [t1, t2], ...]`): n bigrams are n + 1 tokens, the last one being the token
 * after the final position, which an Eagle block's hash window ends with. `eagle` says which form came.
 */
function tokenArray(value: unknown, opts: DecodeOptions): { flat: Uint32Array; eagle: boolean } {
  if (!Array.isArray(value)) throw new EventError('bad_event', 'token_ids is not an array');
  if (value.length > 0 && Array.isArray(value[0])) {
    if (opts.eagle !== true)
      throw new EventError(
        'bad_event',
        "token_ids holds bigrams (an Eagle engine's events) but the model's eagle is off",
      );
    return { flat: bigramTokens(value), eagle: true };
  }
  const out = new Uint32Array(value.length);
  for (let i = 0; i < value.length; i++) {
    const t = u32Token(value[i]);
    if (t === undefined) throw new EventError('bad_event', `token_ids[${i}] is not a u32 token id`);
    out[i] = t;
  }
  return { flat: out, eagle: false };
}

/** Eagle bigrams to n + 1 tokens; each pair must start with the token the previous pair ended with. */
function bigramTokens(value: unknown[]): Uint32Array {
  const out = new Uint32Array(value.length + 1);
  for (let i = 0; i < value.length; i++) {
    const p = value[i];
    const a = Array.isArray(p) && p.length === 2 ? u32Token(p[0]) : undefined;
    const b = Array.isArray(p) && p.length === 2 ? u32Token(p[1]) : undefined;
    if (a === undefined || b === undefined)
      throw new EventError('bad_event', `token_ids[${i}] is not a bigram of u32 token ids (the first entry was one)`);
    if (i > 0 && a !== out[i])
      throw new EventError('bad_event', `token_ids[${i}] does not continue the bigram before it`);
    out[i] = a;
    out[i + 1] = b;
  }
  return out;
}

const HEX64 = /^[0-9a-fA-F]{64}$/;

/**
 * vLLM `extra_keys`: one entry per block (a tuple or nil). Entries that are
 * 64-hex-digit digests are multimodal content hashes; Dynamo's rule
 * makes the first 16 hex digits a u64 mm hash. Other entries (the LoRA name,
 * which we already mix into the seed, cache_salt, prompt-embeds digests) are
 * not reproducible from the event and are ignored.
 */
function mmHashesOf(value: unknown, blocks: number): (bigint[] | undefined)[] | undefined {
  if (value === null || value === undefined) return undefined;
  // Not ignored: its multimodal hashes would be lost, and the blocks indexed as the text alone's.
  if (!Array.isArray(value)) throw new EventError('bad_event', `extra_keys ${shown(value)} is not an array`);
  let out: (bigint[] | undefined)[] | undefined;
  const visit = (v: unknown, block: number, depth: number): void => {
    if (typeof v === 'string' && HEX64.test(v)) {
      out ??= new Array<bigint[] | undefined>(blocks).fill(undefined);
      (out[block] ??= []).push(BigInt(`0x${v.slice(0, 16)}`));
    } else if (Array.isArray(v) && depth < 2) {
      for (const x of v) visit(x, block, depth + 1);
    }
  };
  for (let i = 0; i < value.length && i < blocks; i++) visit(value[i], i, 0);
  return out;
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
