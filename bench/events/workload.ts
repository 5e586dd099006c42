/**
 * A seeded KV-event workload shaped like a vLLM engine under load: chains of
 * 16-token blocks stored two blocks per event, then evicted one block per
 * event, 8 events per batch. The sequence of batches is a closed loop (the
 * index is empty again at its end), so benches can cycle through it forever
 * with bounded state.
 *
 * `saltedShare`: the share of chains whose requests carry a `cache_salt` (a tenant's, one of 16), reported as
 * vLLM does (vLLM encodings only): in block 0's `extra_keys` of the chain's first event alone, the later events
 * of the chain inheriting it (src/events/salt-memory.ts). Which chains are salted comes from a generator of its
 * own, so the tokens and hashes are those of the unsalted loop.
 */
import { encode } from '@msgpack/msgpack';
import { seededRng } from '../../src/common/index.js';

export type BenchEncoding = 'vllm-array' | 'vllm-map' | 'sglang-map';

export interface EventLoop {
  /** Encoded `KVEventBatch` payloads, in order. */
  payloads: Uint8Array[];
  /** Events per payload, parallel to `payloads`. */
  eventCounts: number[];
  blockSize: number;
}

export interface EventLoopOptions {
  encoding?: BenchEncoding;
  seed?: number;
  chains?: number;
  blocksPerChain?: number;
  blockSize?: number;
  blocksPerStore?: number;
  eventsPerBatch?: number;
  /** Share of chains salted vLLM-style, in [0, 1] (default 0). */
  saltedShare?: number;
}

function stored(
  encoding: BenchEncoding,
  hashes: bigint[],
  parent: bigint | null,
  tokens: number[],
  blockSize: number,
  salt: string | undefined,
): unknown {
  if (salt !== undefined && encoding === 'sglang-map') throw new Error('saltedShare is for vLLM encodings');
  // vLLM's extra_keys: one entry per block, block 0's the request's salt (the chain's root event only).
  const extraKeys = salt === undefined ? null : hashes.map((_, i) => (i === 0 ? [salt] : null));
  const h = encoding === 'sglang-map' ? hashes.map((x) => BigInt.asIntN(64, x)) : hashes;
  const p = parent === null ? null : encoding === 'sglang-map' ? BigInt.asIntN(64, parent) : parent;
  if (encoding === 'vllm-array')
    return ['BlockStored', h, p, tokens, blockSize, null, 'GPU', null, extraKeys, 0, 'full_attention', null];
  if (encoding === 'vllm-map') {
    return {
      type: 'BlockStored',
      block_hashes: h,
      parent_block_hash: p,
      token_ids: tokens,
      block_size: blockSize,
      lora_id: null,
      medium: 'GPU',
      lora_name: null,
      ...(extraKeys === null ? {} : { extra_keys: extraKeys }),
      group_idx: 0,
      kv_cache_spec_kind: 'full_attention',
    };
  }
  return {
    type: 'BlockStored',
    block_hashes: h,
    parent_block_hash: p,
    token_ids: tokens,
    block_size: blockSize,
    lora_id: null,
    medium: 'GPU',
  };
}

function removed(encoding: BenchEncoding, hash: bigint): unknown {
  if (encoding === 'vllm-array') return ['BlockRemoved', [hash], 'GPU', 0];
  if (encoding === 'vllm-map') return { type: 'BlockRemoved', block_hashes: [hash], medium: 'GPU', group_idx: 0 };
  return { type: 'BlockRemoved', block_hashes: [BigInt.asIntN(64, hash)], medium: 'GPU' };
}

export function eventLoop(opts: EventLoopOptions = {}): EventLoop {
  const encoding = opts.encoding ?? 'vllm-array';
  const rng = seededRng(opts.seed ?? 7);
  const chains = opts.chains ?? 256;
  const perChain = opts.blocksPerChain ?? 8;
  const bs = opts.blockSize ?? 16;
  const perStore = opts.blocksPerStore ?? 2;
  const perBatch = opts.eventsPerBatch ?? 8;
  const u64 = (): bigint => (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
  const events: unknown[] = [];
  const allHashes: bigint[] = [];
  // Stores interleave chains (as concurrent requests do), each chain growing in order.
  const saltRng = seededRng((opts.seed ?? 7) + 1);
  const share = opts.saltedShare ?? 0;
  const chainState = Array.from({ length: chains }, () => ({
    last: null as bigint | null,
    stored: 0,
    salt: saltRng() < share ? `tenant-${Math.floor(saltRng() * 16)}` : undefined,
  }));
  for (let round = 0; round < perChain / perStore; round++) {
    for (const c of chainState) {
      const hashes = Array.from({ length: perStore }, u64);
      const tokens = Array.from({ length: perStore * bs }, () => Math.floor(rng() * 150_000));
      events.push(stored(encoding, hashes, c.last, tokens, bs, c.last === null ? c.salt : undefined));
      c.last = hashes[hashes.length - 1]!;
      allHashes.push(...hashes);
    }
  }
  for (const h of allHashes) events.push(removed(encoding, h));
  const payloads: Uint8Array[] = [];
  const eventCounts: number[] = [];
  for (let i = 0; i < events.length; i += perBatch) {
    const slice = events.slice(i, i + perBatch);
    payloads.push(encode([1.5, slice, 0], { useBigInt64: true }));
    eventCounts.push(slice.length);
  }
  return { payloads, eventCounts, blockSize: bs };
}
