// XXH3-64 (xxHash 0.8 family), seeded, all input-length classes.
//
// Contract: `xxh3(ptr, len, seed)` reads `len` bytes at linear-memory address
// `ptr` and returns the same 64-bit value as the reference `XXH3_64bits_withSeed`.
// No allocation per call: the seeded secret for inputs > 240 bytes is derived
// into a fixed scratch region and cached for the last seed used.

const PRIME32_1: u64 = 0x9E3779B1;
const PRIME32_2: u64 = 0x85EBCA77;
const PRIME32_3: u64 = 0xC2B2AE3D;
const PRIME64_1: u64 = 0x9E3779B185EBCA87;
const PRIME64_2: u64 = 0xC2B2AE3D27D4EB4F;
const PRIME64_3: u64 = 0x165667B19E3779F9;
const PRIME64_4: u64 = 0x85EBCA77C2B2AE63;
const PRIME64_5: u64 = 0x27D4EB2F165667C5;
const PRIME_MX1: u64 = 0x165667919E3779F9;
const PRIME_MX2: u64 = 0x9FB21C651E98DF25;

const SECRET_SIZE: usize = 192;
const STRIPE_LEN: usize = 64;
const SECRET_CONSUME_RATE: usize = 8;
const STRIPES_PER_BLOCK: usize = (SECRET_SIZE - STRIPE_LEN) / SECRET_CONSUME_RATE; // 16
const BLOCK_LEN: usize = STRIPE_LEN * STRIPES_PER_BLOCK; // 1024

// The default 192-byte secret of the XXH3 specification.
export const DEFAULT_SECRET: StaticArray<u8> = [
  0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
  0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
  0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
  0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
  0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
  0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
  0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
  0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
  0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
  0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
  0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
  0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
];

// Scratch: the secret derived for a non-zero seed (long inputs only) and the
// eight accumulators of the long loop. Allocated once at module start.
const customSecret: usize = heap.alloc(SECRET_SIZE);
const acc: usize = heap.alloc(64);
let customSecretSeed: u64 = 0;
let customSecretValid: bool = false;

// @ts-ignore: decorator
@inline function rd64(p: usize): u64 { return load<u64>(p); }
// @ts-ignore: decorator
@inline function rd32(p: usize): u64 { return <u64>load<u32>(p); }
// @ts-ignore: decorator
@inline function secretPtr(): usize { return changetype<usize>(DEFAULT_SECRET); }

// The 128-bit product's halves folded (low ^ high). The low half is one i64.mul; the high half comes from the
// four 32x32->64 partial products, `t` carrying the low product's high word into the first cross term.
// @ts-ignore: decorator
@inline function mul128Fold64(a: u64, b: u64): u64 {
  const aLo = a & 0xFFFFFFFF, aHi = a >> 32;
  const bLo = b & 0xFFFFFFFF, bHi = b >> 32;
  const t = aHi * bLo + ((aLo * bLo) >> 32);
  const cross = (t & 0xFFFFFFFF) + aLo * bHi;
  const upper = aHi * bHi + (t >> 32) + (cross >> 32);
  return (a * b) ^ upper;
}

// @ts-ignore: decorator
@inline function avalanche(h: u64): u64 {
  h ^= h >> 37;
  h *= PRIME_MX1;
  return h ^ (h >> 32);
}

// @ts-ignore: decorator
@inline function xxh64Avalanche(h: u64): u64 {
  h ^= h >> 33;
  h *= PRIME64_2;
  h ^= h >> 29;
  h *= PRIME64_3;
  return h ^ (h >> 32);
}

// @ts-ignore: decorator
@inline function rrmxmx(h: u64, len: u64): u64 {
  h ^= rotl<u64>(h, 49) ^ rotl<u64>(h, 24);
  h *= PRIME_MX2;
  h ^= (h >> 35) + len;
  h *= PRIME_MX2;
  return h ^ (h >> 28);
}

// @ts-ignore: decorator
@inline function mix16B(p: usize, s: usize, seed: u64): u64 {
  return mul128Fold64(rd64(p) ^ (rd64(s) + seed), rd64(p + 8) ^ (rd64(s + 8) - seed));
}

function len1to3(p: usize, len: usize, seed: u64): u64 {
  const c1 = <u32>load<u8>(p);
  const c2 = <u32>load<u8>(p + (len >> 1));
  const c3 = <u32>load<u8>(p + len - 1);
  const combined: u32 = (c1 << 16) | (c2 << 24) | c3 | (<u32>len << 8);
  const s = secretPtr();
  const bitflip: u64 = ((rd32(s) ^ rd32(s + 4))) + seed;
  return xxh64Avalanche(<u64>combined ^ bitflip);
}

function len4to8(p: usize, len: usize, seed: u64): u64 {
  seed ^= <u64>bswap<u32>(<u32>seed) << 32;
  const in1 = rd32(p);
  const in2 = rd32(p + len - 4);
  const s = secretPtr();
  const bitflip = (rd64(s + 8) ^ rd64(s + 16)) - seed;
  const in64 = in2 + (in1 << 32);
  return rrmxmx(in64 ^ bitflip, <u64>len);
}

function len9to16(p: usize, len: usize, seed: u64): u64 {
  const s = secretPtr();
  const bitflip1 = (rd64(s + 24) ^ rd64(s + 32)) + seed;
  const bitflip2 = (rd64(s + 40) ^ rd64(s + 48)) - seed;
  const lo = rd64(p) ^ bitflip1;
  const hi = rd64(p + len - 8) ^ bitflip2;
  const a = <u64>len + bswap<u64>(lo) + hi + mul128Fold64(lo, hi);
  return avalanche(a);
}

function len17to128(p: usize, len: usize, seed: u64): u64 {
  const s = secretPtr();
  let a: u64 = <u64>len * PRIME64_1;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        a += mix16B(p + 48, s + 96, seed);
        a += mix16B(p + len - 64, s + 112, seed);
      }
      a += mix16B(p + 32, s + 64, seed);
      a += mix16B(p + len - 48, s + 80, seed);
    }
    a += mix16B(p + 16, s + 32, seed);
    a += mix16B(p + len - 32, s + 48, seed);
  }
  a += mix16B(p, s, seed);
  a += mix16B(p + len - 16, s + 16, seed);
  return avalanche(a);
}

function len129to240(p: usize, len: usize, seed: u64): u64 {
  const s = secretPtr();
  let a: u64 = <u64>len * PRIME64_1;
  const rounds = len / 16;
  for (let i: usize = 0; i < 8; i++) a += mix16B(p + 16 * i, s + 16 * i, seed);
  let end = mix16B(p + len - 16, s + 136 - 17, seed);
  a = avalanche(a);
  for (let i: usize = 8; i < rounds; i++) end += mix16B(p + 16 * i, s + 16 * (i - 8) + 3, seed);
  return avalanche(a + end);
}

// @ts-ignore: decorator
@inline function accumulate512(input: usize, secret: usize): void {
  for (let i: usize = 0; i < 8; i++) {
    const v = rd64(input + 8 * i);
    const k = v ^ rd64(secret + 8 * i);
    const j = acc + ((i ^ 1) << 3);
    store<u64>(j, load<u64>(j) + v);
    const ai = acc + (i << 3);
    store<u64>(ai, load<u64>(ai) + (k & 0xFFFFFFFF) * (k >> 32));
  }
}

function scramble(secret: usize): void {
  for (let i: usize = 0; i < 8; i++) {
    const ai = acc + (i << 3);
    let a = load<u64>(ai);
    a ^= a >> 47;
    a ^= rd64(secret + 8 * i);
    a *= PRIME32_1;
    store<u64>(ai, a);
  }
}

function hashLong(p: usize, len: usize, seed: u64): u64 {
  let secret = secretPtr();
  if (seed != 0) {
    if (!customSecretValid || customSecretSeed != seed) {
      for (let i: usize = 0; i < SECRET_SIZE / 16; i++) {
        store<u64>(customSecret + 16 * i, rd64(secret + 16 * i) + seed);
        store<u64>(customSecret + 16 * i + 8, rd64(secret + 16 * i + 8) - seed);
      }
      customSecretSeed = seed;
      customSecretValid = true;
    }
    secret = customSecret;
  }
  store<u64>(acc, PRIME32_3);
  store<u64>(acc + 8, PRIME64_1);
  store<u64>(acc + 16, PRIME64_2);
  store<u64>(acc + 24, PRIME64_3);
  store<u64>(acc + 32, PRIME64_4);
  store<u64>(acc + 40, PRIME32_2);
  store<u64>(acc + 48, PRIME64_5);
  store<u64>(acc + 56, PRIME32_1);

  const blocks = (len - 1) / BLOCK_LEN;
  for (let b: usize = 0; b < blocks; b++) {
    const base = p + b * BLOCK_LEN;
    for (let n: usize = 0; n < STRIPES_PER_BLOCK; n++) accumulate512(base + n * STRIPE_LEN, secret + n * SECRET_CONSUME_RATE);
    scramble(secret + SECRET_SIZE - STRIPE_LEN);
  }
  const stripes = ((len - 1) - BLOCK_LEN * blocks) / STRIPE_LEN;
  const base = p + blocks * BLOCK_LEN;
  for (let n: usize = 0; n < stripes; n++) accumulate512(base + n * STRIPE_LEN, secret + n * SECRET_CONSUME_RATE);
  accumulate512(p + len - STRIPE_LEN, secret + SECRET_SIZE - STRIPE_LEN - 7);

  let r: u64 = <u64>len * PRIME64_1;
  for (let i: usize = 0; i < 4; i++) {
    r += mul128Fold64(load<u64>(acc + 16 * i) ^ rd64(secret + 11 + 16 * i), load<u64>(acc + 16 * i + 8) ^ rd64(secret + 11 + 16 * i + 8));
  }
  return avalanche(r);
}

/** XXH3-64 of `len` bytes at `p` with `seed`. */
export function xxh3(p: usize, len: usize, seed: u64): u64 {
  if (len <= 16) {
    if (len > 8) return len9to16(p, len, seed);
    if (len >= 4) return len4to8(p, len, seed);
    if (len > 0) return len1to3(p, len, seed);
    const s = secretPtr();
    return xxh64Avalanche(seed ^ (rd64(s + 56) ^ rd64(s + 64)));
  }
  if (len <= 128) return len17to128(p, len, seed);
  if (len <= 240) return len129to240(p, len, seed);
  return hashLong(p, len, seed);
}

/** The chain step's first constant for `seed`: the 9..16-byte path's bitflip of the low word. */
// @ts-ignore: decorator
@inline export function pairKeyLo(seed: u64): u64 {
  const s = secretPtr();
  return (rd64(s + 24) ^ rd64(s + 32)) + seed;
}

/** The chain step's second constant for `seed`: the bitflip of the high word. */
// @ts-ignore: decorator
@inline export function pairKeyHi(seed: u64): u64 {
  const s = secretPtr();
  return (rd64(s + 40) ^ rd64(s + 48)) - seed;
}

/**
 * XXH3-64 of LE64(a) || LE64(b) given the seed's `pairKeyLo` and `pairKeyHi`: the 9..16-byte path for exactly
 * 16 bytes. Wasm has no byte swap: a byte shuffle of the word in a vector (pinsrq, pshufb, pextrq and the
 * mask's load on x64) costs half the instructions of a dozen shifts and masks, and sits beside the multiply,
 * off the chain's critical path (512 chained blocks: 5% faster).
 */
// @ts-ignore: decorator
@inline export function pairStep(a: u64, b: u64, keyLo: u64, keyHi: u64): u64 {
  const lo = a ^ keyLo;
  const hi = b ^ keyHi;
  const v = i64x2.replace_lane(i64x2.splat(0), 0, lo);
  const swapped = <u64>i64x2.extract_lane(i8x16.shuffle(v, v, 7, 6, 5, 4, 3, 2, 1, 0, 7, 6, 5, 4, 3, 2, 1, 0), 0);
  return avalanche(16 + swapped + hi + mul128Fold64(lo, hi));
}

/** XXH3-64 of the 16 bytes LE64(a) || LE64(b): the sequence-hash chain step, allocation-free. */
export function xxh3Pair(a: u64, b: u64, seed: u64): u64 {
  return pairStep(a, b, pairKeyLo(seed), pairKeyHi(seed));
}
