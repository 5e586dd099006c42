/**
 * The prefix index at several fleet widths: for each slot count in
 * KVGATE_BENCH_SLOTS (default "64,256"; "64,256,1024,4096" for the fleet
 * table), an index filled with the same workload shape (64 shared 512-block
 * documents, each slot holding 32 of them fully or partly, plus private
 * prompts) up to KVGATE_BENCH_ENTRIES_PER_SLOT (default 15,625: 1M entries at
 * 64 slots) entries per slot; bytes per (block, slot) entry and findMatches of
 * a 512-block request (hit, partial, miss), and stored-event application in
 * blocks per second. Run: node --expose-gc dist/bench/run.js wasm/prefix-index
 */
import { PrefixIndex, sequenceHashes } from '../../src/wasm/index.js';
import { seededRng } from '../../src/common/index.js';
import { envIntList, timeAll, type BenchRow, type BenchSection } from '../util.js';

export const title = 'Prefix index: bytes per entry and findMatches (512 blocks) by slot count, and event application';

function randomHashes(rng: () => number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++)
    out[i] = (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
  return out;
}

/** Fills an index over `slots` slots to `target` entries; returns it and the shared documents. */
function fill(rng: () => number, slots: number, target: number): { index: PrefixIndex; docs: BigUint64Array[] } {
  const index = new PrefixIndex();
  const docs = Array.from({ length: 64 }, () => randomHashes(rng, 512));
  for (let s = 0; s < slots && index.size < target; s++) {
    for (let d = 0; d < 32; d++) {
      const doc = docs[(s + d * 2) % docs.length]!;
      const len = d % 4 === 0 ? 512 : 64 + Math.floor(rng() * 448);
      const local = doc.subarray(0, len);
      index.applyStored(s, 0, null, sequenceHashes(local), local); // engines name blocks by content
    }
  }
  let s = 0;
  while (index.size < target) {
    index.applyStored(s, 0, null, randomHashes(rng, 256), randomHashes(rng, 256));
    s = (s + 1) % slots;
  }
  return { index, docs };
}

async function measureWidth(slots: number, perSlot: number): Promise<{ rows: BenchRow[]; note: string }> {
  const rng = seededRng(42);
  const { index, docs } = fill(rng, slots, slots * perSlot);
  // The fill's garbage is collected now (run with --expose-gc), not inside the first timed case.
  (globalThis as { gc?: () => void }).gc?.();
  const fullDoc = docs[0]!;
  const partial = fullDoc.slice();
  partial[300] = 12345n;
  const miss = randomHashes(rng, 512);
  const hit = index.findMatches(fullDoc);
  if (hit.count === 0) throw new Error('workload has no hit for the shared document');
  const fullSeq = sequenceHashes(fullDoc);
  const perEntry = index.bytes / index.size;
  const rows = await timeAll({
    [`${slots} slots: findMatches, 512-block hit (local hashes)`]: () => index.findMatches(fullDoc),
    [`${slots} slots: findMatches, 512-block hit (sequence hashes)`]: () => index.findMatches(fullSeq, true),
    [`${slots} slots: findMatches, diverges at block 300`]: () => index.findMatches(partial),
    [`${slots} slots: findMatches, miss`]: () => index.findMatches(miss),
  });
  rows[0]!.note = `${perEntry.toFixed(1)} B/entry, hit by ${hit.count} slots`;
  const note =
    `${slots} slots: ${index.size.toLocaleString('en-US')} entries, ${index.distinctBlocks.toLocaleString('en-US')} ` +
    `distinct blocks, ${(index.bytes / 2 ** 20).toFixed(1)} MiB, ${perEntry.toFixed(1)} bytes per entry ` +
    `(target <= 40: ${perEntry <= 40 ? 'met' : 'missed'}); findMatches hit p50 ${rows[0]!.p50Us.toFixed(1)} µs`;
  index.dispose();
  return { rows, note };
}

async function measureApply(rng: () => number): Promise<BenchRow> {
  // Stored events of 32 blocks (a 512-token prompt at bs 16), alternating
  // with removals so the index stays at steady size.
  const batches = Array.from({ length: 2048 }, () => ({ local: randomHashes(rng, 32), eng: randomHashes(rng, 32) }));
  const applyIndex = new PrefixIndex();
  let bi = 0;
  const [row] = await timeAll({
    'apply stored (32 blocks) + removed (32 blocks)': () => {
      const b = batches[bi++ % batches.length]!;
      const slot = bi % 64;
      applyIndex.applyStored(slot, 0, null, b.eng, b.local);
      applyIndex.applyRemoved(slot, 0, b.eng);
    },
  });
  applyIndex.dispose();
  row!.note = `${((row!.opsPerSec * 64) / 1e6).toFixed(2)} M blocks/s (stored + removed)`;
  return row!;
}

export async function run(): Promise<BenchSection> {
  const widths = envIntList('KVGATE_BENCH_SLOTS', [64, 256]);
  const [perSlot] = envIntList('KVGATE_BENCH_ENTRIES_PER_SLOT', [15_625]);
  const rows: BenchRow[] = [];
  const notes: string[] = [];
  for (const slots of widths) {
    const m = await measureWidth(slots, perSlot!);
    rows.push(...m.rows);
    notes.push(m.note);
  }
  const apply = await measureApply(seededRng(7));
  rows.push(apply);
  notes.push(`target >= 5 M blocks/s applied on one thread: ${apply.note}`);
  return { title: `${title} (${perSlot!.toLocaleString('en-US')} entries per slot)`, rows, notes };
}
