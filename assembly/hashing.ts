// Block and sequence hashing, batched: one call hashes a whole prompt.
//
// Layout contract (all little-endian, caller-owned regions in linear memory):
//   tokens: u32[nTokens]; outLocal / outSeq: u64[nBlocks];
//   mmOffsets (optional): u32[nBlocks + 1], block i's multimodal hashes are
//   mmValues[mmOffsets[i] .. mmOffsets[i+1]] (u64, any order; hashed sorted ascending).
import { xxh3, xxh3Pair } from './xxh3';

/** Dynamo's XXH3 seed for block and chain hashes. */
export const BLOCK_SEED: u64 = 1337;

// Scratch for a block whose multimodal hashes are appended to its token bytes.
let mmScratch: usize = 0;
let mmScratchCap: usize = 0;

function ensureMmScratch(bytes: usize): usize {
  if (bytes > mmScratchCap) {
    if (mmScratch != 0) heap.free(mmScratch);
    mmScratchCap = max<usize>(bytes, 1024);
    mmScratch = heap.alloc(mmScratchCap);
  }
  return mmScratch;
}

/** Number of complete blocks (eagle windows overlap by one token). */
export function blockCount(nTokens: u32, blockSize: u32, eagle: bool): u32 {
  if (blockSize == 0) return 0;
  if (eagle) return nTokens == 0 ? 0 : (nTokens - 1) / blockSize;
  return nTokens / blockSize;
}

/**
 * Local block hashes of the complete blocks of `tokens`, written to `outLocal`.
 * Returns the number of blocks. `mmOffsets == 0` means no multimodal data.
 */
export function hashBlocks(
  tokens: usize, nTokens: u32, blockSize: u32, eagle: bool, seed: u64,
  mmOffsets: usize, mmValues: usize, outLocal: usize,
): u32 {
  const n = blockCount(nTokens, blockSize, eagle);
  const stride = <usize>blockSize << 2;
  const window = eagle ? stride + 4 : stride;
  for (let i: u32 = 0; i < n; i++) {
    const p = tokens + <usize>i * stride;
    let h: u64;
    if (mmOffsets != 0) {
      const from = load<u32>(mmOffsets + (<usize>i << 2));
      const to = load<u32>(mmOffsets + (<usize>(i + 1) << 2));
      if (to > from) {
        const count = <usize>(to - from);
        const buf = ensureMmScratch(window + (count << 3));
        memory.copy(buf, p, window);
        // Insertion sort into place: a block carries a handful of items at most.
        const dst = buf + window;
        for (let k: usize = 0; k < count; k++) {
          const v = load<u64>(mmValues + ((<usize>from + k) << 3));
          let j = k;
          while (j > 0 && load<u64>(dst + ((j - 1) << 3)) > v) {
            store<u64>(dst + (j << 3), load<u64>(dst + ((j - 1) << 3)));
            j--;
          }
          store<u64>(dst + (j << 3), v);
        }
        h = xxh3(buf, window + (count << 3), seed);
      } else {
        h = xxh3(p, window, seed);
      }
    } else {
      h = xxh3(p, window, seed);
    }
    store<u64>(outLocal + (<usize>i << 3), h);
  }
  return n;
}

/** Chained sequence hashes: seq[0] = local[0]; seq[i] = XXH3(LE64(seq[i-1]) || LE64(local[i]), 1337). */
export function chainHashes(local: usize, n: u32, outSeq: usize): void {
  if (n == 0) return;
  let prev = load<u64>(local);
  store<u64>(outSeq, prev);
  for (let i: u32 = 1; i < n; i++) {
    prev = xxh3Pair(prev, load<u64>(local + (<usize>i << 3)), BLOCK_SEED);
    store<u64>(outSeq + (<usize>i << 3), prev);
  }
}
