/**
 * How the engine core turns a request's computed tokens into cached blocks: the sequence hash of
 * a generated block (chained as a prompt's blocks are), the opaque engine hash a KV event carries
 * for a block, and the BlockStored events of the blocks a step newly caches. Pure apart from the
 * pool it registers blocks in and the request whose progress it records.
 */
import { blockHashes, xxh3 } from '../wasm/index.js';
import type { EngineCoreOptions, KvEvent } from './engine-types.js';
import type { KvBlockPool } from './kv-cache.js';
import type { RequestEntry } from './request-entry.js';

const le8 = new DataView(new ArrayBuffer(16));
const le8Bytes = new Uint8Array(le8.buffer);

/** The opaque uint64 published for a sequence hash: XXH3-64 of its 8 bytes (LE) under the engine's seed. */
export function engineHash(seqHash: bigint, engineHashSeed: bigint): bigint {
  le8.setBigUint64(0, seqHash, true);
  return xxh3(le8Bytes.subarray(0, 8), engineHashSeed);
}

/**
 * Caches every block of `r` that is now fully computed, emitting one BlockStored per run of new
 * blocks into `events` (a block already cached under its hash breaks the run), and advances
 * `r.committed` past them.
 */
export function commitFullBlocks(
  r: RequestEntry,
  pool: KvBlockPool,
  options: Pick<EngineCoreOptions, 'blockSize' | 'engineHashSeed'>,
  events: KvEvent[],
): void {
  const { blockSize: bs, engineHashSeed: seed } = options;
  let group: Extract<KvEvent, { type: 'stored' }> | undefined;
  while ((r.committed + 1) * bs <= r.numComputed) {
    const k = r.committed;
    if (k >= r.seqHashes.length) r.seqHashes.push(chainGeneratedBlock(r, k, bs));
    const seqHash = r.seqHashes[k]!;
    const hash = engineHash(seqHash, seed);
    if (pool.register(r.blocks[k]!, seqHash, hash)) {
      if (group === undefined) {
        group = {
          type: 'stored',
          blockHashes: [],
          parentBlockHash: k === 0 ? null : engineHash(r.seqHashes[k - 1]!, seed),
          tokenIds: [],
          blockSize: bs,
          loraName: r.loraName ?? null,
          cacheSalt: r.cacheSalt ?? null,
        };
        events.push(group);
      }
      group.blockHashes.push(hash);
      for (let t = k * bs; t < (k + 1) * bs; t++) group.tokenIds.push(r.tokens[t]!);
    } else {
      group = undefined;
    }
    r.committed++;
  }
}

/** Sequence hash of block k (not a prompt block): local hash of its tokens chained onto block k-1. */
function chainGeneratedBlock(r: RequestEntry, k: number, bs: number): bigint {
  const local = blockHashes(r.tokens.slice(k * bs, (k + 1) * bs), bs, {
    loraName: r.loraName,
    cacheSalt: r.cacheSalt,
  })[0]!;
  if (k === 0) return local;
  le8.setBigUint64(0, r.seqHashes[k - 1]!, true);
  le8.setBigUint64(8, local, true);
  return xxh3(le8Bytes, 1337n);
}
