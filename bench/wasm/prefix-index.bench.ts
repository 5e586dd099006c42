/**
 * The prefix index at several fleet widths: for each slot count in
 * KVGATE_BENCH_SLOTS (default "64,256"; "64,256,1024,4096" for the fleet
 * table), an index filled with the same workload shape (64 shared 512-block
 * documents, each slot holding 32 of them fully or partly, plus private
 * prompts) up to KVGATE_BENCH_ENTRIES_PER_SLOT (default 15,625: 1M entries at
 * 64 slots) entries per slot; bytes per (block, slot) entry and findMatches of
 * a 512-block request (hit, partial, miss), and stored-event application in
 * blocks per second. Run: node --expose-gc dist/bench/run.js wasm/prefix-index
 *
 * With KVG_BENCH_BASE=<a checkout of the base commit, built>, each width also
 * fills the base's index (its dist/ modules and build/kvgate.wasm loaded in this
 * thread: a module instance of its own) and times findMatches of both builds in
 * alternating batches of 20 calls (KVGATE_BENCH_AB_ROUNDS batches each, default
 * 400), after checking that both give the same answer: a noisy machine's drift
 * falls on both alike.
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import * as thisBuild from '../../src/wasm/index.js';
import { seededRng } from '../../src/common/index.js';
import { envIntList, timeAll, type BenchRow, type BenchSection } from '../util.js';

const { PrefixIndex } = thisBuild;
type PrefixIndex = thisBuild.PrefixIndex;
/** A build's prefix index: this one's, or the base's (KVG_BENCH_BASE). */
type IndexBuild = Pick<typeof thisBuild, 'PrefixIndex' | 'sequenceHashes'>;

export const title = 'Prefix index: bytes per entry and findMatches (512 blocks) by slot count, and event application';

function randomHashes(rng: () => number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++)
    out[i] = (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
  return out;
}

/** Fills an index of `build` over `slots` slots to `target` entries; returns it and the shared documents. */
function fill(
  rng: () => number,
  slots: number,
  target: number,
  build: IndexBuild = thisBuild,
): { index: PrefixIndex; docs: BigUint64Array[] } {
  const { sequenceHashes } = build;
  const index = new build.PrefixIndex();
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

/** The four requests of a width's rows, over `index` and its shared documents. */
function cases(index: PrefixIndex, docs: BigUint64Array[], build: IndexBuild): Record<string, () => unknown> {
  const fullDoc = docs[0]!;
  const partial = fullDoc.slice();
  partial[300] = 12345n;
  const fullSeq = build.sequenceHashes(fullDoc);
  const miss = new BigUint64Array(512).map((_, i) => BigInt(i) * 0x9e3779b97f4a7c15n + 7n);
  return {
    '512-block hit (local hashes)': () => index.findMatches(fullDoc),
    '512-block hit (sequence hashes)': () => index.findMatches(fullSeq, true),
    'diverges at block 300': () => index.findMatches(partial),
    miss: () => index.findMatches(miss),
  };
}

/** A match's answer as one string, to check that two builds agree. */
function answer(index: PrefixIndex, run: () => unknown): string {
  const r = run() as ReturnType<PrefixIndex['findMatches']>;
  const pairs = Array.from({ length: r.count }, (_, i) => `${index.slotWorker(r.slots[i]!)!.workerId}:${r.depths[i]}`);
  return pairs.sort().join(',');
}

async function measureWidth(slots: number, perSlot: number): Promise<{ rows: BenchRow[]; note: string }> {
  const { index, docs } = fill(seededRng(42), slots, slots * perSlot);
  // The fill's garbage is collected now (run with --expose-gc), not inside the first timed case.
  (globalThis as { gc?: () => void }).gc?.();
  const hit = index.findMatches(docs[0]!);
  if (hit.count === 0) throw new Error('workload has no hit for the shared document');
  const perEntry = index.bytes / index.size;
  const rows = await timeAll(
    Object.fromEntries(
      Object.entries(cases(index, docs, thisBuild)).map(([k, f]) => [`${slots} slots: findMatches, ${k}`, f]),
    ),
  );
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

/** This build against the base's at `slots` slots: findMatches in alternating batches, p50 per call. */
async function measureAgainstBase(slots: number, perSlot: number, base: IndexBuild): Promise<BenchRow[]> {
  const rounds = envIntList('KVGATE_BENCH_AB_ROUNDS', [400])[0]!;
  const builds = [
    { name: 'this build', ...fill(seededRng(42), slots, slots * perSlot) },
    { name: 'base', ...fill(seededRng(42), slots, slots * perSlot, base) },
  ].map((b, i) => ({ ...b, cases: cases(b.index, b.docs, i === 0 ? thisBuild : base) }));
  (globalThis as { gc?: () => void }).gc?.();
  const rows: BenchRow[] = [];
  for (const name of Object.keys(builds[0]!.cases)) {
    const [a, b] = builds.map((x) => answer(x.index, x.cases[name]!));
    if (a !== b) throw new Error(`${slots} slots, ${name}: this build and the base answer differently`);
    const times = builds.map(() => new Float64Array(rounds));
    for (const x of builds) for (let i = 0; i < 200; i++) x.cases[name]!();
    for (let r = 0; r < rounds; r++) {
      builds.forEach((x, k) => {
        const run = x.cases[name]!;
        const t0 = performance.now();
        for (let i = 0; i < 20; i++) run();
        times[k]![r] = ((performance.now() - t0) * 1000) / 20;
      });
    }
    const p = times.map((t) => t.sort()).map((t) => ({ p50: t[rounds >> 1]!, p99: t[Math.floor(rounds * 0.99)]! }));
    builds.forEach((x, k) => {
      rows.push({
        name: `${slots} slots, ${x.name}: findMatches, ${name}`,
        p50Us: p[k]!.p50,
        p99Us: p[k]!.p99,
        opsPerSec: 1e6 / p[k]!.p50,
        note:
          k === 0
            ? `${(x.index.bytes / x.index.size).toFixed(1)} B/entry; ${(p[0]!.p50 / p[1]!.p50).toFixed(2)}x the base`
            : `${(x.index.bytes / x.index.size).toFixed(1)} B/entry`,
      });
    });
  }
  for (const x of builds) x.index.dispose();
  return rows;
}

export async function run(): Promise<BenchSection> {
  const baseRoot = process.env.KVG_BENCH_BASE;
  if (baseRoot !== undefined && baseRoot !== '') {
    const base = (await import(pathToFileURL(`${resolve(baseRoot)}/dist/src/wasm/index.js`).href)) as IndexBuild;
    const widths = envIntList('KVGATE_BENCH_SLOTS', [64, 256]);
    const [perSlot] = envIntList('KVGATE_BENCH_ENTRIES_PER_SLOT', [15_625]);
    const rows: BenchRow[] = [];
    for (const slots of widths) rows.push(...(await measureAgainstBase(slots, perSlot!, base)));
    return {
      title: `${title}: this build against the base (${baseRoot}), alternating batches`,
      rows,
      notes: ['p50 / p99 over batches of 20 calls (per call); both builds give the same answers (checked)'],
    };
  }

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
