/**
 * The prefix index: findMatches of a 512-block request against an index
 * holding 1,000,000 (block, slot) entries over 64 slots, and stored-event
 * application in blocks per second. Hit, partial and miss queries are timed
 * separately. Run: npm run bench -- prefix-index
 */
import { PrefixIndex, sequenceHashes } from '../../src/wasm/index.js';
import { seededRng } from '../../src/common/index.js';
import { timeAll, type BenchSection } from '../util.js';

export const title = 'Prefix index: findMatches (512 blocks, 1M entries, 64 slots) and event application';

function randomHashes(rng: () => number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++)
    out[i] = (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
  return out;
}

export async function run(): Promise<BenchSection> {
  const rng = seededRng(42);
  const index = new PrefixIndex();
  const slots = 64;
  // Workload: 64 shared "documents" of 512 blocks; each slot holds 32 of them
  // (fully or partly), plus private prompts, until 1,000,000 entries.
  const docs = Array.from({ length: 64 }, () => randomHashes(rng, 512));
  let entries = 0;
  for (let s = 0; s < slots; s++) {
    for (let d = 0; d < 32; d++) {
      const doc = docs[(s + d * 2) % docs.length]!;
      const len = d % 4 === 0 ? 512 : 64 + Math.floor(rng() * 448);
      const local = doc.subarray(0, len);
      const eng = sequenceHashes(local); // engines name blocks by content
      index.applyStored(s, 0, null, eng, local);
      entries += len;
    }
  }
  while (index.size < 1_000_000) {
    const s = Math.floor(rng() * slots);
    const local = randomHashes(rng, 256);
    index.applyStored(s, 0, null, randomHashes(rng, 256), local);
  }
  const fullDoc = docs[0]!;
  const partial = fullDoc.slice();
  partial[300] = 12345n;
  const miss = randomHashes(rng, 512);
  const hit = index.findMatches(fullDoc);
  if (hit.count === 0) throw new Error('workload has no hit for the shared document');
  const fullSeq = sequenceHashes(fullDoc);

  const rows = await timeAll({
    'findMatches, 512-block hit (local hashes)': () => index.findMatches(fullDoc),
    'findMatches, 512-block hit (sequence hashes)': () => index.findMatches(fullSeq, true),
    'findMatches, diverges at block 300': () => index.findMatches(partial),
    'findMatches, miss': () => index.findMatches(miss),
  });

  // Event application: stored events of 32 blocks (a 512-token prompt at bs 16),
  // alternating with removals so the index stays at steady size.
  const batches = Array.from({ length: 2048 }, () => {
    const local = randomHashes(rng, 32);
    return { local, eng: randomHashes(rng, 32) };
  });
  const applyIndex = new PrefixIndex();
  let bi = 0;
  const applyRows = await timeAll({
    'apply stored (32 blocks) + removed (32 blocks)': () => {
      const b = batches[bi++ % batches.length]!;
      const slot = bi % 64;
      applyIndex.applyStored(slot, 0, null, b.eng, b.local);
      applyIndex.applyRemoved(slot, 0, b.eng);
    },
  });
  const ar = applyRows[0]!;
  const blocksPerSec = ar.opsPerSec * 64;
  ar.note = `${(blocksPerSec / 1e6).toFixed(2)} M blocks/s (stored + removed)`;
  const p50 = rows[0]!.p50Us;
  return {
    title: `${title}; index: ${index.size.toLocaleString('en-US')} entries, ${index.distinctBlocks.toLocaleString('en-US')} distinct blocks, ${(index.bytes / 2 ** 20).toFixed(1)} MiB; hit depth ${Math.max(...hit.depths)}`,
    rows: [...rows, ...applyRows],
    notes: [
      `target findMatches median < 20 µs: ${p50.toFixed(1)} µs (${p50 < 20 ? 'met' : 'missed'})`,
      `target >= 5 M blocks/s applied on one thread: ${(blocksPerSec / 1e6).toFixed(2)} M (${blocksPerSec >= 5e6 ? 'met' : 'missed'})`,
    ],
  };
}
