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
import { xxh3, xxh3Pair, pairStep, pairKeyLo, pairKeyHi, DEFAULT_SECRET } from './xxh3';
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
const keys: usize = memory.data(SECRET_SIZE, 16);
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

/** mul128Fold64 per lane: (x * y) folded as low ^ high, for lane pairs x = [x0, x1], y = [y0, y1]. */
// @ts-ignore: decorator
@inline function mulFold2(a32: v128, b32: v128): v128 {
  // a32 = [x0.lo, x1.lo, x0.hi, x1.hi], b32 = [y0.lo, y1.lo, y0.hi, y1.hi], bSwap = [y0.hi, y1.hi, y0.lo, y1.lo]
  // (one pshufd of b32). `t` carries the low product's high word into the first cross term, so the
  // high half needs one mask and the low half is the low product's low word beside cross's (one blend).
  const bSwap = i32x4.shuffle(b32, b32, 2, 3, 0, 1);
  const loLo = i64x2.extmul_low_i32x4_u(a32, b32);
  const hiHi = i64x2.extmul_high_i32x4_u(a32, b32);
  const loHi = i64x2.extmul_low_i32x4_u(a32, bSwap);
  const hiLo = i64x2.extmul_high_i32x4_u(a32, bSwap);
  const t = i64x2.add(hiLo, i64x2.shr_u(loLo, 32));
  const cross = i64x2.add(v128.and(t, i64x2.splat(0xffffffff)), loHi);
  const upper = i64x2.add(i64x2.add(hiHi, i64x2.shr_u(t, 32)), i64x2.shr_u(cross, 32));
  const lower = i32x4.shuffle(loLo, i64x2.shl(cross, 32), 0, 5, 2, 7);
  return v128.xor(lower, upper);
}

/** XXH3's mix16B of the 16 bytes at offset `off` of two blocks at once, with key `k`. */
// @ts-ignore: decorator
@inline function mix2(pA: usize, pB: usize, off: usize, k: v128): v128 {
  const a = v128.xor(v128.load(pA + off), k);
  const b = v128.xor(v128.load(pB + off), k);
  // Regroup the two blocks' (lo, hi) words into 32-bit halves across lanes for extmul (punpckl/hdq).
  return mulFold2(i32x4.shuffle(a, b, 0, 4, 1, 5), i32x4.shuffle(a, b, 2, 6, 3, 7));
}

// @ts-ignore: decorator
@inline function avalanche2(h: v128): v128 {
  h = v128.xor(h, i64x2.shr_u(h, 37));
  h = i64x2.mul(h, i64x2.splat(PRIME_MX1));
  return v128.xor(h, i64x2.shr_u(h, 32));
}

/**
 * XXH3-64 (17..128 bytes) of `len` bytes at `pA` and at `pB`: [hash(pA), hash(pB)], with the keys at `keys`.
 * `rounds` is ceil(len / 32): the mix16B pairs the length takes.
 */
// @ts-ignore: decorator
@inline function mid2(pA: usize, pB: usize, len: usize, rounds: usize): v128 {
  let acc = i64x2.splat(<i64>(<u64>len * PRIME64_1));
  if (rounds > 3) {
    acc = i64x2.add(acc, mix2(pA, pB, 48, v128.load(keys, 96)));
    acc = i64x2.add(acc, mix2(pA, pB, len - 64, v128.load(keys, 112)));
  }
  if (rounds > 2) {
    acc = i64x2.add(acc, mix2(pA, pB, 32, v128.load(keys, 64)));
    acc = i64x2.add(acc, mix2(pA, pB, len - 48, v128.load(keys, 80)));
  }
  if (rounds > 1) {
    acc = i64x2.add(acc, mix2(pA, pB, 16, v128.load(keys, 32)));
    acc = i64x2.add(acc, mix2(pA, pB, len - 32, v128.load(keys, 48)));
  }
  acc = i64x2.add(acc, mix2(pA, pB, 0, v128.load(keys)));
  acc = i64x2.add(acc, mix2(pA, pB, len - 16, v128.load(keys, 16)));
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
  const f01 = mulFold2(i32x4.shuffle(x0, x1, 0, 4, 1, 5), i32x4.shuffle(x0, x1, 2, 6, 3, 7));
  const f23 = mulFold2(i32x4.shuffle(x2, x3, 0, 4, 1, 5), i32x4.shuffle(x2, x3, 2, 6, 3, 7));
  const f = i64x2.add(f01, f23);
  let h = <u64>len * PRIME64_1 + <u64>i64x2.extract_lane(f, 0) + <u64>i64x2.extract_lane(f, 1);
  h ^= h >> 37;
  h *= PRIME_MX1;
  return h ^ (h >> 32);
}

/** Long windows (241..1,024 bytes): one block at a time, chained as it goes. */
function hashLongBlocks(tokens: usize, n: u32, stride: usize, window: usize, outLocal: usize, outSeq: usize): void {
  const keyLo = pairKeyLo(BLOCK_SEED);
  const keyHi = pairKeyHi(BLOCK_SEED);
  let prev: u64 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const h = long1(tokens + <usize>i * stride, window);
    store<u64>(outLocal + (<usize>i << 3), h);
    if (outSeq == 0) continue;
    prev = i == 0 ? h : pairStep(prev, h, keyLo, keyHi);
    store<u64>(outSeq + (<usize>i << 3), prev);
  }
}

/** Short windows (17..128 bytes), two blocks a pass; returns the count of blocks done (n rounded down to even). */
function hashShortBlocks(tokens: usize, n: u32, stride: usize, window: usize, outLocal: usize, outSeq: usize): u32 {
  const rounds = (window + 31) >> 5;
  let i: u32 = 0;
  if (outSeq == 0) {
    for (; i + 1 < n; i += 2) {
      const p = tokens + <usize>i * stride;
      v128.store(outLocal + (<usize>i << 3), mid2(p, p + stride, window, rounds));
    }
    return i;
  }
  if (n < 2) return 0;
  const keyLo = pairKeyLo(BLOCK_SEED);
  const keyHi = pairKeyHi(BLOCK_SEED);
  // Software-pipelined: each pass hashes the next pair, then chains the pair hashed one pass before. The
  // chain's latency-bound steps then wait on their previous step only, never on the lane work of the same pair
  // (512 blocks of 16 tokens: 0.84x the time of chaining one block behind; two pairs behind gains nothing).
  // One loop for all four length classes: loops specialized per class (the class a constant, no branch in
  // mid2) came out 1.14x slower in V8, which then scheduled every load of a pass first and spilled them.
  let h = mid2(tokens, tokens + stride, window, rounds);
  v128.store(outLocal, h);
  let prev: u64 = 0;
  for (; i + 3 < n; i += 2) {
    const p = tokens + <usize>(i + 2) * stride;
    const next = mid2(p, p + stride, window, rounds);
    v128.store(outLocal + (<usize>(i + 2) << 3), next);
    const h0 = <u64>i64x2.extract_lane(h, 0);
    const s0 = i == 0 ? h0 : pairStep(prev, h0, keyLo, keyHi);
    prev = pairStep(s0, <u64>i64x2.extract_lane(h, 1), keyLo, keyHi);
    store<u64>(outSeq + (<usize>i << 3), s0);
    store<u64>(outSeq + (<usize>i << 3), prev, 8);
    h = next;
  }
  // The last pair hashed, chained.
  const h0 = <u64>i64x2.extract_lane(h, 0);
  const s0 = i == 0 ? h0 : pairStep(prev, h0, keyLo, keyHi);
  store<u64>(outSeq + (<usize>i << 3), s0);
  store<u64>(outSeq + (<usize>i << 3), pairStep(s0, <u64>i64x2.extract_lane(h, 1), keyLo, keyHi), 8);
  i += 2;
  return i;
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
  const i = hashShortBlocks(tokens, n, stride, window, outLocal, outSeq);
  if (i < n) {
    // An odd count's last block alone, chained after the sequence hash written before it.
    const h = xxh3(tokens + <usize>i * stride, window, seed);
    store<u64>(outLocal + (<usize>i << 3), h);
    if (outSeq != 0) {
      store<u64>(outSeq + (<usize>i << 3), i == 0 ? h : xxh3Pair(load<u64>(outSeq + (<usize>(i - 1) << 3)), h, BLOCK_SEED));
    }
  }
  return <i32>n;
}
