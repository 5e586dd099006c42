// A prompt's block hashes in v128 lanes, with the sequence chain folded into the same loop: the hot path
// of `hashPrompt` when no block carries multimodal data.
//
// Contract: `hashPromptSimd` writes exactly what `hashBlocks` then `chainHashes` write (XXH3-64 of each
// block's window with `seed`, and the chained sequence hashes), or returns -1 and writes nothing when its
// inputs are outside what it handles (a window outside 17..128 and 241..1,024 bytes). Windows of 17..128
// bytes go two blocks at a time, lane 0 the even block, lane 1 the odd one; XXH3's 64x64->128 multiply
// has no wasm instruction, so each lane's four 32x32->64 partial products come from
// `i64x2.extmul_*_i32x4_u`, two lanes per instruction. Windows of 241..1,024 bytes (one XXH3 block of
// stripes, so no scramble) go one block at a time, its eight accumulators in four vectors.
import { xxh3, xxh3Pair, DEFAULT_SECRET } from './xxh3';
import { blockCount, BLOCK_SEED } from './hashing';

const PRIME32_1: u64 = 0x9e3779b1;
const PRIME32_2: u64 = 0x85ebca77;
const PRIME32_3: u64 = 0xc2b2ae3d;
const PRIME64_1: u64 = 0x9e3779b185ebca87;
const PRIME64_2: u64 = 0xc2b2ae3d27d4eb4f;
const PRIME64_3: u64 = 0x165667b19e3779f9;
const PRIME64_4: u64 = 0x85ebca77c2b2ae63;
const PRIME64_5: u64 = 0x27d4eb2f165667c5;
const PRIME_MX1: u64 = 0x165667919e3779f9;
const SECRET_SIZE: usize = 192;

// The secret of the current seed: each 16 bytes of the default one as [lo + seed, hi - seed]. Its first
// 128 bytes are also the keys mix16B applies (17..128-byte inputs); all of it is XXH3's derived secret
// for long inputs.
const keys: usize = heap.alloc(SECRET_SIZE);
let keysSeed: u64 = 0;
let keysValid: bool = false;

function setKeys(seed: u64): void {
  if (keysValid && keysSeed == seed) return;
  const s = changetype<usize>(DEFAULT_SECRET);
  for (let j: usize = 0; j < SECRET_SIZE; j += 16) {
    store<u64>(keys + j, load<u64>(s + j) + seed);
    store<u64>(keys + j + 8, load<u64>(s + j + 8) - seed);
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

/** One XXH3 stripe into the accumulators: acc[i ^ 1] += in[i]; acc[i] += lo32(k[i]) * hi32(k[i]), k = in ^ secret. */
// @ts-ignore: decorator
@inline function stripe(acc: v128, p: usize, s: usize): v128 {
  const v = v128.load(p);
  const k = v128.xor(v, v128.load(s));
  const prod = i64x2.extmul_low_i32x4_u(i32x4.shuffle(k, k, 0, 2, 0, 2), i32x4.shuffle(k, k, 1, 3, 1, 3));
  return i64x2.add(acc, i64x2.add(i64x2.shuffle(v, v, 1, 0), prod));
}

/** XXH3-64 of 241..1,024 bytes at `p` with the secret at `keys` (the seed's). */
function long1(p: usize, len: usize): u64 {
  let a0 = i64x2(<i64>PRIME32_3, <i64>PRIME64_1);
  let a1 = i64x2(<i64>PRIME64_2, <i64>PRIME64_3);
  let a2 = i64x2(<i64>PRIME64_4, <i64>PRIME32_2);
  let a3 = i64x2(<i64>PRIME64_5, <i64>PRIME32_1);
  const stripes = (len - 1) >> 6;
  for (let n: usize = 0; n < stripes; n++) {
    const q = p + (n << 6);
    const s = keys + (n << 3);
    a0 = stripe(a0, q, s);
    a1 = stripe(a1, q + 16, s + 16);
    a2 = stripe(a2, q + 32, s + 32);
    a3 = stripe(a3, q + 48, s + 48);
  }
  const q = p + len - 64;
  const s = keys + SECRET_SIZE - 64 - 7;
  a0 = stripe(a0, q, s);
  a1 = stripe(a1, q + 16, s + 16);
  a2 = stripe(a2, q + 32, s + 32);
  a3 = stripe(a3, q + 48, s + 48);
  // Merge: sum over i of mul128Fold64(acc[2i] ^ secret[11 + 16i], acc[2i + 1] ^ secret[19 + 16i]).
  const m = keys + 11;
  const x0 = v128.xor(a0, v128.load(m));
  const x1 = v128.xor(a1, v128.load(m + 16));
  const x2 = v128.xor(a2, v128.load(m + 32));
  const x3 = v128.xor(a3, v128.load(m + 48));
  const f01 = mulFold2(i32x4.shuffle(x0, x1, 0, 4, 1, 5), i32x4.shuffle(x0, x1, 2, 6, 3, 7), i32x4.shuffle(x0, x1, 3, 7, 2, 6));
  const f23 = mulFold2(i32x4.shuffle(x2, x3, 0, 4, 1, 5), i32x4.shuffle(x2, x3, 2, 6, 3, 7), i32x4.shuffle(x2, x3, 3, 7, 2, 6));
  const f = i64x2.add(f01, f23);
  let h = <u64>len * PRIME64_1 + <u64>i64x2.extract_lane(f, 0) + <u64>i64x2.extract_lane(f, 1);
  h ^= h >> 37;
  h *= PRIME_MX1;
  return h ^ (h >> 32);
}

/** Long windows (241..1,024 bytes): one block at a time, chained as it goes. */
function hashLongBlocks(tokens: usize, n: u32, stride: usize, window: usize, outLocal: usize, outSeq: usize): void {
  let prev: u64 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const h = long1(tokens + <usize>i * stride, window);
    store<u64>(outLocal + (<usize>i << 3), h);
    if (outSeq == 0) continue;
    prev = i == 0 ? h : xxh3Pair(prev, h, BLOCK_SEED);
    store<u64>(outSeq + (<usize>i << 3), prev);
  }
}

/** Chains a pair of local hashes (blocks `i` and `i + 1`, lanes of `h`) after `prev` into `outSeq`; returns the last. */
@inline function chainPair(h: v128, i: u32, prev: u64, outSeq: usize): u64 {
  const h0 = <u64>i64x2.extract_lane(h, 0);
  const s0 = i == 0 ? h0 : xxh3Pair(prev, h0, BLOCK_SEED);
  const s1 = xxh3Pair(s0, <u64>i64x2.extract_lane(h, 1), BLOCK_SEED);
  store<u64>(outSeq + (<usize>i << 3), s0);
  store<u64>(outSeq + (<usize>i << 3), s1, 8);
  return s1;
}

/**
 * Local hashes of the complete blocks of `tokens` to `outLocal` and, when `outSeq != 0`, their sequence
 * chain to `outSeq`. Returns the block count, or -1 (nothing written) for a window outside 17..128 and 241..1,024 bytes.
 */
export function hashPromptSimd(
  tokens: usize, nTokens: u32, blockSize: u32, eagle: bool, seed: u64, outLocal: usize, outSeq: usize,
): i32 {
  const stride = <usize>blockSize << 2;
  const window = eagle ? stride + 4 : stride;
  const long = window > 240;
  if (window < 17 || (window > 128 && !long) || window > 1024) return -1;
  const n = blockCount(nTokens, blockSize, eagle);
  if (n == 0) return 0;
  setKeys(seed);
  if (long) {
    hashLongBlocks(tokens, n, stride, window, outLocal, outSeq);
    return <i32>n;
  }
  let prev: u64 = 0;
  let i: u32 = 0;
  if (outSeq == 0) {
    for (; i + 1 < n; i += 2) {
      const p = tokens + <usize>i * stride;
      v128.store(outLocal + (<usize>i << 3), mid2(p, p + stride, window));
    }
  } else if (n >= 2) {
    // Software-pipelined: each iteration hashes the next pair, then chains the pair hashed one iteration
    // before. The chain's latency-bound steps then wait on their previous step only, never on the lane
    // work of the same pair (512 blocks of 16 tokens: 7.0 us, 7.5 chaining each pair right after it).
    let h = mid2(tokens, tokens + stride, window);
    v128.store(outLocal, h);
    for (; i + 3 < n; i += 2) {
      const p = tokens + <usize>(i + 2) * stride;
      const next = mid2(p, p + stride, window);
      v128.store(outLocal + (<usize>(i + 2) << 3), next);
      prev = chainPair(h, i, prev, outSeq);
      h = next;
    }
    // The last pair hashed, chained.
    prev = chainPair(h, i, prev, outSeq);
    i += 2;
  }
  if (i < n) {
    const h = xxh3(tokens + <usize>i * stride, window, seed);
    store<u64>(outLocal + (<usize>i << 3), h);
    if (outSeq != 0) store<u64>(outSeq + (<usize>i << 3), i == 0 ? h : xxh3Pair(prev, h, BLOCK_SEED));
  }
  return <i32>n;
}
