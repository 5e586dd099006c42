/**
 * Hashing an 8,192-token prompt at block size 16 (512 blocks: local + chained
 * sequence hashes), against baselines measured in the same run:
 * - a loop of per-block native XXH3 calls (@node-rs/xxhash), chaining included;
 * - a loop of per-block xxhash-wasm calls (XXH64: that package has no XXH3;
 *   it stands for "a WASM hash called once per block");
 * - one native XXH3 call over the whole 32 KiB: the floor for hashing those bytes.
 *
 * With `KVG_BENCH_BASE` naming another built checkout, its `promptHashes` hashes the same prompt in the same
 * run (it loads that checkout's own build/kvgate.wasm), and must agree with this one.
 *
 * Run: [KVG_BENCH_BASE=<built checkout>] node --expose-gc dist/bench/run.js wasm/hashing
 */
import { resolve } from 'node:path';
import { xxh3 as native } from '@node-rs/xxhash';
import xxhashWasm from 'xxhash-wasm';
import { promptHashes, sequenceHashes } from '../../src/wasm/index.js';
import { ratio, timeAll, type BenchRow, type BenchSection } from '../util.js';

export const title = 'Block hashing: 8,192 tokens, block size 16 (local + sequence hashes)';

async function basePromptHashes(): Promise<typeof promptHashes | undefined> {
  const dir = process.env.KVG_BENCH_BASE;
  if (dir === undefined) return undefined;
  const mod = (await import(resolve(dir, 'dist/src/wasm/index.js'))) as { promptHashes: typeof promptHashes };
  return mod.promptHashes;
}

export async function run(): Promise<BenchSection> {
  const base = await basePromptHashes();
  const tokens = new Uint32Array(8192);
  for (let i = 0; i < tokens.length; i++) tokens[i] = (i * 2654435761) >>> 0;
  const bytes = new Uint8Array(tokens.buffer);
  const bs = 16;
  const blocks = tokens.length / bs;
  const { h64Raw } = await xxhashWasm();

  // Correctness before timing: the native loop and kvgate agree.
  const ours = promptHashes(tokens, bs);
  const pair = new BigUint64Array(2);
  const pairBytes = new Uint8Array(pair.buffer);
  const nativeLoop = (): BigUint64Array => {
    const seq = new BigUint64Array(blocks);
    let prev = 0n;
    for (let i = 0; i < blocks; i++) {
      const local = native.xxh64(bytes.subarray(i * bs * 4, (i + 1) * bs * 4), 1337n);
      if (i === 0) prev = local;
      else {
        pair[0] = prev;
        pair[1] = local;
        prev = native.xxh64(pairBytes, 1337n);
      }
      seq[i] = prev;
    }
    return seq;
  };
  const check = nativeLoop();
  for (let i = 0; i < blocks; i++) if (check[i] !== ours.seq[i]) throw new Error(`hash mismatch at block ${i}`);
  if (sequenceHashes(ours.local)[blocks - 1] !== ours.seq[blocks - 1]) throw new Error('sequenceHashes mismatch');
  if (base !== undefined && base(tokens, bs).seq[blocks - 1] !== ours.seq[blocks - 1]) throw new Error('base mismatch');

  const fns: Record<string, () => unknown> = {
    'kvgate promptHashes (one WASM call)': () => promptHashes(tokens, bs),
    'native XXH3 per block (@node-rs/xxhash)': nativeLoop,
    'xxhash-wasm per block (XXH64)': () => {
      let prev = 0n;
      for (let i = 0; i < blocks; i++) {
        const local = h64Raw(bytes.subarray(i * bs * 4, (i + 1) * bs * 4), 1337n);
        if (i === 0) prev = local;
        else {
          pair[0] = prev;
          pair[1] = local;
          prev = h64Raw(pairBytes, 1337n);
        }
      }
      return prev;
    },
    'floor: one native XXH3 over 32 KiB': () => native.xxh64(bytes, 1337n),
  };
  if (base !== undefined) fns['base promptHashes (KVG_BENCH_BASE)'] = () => base(tokens, bs);
  const rows = await timeAll(fns);
  const [k, n, w, f, b] = rows as [BenchRow, BenchRow, BenchRow, BenchRow, BenchRow | undefined];
  n.note = `${ratio(n.p50Us, k.p50Us)} slower than kvgate`;
  w.note = `${ratio(w.p50Us, k.p50Us)} slower than kvgate`;
  f.note = `kvgate is ${ratio(k.p50Us, f.p50Us)} of the floor`;
  if (b !== undefined) b.note = `kvgate takes ${ratio(k.p50Us, b.p50Us)} the base's time`;
  const speedup = n.p50Us / k.p50Us;
  const ofFloor = k.p50Us / f.p50Us;
  const notes = [
    `target >= 5x faster than the per-block native loop: ${speedup.toFixed(1)}x (${speedup >= 5 ? 'met' : 'missed'})`,
    `target within 3x of the floor: ${ofFloor.toFixed(2)}x (${ofFloor <= 3 ? 'met' : 'missed'})`,
  ];
  if (base === undefined)
    notes.push('Set KVG_BENCH_BASE to a built checkout to time its promptHashes in the same run.');
  return { title, rows, notes };
}
