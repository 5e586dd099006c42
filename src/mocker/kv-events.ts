/**
 * KV-event wire encoding, byte for byte as vLLM and SGLang publish it
 * (vLLM's msgspec batches, SGLang's variant). Pinned by
 * test/mocker/kv-events.test.ts against example bytes of a vLLM batch.
 *
 * Batch: positional `[ts, events, data_parallel_rank]` (SGLang calls the third
 * field attn_dp_rank; same position). `ts` is always a float64 (msgspec writes
 * a Python float as `cb` even when it is integral), so the batch header is
 * written by hand and only the rest goes through @msgpack/msgpack.
 *
 * Events, by flavour and encoding:
 *
 *   vllm  array  legacy (<= 0.23) tag-first positional arrays with 11 BlockStored
 *                fields: [tag, block_hashes, parent_block_hash, token_ids,
 *                block_size, lora_id, medium, lora_name, extra_keys, group_idx,
 *                kv_cache_spec_kind, kv_cache_spec_sliding_window] (trailing nils
 *                kept, as msgspec keeps them; extra_keys set for a salted request,
 *                its cache_salt in block 0's entry); BlockRemoved [tag, block_hashes,
 *                medium, group_idx]; AllBlocksCleared [tag].
 *   vllm  map    tagged maps (after vLLM #42892): "type" first, defaults omitted,
 *                required nils kept, group_idx 0 and kv_cache_spec_kind
 *                "full_attention" as a single-group model sends them.
 *   sglang array [tag, block_hashes, parent_block_hash, token_ids, block_size,
 *                lora_id, medium] (+ {cache_salt} as 8th element when salted);
 *                BlockRemoved [tag, block_hashes, medium].
 *   sglang map   {type, block_hashes, parent_block_hash, token_ids, block_size,
 *                lora_id, medium, cache_salt?, lora_name?}; BlockRemoved {type,
 *                block_hashes, medium}.
 *
 * Hashes: vLLM sends uint64 (`cf` above 2^32), SGLang signed int64 (`d3` when
 * negative); integers are written in msgpack's smallest form, as msgspec does.
 */
import { encode } from '@msgpack/msgpack';
import type { EngineDialect } from '../common/index.js';
import type { KvEvent } from './engine-types.js';

export type KvEventsEncoding = 'array' | 'map';

export interface EventEncodingOptions {
  encoding: KvEventsEncoding;
  /** Which engine's wire format (hash signedness, field layout). */
  flavour: EngineDialect;
  /** Storage tier; vLLM GPU blocks are "GPU". */
  medium?: string;
}

/** An integer in msgpack's smallest form: a number when it fits 32 bits, else a bigint (uint64 `cf` / int64 `d3`). */
function wireInt(v: bigint): number | bigint {
  if (v >= -0x80000000n && v <= 0xffffffffn) return Number(v);
  return v;
}

function wireHash(h: bigint, flavour: EngineDialect): number | bigint {
  return wireInt(flavour === 'sglang' ? BigInt.asIntN(64, h) : BigInt.asUintN(64, h));
}

/**
 * vLLM's `extra_keys` of a salted request's blocks: one entry a block, the request's first block (an event from the
 * root) with what went into its hash beyond the tokens (the LoRA name, then the `cache_salt`), the others nil. Nil
 * when unsalted (the mocker models no other extra key; the byte-pinned unsalted layout stays as it was).
 */
function vllmExtraKeys(ev: Extract<KvEvent, { type: 'stored' }>): (string[] | null)[] | null {
  if (ev.cacheSalt === null) return null;
  const out: (string[] | null)[] = ev.blockHashes.map(() => null);
  if (ev.parentBlockHash === null && out.length > 0)
    out[0] = ev.loraName !== null ? [ev.loraName, ev.cacheSalt] : [ev.cacheSalt];
  return out;
}

/** The msgpack value of one event (before encoding). */
function wireEvent(ev: KvEvent, opts: EventEncodingOptions): unknown {
  const { encoding, flavour } = opts;
  const medium = opts.medium ?? 'GPU';
  switch (ev.type) {
    case 'stored': {
      const hashes = ev.blockHashes.map((h) => wireHash(h, flavour));
      const parent = ev.parentBlockHash === null ? null : wireHash(ev.parentBlockHash, flavour);
      if (flavour === 'vllm') {
        if (encoding === 'array') {
          return [
            'BlockStored',
            hashes,
            parent,
            ev.tokenIds,
            ev.blockSize,
            null,
            medium,
            ev.loraName,
            vllmExtraKeys(ev),
            ev.groupIdx ?? null,
            ev.specKind ?? null,
            ev.slidingWindow ?? null,
          ];
        }
        return {
          type: 'BlockStored',
          block_hashes: hashes,
          parent_block_hash: parent,
          token_ids: ev.tokenIds,
          block_size: ev.blockSize,
          lora_id: null,
          medium,
          lora_name: ev.loraName,
          ...(ev.cacheSalt !== null ? { extra_keys: vllmExtraKeys(ev) } : {}),
          group_idx: ev.groupIdx ?? 0,
          kv_cache_spec_kind: ev.specKind ?? 'full_attention',
          ...(ev.slidingWindow != null ? { kv_cache_spec_sliding_window: ev.slidingWindow } : {}),
        };
      }
      if (encoding === 'array') {
        const arr: unknown[] = ['BlockStored', hashes, parent, ev.tokenIds, ev.blockSize, null, medium];
        if (ev.cacheSalt !== null) arr.push({ cache_salt: ev.cacheSalt });
        return arr;
      }
      const m: Record<string, unknown> = {
        type: 'BlockStored',
        block_hashes: hashes,
        parent_block_hash: parent,
        token_ids: ev.tokenIds,
        block_size: ev.blockSize,
        lora_id: null,
        medium,
      };
      if (ev.cacheSalt !== null) m.cache_salt = ev.cacheSalt;
      if (ev.loraName !== null) m.lora_name = ev.loraName;
      return m;
    }
    case 'removed': {
      const hashes = ev.blockHashes.map((h) => wireHash(h, flavour));
      if (flavour === 'vllm') {
        return encoding === 'array'
          ? ['BlockRemoved', hashes, medium, ev.groupIdx ?? null]
          : { type: 'BlockRemoved', block_hashes: hashes, medium, group_idx: ev.groupIdx ?? 0 };
      }
      return encoding === 'array'
        ? ['BlockRemoved', hashes, medium]
        : { type: 'BlockRemoved', block_hashes: hashes, medium };
    }
    case 'cleared':
      return encoding === 'array' ? ['AllBlocksCleared'] : { type: 'AllBlocksCleared' };
  }
}

/**
 * One KV-event batch payload (frame 2): `[ts, events, rank]`.
 * @param ts seconds since the epoch (float64 on the wire)
 */
export function encodeEventBatch(
  ts: number,
  events: readonly KvEvent[],
  rank: number | null,
  opts: EventEncodingOptions,
): Uint8Array {
  const header = new Uint8Array(10);
  header[0] = 0x93;
  header[1] = 0xcb;
  new DataView(header.buffer).setFloat64(2, ts);
  const body = encode(
    events.map((e) => wireEvent(e, opts)),
    { useBigInt64: true },
  );
  const tail = encode(rank, { useBigInt64: true });
  const out = new Uint8Array(header.length + body.length + tail.length);
  out.set(header, 0);
  out.set(body, header.length);
  out.set(tail, header.length + body.length);
  return out;
}
