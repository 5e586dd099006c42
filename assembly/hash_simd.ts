// A prompt's block hashes two blocks at a time in v128 lanes, with the sequence chain folded into the
// same loop: the hot path of `hashPrompt` when no block carries multimodal data.
//
// Contract: `hashPromptSimd` writes exactly what `hashBlocks` then `chainHashes` write (XXH3-64 of each
// block's window with `seed`, and the chained sequence hashes), or returns -1 and writes nothing when its
// inputs are outside what it handles (a window shorter than 17 or longer than 128 bytes). Lane 0 holds
// the even block, lane 1 the odd one. XXH3's 64x64->128 multiply has no wasm instruction: each lane's
// four 32x32->64 partial products come from `i64x2.extmul_*_i32x4_u`, two lanes per instruction.
import { xxh3, xxh3Pair } from './xxh3';
import { blockCount, BLOCK_SEED } from './hashing';

const PRIME64_1: u64 = 0x9e3779b185ebca87;
const PRIME_MX1: u64 = 0x165667919e3779f9;

// The first 128 bytes of XXH3's default secret (the words the 17..240-byte paths read), as u64 pairs.
const SECRET: StaticArray<u64> = [
  0xbe4ba423396cfeb8, 0x1cad21f72c81017c, 0xdb979083e96dd4de, 0x1f67b3b7a4a44072,
  0x78e5c0cc4ee679cb, 0x2172ffcc7dd05a82, 0x8e2443f7744608b8, 0x4c263a81e69035e0,
  0xcb00c391bb52283c, 0xa32e531b8b65d088, 0x4ef90da297486471, 0xd8acdea946ef1938,
  0x3f349ce33f76faa8, 0x1d4f0bc7c7bbdcf9, 0x3159b4cd4be0518a, 0x647378d9c97e9fc8,
];

// Keys of the current seed: pair j is [secret[2j] + seed, secret[2j+1] - seed], the mask mix16B applies.
const keys: usize = heap.alloc(128);
let keysSeed: u64 = 0;
let keysValid: bool = false;

function setKeys(seed: u64): void {
  if (keysValid && keysSeed == seed) return;
  const s = changetype<usize>(SECRET);
  for (let j: usize = 0; j < 8; j++) {
    store<u64>(keys + (j << 4), load<u64>(s + (j << 4)) + seed);
    store<u64>(keys + (j << 4) + 8, load<u64>(s + (j << 4) + 8) - seed);
  }
  keysSeed = seed;
  keysValid = true;
}

/** mul128Fold64 per lane: (lo x hi) folded as low ^ high, for lane pairs `lo` = [x0, x1], `hi` = [y0, y1]. */
// @ts-ignore: decorator
@inline function mulFold2(a32: v128, b32: v128, bSwap: v128): v128 {
  // a32 = [x0.lo, x1.lo, x0.hi, x1.hi], b32 = [y0.lo, y1.lo, y0.hi, y1.hi], bSwap = [y0.hi, y1.hi, y0.lo, y1.lo].
  const loLo = i64x2.extmul_low_i32x4_u(a32, b32);
  const hiHi = i64x2.extmul_high_i32x4_u(a32, b32);
  const loHi = i64x2.extmul_low_i32x4_u(a32, bSwap);
  const hiLo = i64x2.extmul_high_i32x4_u(a32, bSwap);
  const mask = i64x2.splat(0xffffffff);
  const cross = i64x2.add(i64x2.add(i64x2.shr_u(loLo, 32), v128.and(hiLo, mask)), loHi);
  const upper = i64x2.add(i64x2.add(i64x2.shr_u(hiLo, 32), i64x2.shr_u(cross, 32)), hiHi);
  return v128.xor(v128.or(i64x2.shl(cross, 32), v128.and(loLo, mask)), upper);
}

/** XXH3's mix16B of the 16 bytes at offset `off` of two blocks at once, with key pair `j`. */
// @ts-ignore: decorator
@inline function mix2(pA: usize, pB: usize, off: usize, j: usize): v128 {
  const k = v128.load(keys + (j << 4));
  const a = v128.xor(v128.load(pA + off), k);
  const b = v128.xor(v128.load(pB + off), k);
  // Regroup the two blocks' (lo, hi) words into 32-bit halves across lanes for extmul.
  const lo32 = i32x4.shuffle(a, b, 0, 4, 1, 5);
  const hi32 = i32x4.shuffle(a, b, 2, 6, 3, 7);
  const hiSwap = i32x4.shuffle(a, b, 3, 7, 2, 6);
  return mulFold2(lo32, hi32, hiSwap);
}

// @ts-ignore: decorator
@inline function avalanche2(h: v128): v128 {
  h = v128.xor(h, i64x2.shr_u(h, 37));
  h = i64x2.mul(h, i64x2.splat(PRIME_MX1));
  return v128.xor(h, i64x2.shr_u(h, 32));
}

/** XXH3-64 (17..128 bytes) of `len` bytes at `pA` and at `pB`: [hash(pA), hash(pB)]. */
// @ts-ignore: decorator
@inline function mid2(pA: usize, pB: usize, len: usize): v128 {
  let acc = i64x2.splat(<i64>(<u64>len * PRIME64_1));
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        acc = i64x2.add(acc, mix2(pA, pB, 48, 6));
        acc = i64x2.add(acc, mix2(pA, pB, len - 64, 7));
      }
      acc = i64x2.add(acc, mix2(pA, pB, 32, 4));
      acc = i64x2.add(acc, mix2(pA, pB, len - 48, 5));
    }
    acc = i64x2.add(acc, mix2(pA, pB, 16, 2));
    acc = i64x2.add(acc, mix2(pA, pB, len - 32, 3));
  }
  acc = i64x2.add(acc, mix2(pA, pB, 0, 0));
  acc = i64x2.add(acc, mix2(pA, pB, len - 16, 1));
  return avalanche2(acc);
}

/**
 * Local hashes of the complete blocks of `tokens` to `outLocal` and, when `outSeq != 0`, their sequence
 * chain to `outSeq`. Returns the block count, or -1 (nothing written) for a window outside 17..128 bytes.
 */
export function hashPromptSimd(
  tokens: usize, nTokens: u32, blockSize: u32, eagle: bool, seed: u64, outLocal: usize, outSeq: usize,
): i32 {
  const stride = <usize>blockSize << 2;
  const window = eagle ? stride + 4 : stride;
  if (window < 17 || window > 128) return -1;
  const n = blockCount(nTokens, blockSize, eagle);
  if (n == 0) return 0;
  setKeys(seed);
  let prev: u64 = 0;
  let i: u32 = 0;
  // The chain's latency-bound steps interleave with the next pair's independent lane work.
  for (; i + 1 < n; i += 2) {
    const p = tokens + <usize>i * stride;
    const h = mid2(p, p + stride, window);
    v128.store(outLocal + (<usize>i << 3), h);
    if (outSeq == 0) continue;
    const h0 = <u64>i64x2.extract_lane(h, 0);
    const s0 = i == 0 ? h0 : xxh3Pair(prev, h0, BLOCK_SEED);
    prev = xxh3Pair(s0, <u64>i64x2.extract_lane(h, 1), BLOCK_SEED);
    store<u64>(outSeq + (<usize>i << 3), s0);
    store<u64>(outSeq + (<usize>i << 3), prev, 8);
  }
  if (i < n) {
    const h = xxh3(tokens + <usize>i * stride, window, seed);
    store<u64>(outLocal + (<usize>i << 3), h);
    if (outSeq != 0) store<u64>(outSeq + (<usize>i << 3), i == 0 ? h : xxh3Pair(prev, h, BLOCK_SEED));
  }
  return <i32>n;
}
