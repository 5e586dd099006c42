/**
 * The prefix index sharded by slot over threads (`ShardedPrefixIndex`) at fleet scale: KVGATE_BENCH_SHARD_SLOTS
 * slots (default 4,096) filled to KVGATE_BENCH_SHARD_ENTRIES (block, slot) entries (default 10,000,000; the
 * issue's 100,000,000 needs about 4 GiB of index and a bigger machine) over KVGATE_BENCH_SHARDS shards (default
 * 4), with the workload shape of wasm/prefix-index (64 shared 512-block documents, each slot holding 32 of them
 * fully or partly, then private 256-block prompts). Reports entries held, bytes per entry (the shards' index
 * tables) and the process's resident memory, the fill rate, and findMatches of a 512-block request through the
 * fan-out (hit, miss), timed one call at a time.
 * Run: KVGATE_BENCH_SHARD_ENTRIES=100000000 node --expose-gc dist/bench/run.js wasm/shards
 */
import { seededRng } from '../../src/common/index.js';
import { ShardedPrefixIndex, sequenceHashes } from '../../src/wasm/index.js';
import type { BenchRow, BenchSection } from '../util.js';

export const title = 'Sharded prefix index: entries held, bytes per entry and findMatches through the fan-out';

const env = (name: string, fallback: number): number => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`${name} must be a positive integer`);
  return v;
};

/** `n` random u64, two 32-bit draws each, written through a u32 view (no BigInt per value). */
function randomHashes(rng: () => number, n: number): BigUint64Array {
  const u32 = new Uint32Array(2 * n);
  for (let i = 0; i < u32.length; i++) u32[i] = Math.floor(rng() * 2 ** 32);
  return new BigUint64Array(u32.buffer);
}

/** Fills the shards to about `target` entries; flushes every `FLUSH_ENTRIES` so the main thread's queue stays small. */
async function fill(index: ShardedPrefixIndex, slots: number, target: number): Promise<BigUint64Array[]> {
  const FLUSH_ENTRIES = 2_000_000;
  const rng = seededRng(42);
  const docs = Array.from({ length: 64 }, () => randomHashes(rng, 512));
  const docEngine = docs.map((d) => sequenceHashes(d)); // engines name blocks by content
  let queued = 0;
  let unflushed = 0;
  const add = async (s: number, engine: BigUint64Array, local: BigUint64Array): Promise<void> => {
    index.applyStored(s, 0, null, engine, local);
    queued += local.length;
    unflushed += local.length;
    if (unflushed >= FLUSH_ENTRIES) {
      unflushed = 0;
      await index.flush();
    }
  };
  for (let s = 0; s < slots && queued < target; s++) {
    for (let d = 0; d < 32; d++) {
      const k = (s + d * 2) % docs.length;
      const len = d % 4 === 0 ? 512 : 64 + Math.floor(rng() * 448);
      await add(s, docEngine[k]!.subarray(0, len), docs[k]!.subarray(0, len));
    }
  }
  for (let s = 0; queued < target; s = (s + 1) % slots) {
    const h = randomHashes(rng, 256);
    await add(s, h, h);
  }
  await index.flush();
  return docs;
}

function time(fn: () => unknown, n: number): { p50: number; p99: number } {
  const t = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    fn();
    t[i] = (performance.now() - t0) * 1000;
  }
  t.sort();
  return { p50: t[Math.floor(n * 0.5)]!, p99: t[Math.floor(n * 0.99)]! };
}

export async function run(): Promise<BenchSection> {
  const slots = env('KVGATE_BENCH_SHARD_SLOTS', 4096);
  const target = env('KVGATE_BENCH_SHARD_ENTRIES', 10_000_000);
  const shards = env('KVGATE_BENCH_SHARDS', 4);
  const index = new ShardedPrefixIndex({ shards, matchTimeoutMs: 1000 });
  try {
    const t0 = performance.now();
    const docs = await fill(index, slots, target);
    const fillS = (performance.now() - t0) / 1000;
    (globalThis as { gc?: () => void }).gc?.();
    const stats = await index.stats();
    const entries = stats.reduce((n, s) => n + s.entries, 0);
    const bytes = stats.reduce((n, s) => n + s.bytes, 0);
    const rss = process.memoryUsage().rss;
    const doc = docs[0]!;
    const hit = index.findMatches(doc);
    if (hit.count === 0) throw new Error('workload has no hit for the shared document');
    const miss = randomHashes(seededRng(9), 512);
    const h = time(() => index.findMatches(doc), 2000);
    const m = time(() => index.findMatches(miss), 2000);
    const n = (x: number): string => Math.round(x).toLocaleString('en-US');
    const rows: BenchRow[] = [
      {
        name: `${slots} slots, ${shards} shards: entries held`,
        p50Us: 0,
        p99Us: 0,
        opsPerSec: entries / fillS,
        note:
          `${n(entries)} entries (${n(stats.reduce((k, s) => k + s.distinctBlocks, 0))} blocks over the shards), ` +
          `${(bytes / entries).toFixed(1)} bytes/entry (${(bytes / 2 ** 30).toFixed(2)} GiB of index tables; ` +
          `per shard ${stats.map((s) => (s.bytes / 2 ** 30).toFixed(2)).join(' / ')} GiB); process RSS ` +
          `${(rss / 2 ** 30).toFixed(2)} GiB; filled in ${fillS.toFixed(1)} s (ops = entries/s)`,
      },
      {
        name: `${slots} slots, ${shards} shards: findMatches through the fan-out, 512-block hit`,
        p50Us: h.p50,
        p99Us: h.p99,
        opsPerSec: 1e6 / h.p50,
        note: `${hit.count} slots hold a prefix`,
      },
      {
        name: `${slots} slots, ${shards} shards: findMatches through the fan-out, 512-block miss`,
        p50Us: m.p50,
        p99Us: m.p99,
        opsPerSec: 1e6 / m.p50,
      },
    ];
    return {
      title,
      rows,
      notes: [
        `Late shard answers: ${index.lateShards}. Each shard is a thread with its own wasm32 module (4 GiB each).`,
      ],
    };
  } finally {
    await index.close();
  }
}
