/**
 * The prefix index sharded by slot over threads (sharded-index.ts): the same stored blocks give the same
 * answer as one `PrefixIndex` (every slot with its depth, from shards that each hold a part of the slots),
 * the entries are spread over the shards and add up to the single index's, refused operations are
 * counted, and a match fans out through shared memory without a message.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { PrefixIndex, ShardedPrefixIndex, sequenceHashes } from '../../src/wasm/index.js';
import { mulberry32 } from '../helpers/rng.js';

function randomHashes(rng: () => number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++)
    out[i] = (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
  return out;
}

/** (worker, rank) -> depth, from either index's answer. */
function single(index: PrefixIndex, hashes: BigUint64Array): Map<string, number> {
  const m = index.findMatches(hashes);
  const out = new Map<string, number>();
  for (let i = 0; i < m.count; i++) {
    const s = index.slotWorker(m.slots[i]!)!;
    out.set(`${s.workerId}:${s.dpRank}`, m.depths[i]!);
  }
  return out;
}

function sharded(index: ShardedPrefixIndex, hashes: BigUint64Array): Map<string, number> {
  const m = index.findMatches(hashes);
  const out = new Map<string, number>();
  for (let i = 0; i < m.count; i++) out.set(`${m.workerIds[i]}:${m.dpRanks[i]}`, m.depths[i]!);
  return out;
}

describe('ShardedPrefixIndex', () => {
  let sh: ShardedPrefixIndex | undefined;
  afterEach(async () => {
    await sh?.close();
    sh = undefined;
  });

  it('answers as one index does, with the slots spread over its shards', async () => {
    const rng = mulberry32(28);
    const one = new PrefixIndex();
    sh = new ShardedPrefixIndex({ shards: 3 });
    const docs = Array.from({ length: 8 }, () => randomHashes(rng, 64));
    for (let w = 0; w < 12; w++) {
      for (let r = 0; r < 2; r++) {
        for (let d = 0; d < 4; d++) {
          const doc = docs[(w + d) % docs.length]!.subarray(0, 1 + Math.floor(rng() * 64));
          const engine = sequenceHashes(doc);
          one.applyStored(w, r, null, engine, doc);
          sh.applyStored(w, r, null, engine, doc);
        }
        const engine = randomHashes(rng, 16);
        const local = randomHashes(rng, 16);
        one.applyStored(w, r, null, engine, local);
        sh.applyStored(w, r, null, engine, local);
      }
    }
    // A parent no slot holds: refused whole, by the shard as by the index.
    sh.applyStored(1, 0, 0xdeadn, randomHashes(rng, 2), randomHashes(rng, 2));
    expect(await sh.flush()).toBe(1);
    const stats = await sh.stats();
    expect(stats).toHaveLength(3);
    expect(stats.every((s) => s.entries > 0)).toBe(true);
    expect(stats.reduce((n, s) => n + s.entries, 0)).toBe(one.size);
    for (const doc of docs) {
      const partial = doc.slice();
      partial[20] = 1n;
      for (const q of [doc, partial, randomHashes(rng, 64)]) expect(sharded(sh, q)).toEqual(single(one, q));
    }
    expect(sh.lateShards).toBe(0);
    one.dispose();
  });
});
