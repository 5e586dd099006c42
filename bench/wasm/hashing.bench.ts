/**
 * Hashing an 8,192-token prompt at block size 16 (512 blocks: local + chained
 * sequence hashes), against baselines measured in the same run:
 * - a loop of per-block native XXH3 calls (@node-rs/xxhash), chaining included;
 * - a loop of per-block xxhash-wasm calls (XXH64: that package has no XXH3;
 *   it stands for "a WASM hash called once per block");
 * - one native XXH3 call over the whole 32 KiB: the floor for hashing those bytes.
 * Run: npm run bench -- hashing
 */
import { xxh3 as native } from '@node-rs/xxhash';
import xxhashWasm from 'xxhash-wasm';
import { promptHashes, sequenceHashes } from '../../src/wasm/index.js';
import { ratio, timeAll, type BenchSection } from '../util.js';

export const title = 'Block hashing: 8,192 tokens, block size 16 (local + sequence hashes)';

export async function run(): Promise<BenchSection> {
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

  const rows = await timeAll({
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
  });
  const [k, n, w, f] = rows as [(typeof rows)[0], (typeof rows)[0], (typeof rows)[0], (typeof rows)[0]];
  n.note = `${ratio(n.p50Us, k.p50Us)} slower than kvgate`;
  w.note = `${ratio(w.p50Us, k.p50Us)} slower than kvgate`;
  f.note = `kvgate is ${ratio(k.p50Us, f.p50Us)} of the floor`;
  const speedup = n.p50Us / k.p50Us;
  const ofFloor = k.p50Us / f.p50Us;
  return {
    title,
    rows,
    notes: [
      `target >= 5x faster than the per-block native loop: ${speedup.toFixed(1)}x (${speedup >= 5 ? 'met' : 'missed'})`,
      `target within 3x of the floor: ${ofFloor.toFixed(2)}x (${ofFloor <= 3 ? 'met' : 'missed'})`,
    ],
  };
}
