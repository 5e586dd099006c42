/**
 * Block and sequence hashing exactly as Dynamo computes them:
 * XXH3-64 over little-endian u32 tokens, seed 1337 (+ LoRA and cache-salt
 * mixing), chained sequence hashes. One WASM call per prompt.
 */
import { blockSize as checkBlockSize, CarvedSlabs } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { wasm } from './instance.js';

export const BLOCK_HASH_SEED = 1337n;
const U64 = (1n << 64n) - 1n;
const encoder = new TextEncoder();

export interface BlockHashOptions {
  /** LoRA adapter name; mixed into the seed as + XXH3(name, 0). Empty = none. */
  loraName?: string | undefined;
  /** Cache namespace / salt; mixed into the seed as + XXH3(salt, 1). Empty = none. */
  cacheSalt?: string | undefined;
  /** Per block, its multimodal content hashes (appended sorted ascending as u64 LE). */
  mmHashes?: readonly (readonly bigint[] | undefined)[] | undefined;
  /** Speculative (Eagle) windows: each block's tokens plus the next token. */
  eagle?: boolean | undefined;
}

export interface PromptHashes {
  /** Local block hashes (complete blocks only). */
  local: BigUint64Array;
  /** Chained sequence hashes, same length. */
  seq: BigUint64Array;
}

/** XXH3-64 of `bytes` with `seed` (default 0). */
export function xxh3(bytes: Uint8Array, seed: bigint = 0n): bigint {
  const m = wasm();
  const ptr = m.reserve(Math.max(bytes.length, 1));
  m.views().u8.set(bytes, ptr);
  const s = BigInt.asUintN(64, seed);
  return BigInt.asUintN(64, m.exports.xxh3_64(ptr, bytes.length, Number(s & 0xffffffffn), Number(s >> 32n)));
}

/**
 * A request seed with its two u32 halves, as `hashPrompt` takes them: split once per seed, not per prompt
 * (two BigInt operations and their conversions measured about 1.5 µs a prompt with the CPU caches cold).
 */
interface Seed {
  readonly value: bigint;
  readonly lo: number;
  readonly hi: number;
}

function seedOf(value: bigint): Seed {
  return { value, lo: Number(value & 0xffffffffn), hi: Number(value >> 32n) };
}

const DEFAULT_SEED = seedOf(BLOCK_HASH_SEED);
const seedCache = new Map<string, Seed>();

/** The request seed: 1337 (+ XXH3(lora, 0)) (+ XXH3(salt, 1)), wrapping u64. */
export function requestSeed(loraName?: string, cacheSalt?: string): bigint {
  return seedFor(loraName, cacheSalt).value;
}

function seedFor(loraName: string | undefined, cacheSalt: string | undefined): Seed {
  if (!loraName && !cacheSalt) return DEFAULT_SEED;
  const key = `${loraName ?? ''}\u0000${cacheSalt ?? ''}`;
  let seed = seedCache.get(key);
  if (seed === undefined) {
    let value = BLOCK_HASH_SEED;
    if (loraName) value = (value + xxh3(encoder.encode(loraName), 0n)) & U64;
    if (cacheSalt) value = (value + xxh3(encoder.encode(cacheSalt), 1n)) & U64;
    if (seedCache.size > 4096) seedCache.clear();
    seed = seedOf(value);
    seedCache.set(key, seed);
  }
  return seed;
}

/** Writes tokens into WASM memory at `ptr`, validating plain-number arrays as u32. */
function writeTokens(u32: Uint32Array, ptr: number, tokens: Uint32Array | readonly number[]): void {
  const base = ptr >>> 2;
  if (tokens instanceof Uint32Array) {
    u32.set(tokens, base);
    return;
  }
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (!Number.isInteger(t) || t < 0 || t > 0xffffffff) {
      throw new KvgateError('KVG_ERR_INVALID_TOKEN', `token at index ${i} is not a u32: ${String(t)}`, { index: i });
    }
    u32[base + i] = t;
  }
}

/**
 * Where a result's hashes are copied out of WASM memory to: a fresh buffer the caller owns (may transfer
 * or detach it), or a view carved from a buffer shared with other results (`promptHashViews`).
 */
type Destination = 'own' | 'shared';

/**
 * The shared slabs results are carved from (`CarvedSlabs`). A fresh buffer per result costs an off-heap allocation
 * (and its finalisation) that measured as long as copying 8 KiB into it. Only results of at most a quarter of a
 * slab are carved, so a result that outlives its neighbours holds at most `SHARED_BYTES` beyond its own size.
 */
const SHARED_BYTES = 64 << 10;
const shared = new CarvedSlabs(SHARED_BYTES);

/** `count` u64s to copy a result into (see `Destination`). */
function destination(count: number, dest: Destination): BigUint64Array {
  const bytes = count * 8;
  if (dest === 'own' || bytes > SHARED_BYTES / 4) return new BigUint64Array(count);
  const at = shared.carve(bytes);
  return new BigUint64Array(shared.buffer, at, count);
}

function hashInto(
  tokens: Uint32Array | readonly number[],
  blockSize: number,
  opts: BlockHashOptions | undefined,
  withSeq: boolean,
  dest: Destination,
): PromptHashes {
  checkBlockSize(blockSize);
  const m = wasm();
  const n = tokens.length;
  const eagle = opts?.eagle === true;
  const blocks = eagle ? (n === 0 ? 0 : Math.floor((n - 1) / blockSize)) : Math.floor(n / blockSize);
  const mm = opts?.mmHashes;
  let mmCount = 0;
  if (mm !== undefined) for (let i = 0; i < blocks && i < mm.length; i++) mmCount += mm[i]?.length ?? 0;
  // Layout: tokens | local | seq | mm offsets | mm values (8-byte aligned).
  const tokBytes = ((n * 4 + 7) >>> 3) << 3;
  const localOff = tokBytes;
  const seqOff = localOff + blocks * 8;
  const mmOffOff = seqOff + blocks * 8;
  const mmValOff = mmOffOff + (((blocks + 1) * 4 + 7) >>> 3) * 8;
  const total = mmValOff + mmCount * 8 + 8;
  // The seed first: computing a new one hashes the LoRA name through the same io region.
  const seed = seedFor(opts?.loraName, opts?.cacheSalt);
  const io = m.reserve(total);
  const v = m.views();
  writeTokens(v.u32, io, tokens);
  let mmOffsets = 0;
  let mmValues = 0;
  if (mmCount > 0) {
    mmOffsets = io + mmOffOff;
    mmValues = io + mmValOff;
    let k = 0;
    for (let i = 0; i < blocks; i++) {
      v.u32[(mmOffsets >>> 2) + i] = k;
      const list = mm![i];
      if (list) for (const h of list) v.u64[(mmValues >>> 3) + k++] = BigInt.asUintN(64, h);
    }
    v.u32[(mmOffsets >>> 2) + blocks] = k;
  }
  m.exports.hashPrompt(
    io,
    n,
    blockSize,
    eagle ? 1 : 0,
    seed.lo,
    seed.hi,
    mmOffsets,
    mmValues,
    io + localOff,
    withSeq ? io + seqOff : 0,
  );
  // One copy for both results: local and seq are adjacent in WASM memory.
  const count = withSeq ? 2 * blocks : blocks;
  const out = destination(count, dest);
  out.set(v.u64.subarray((io + localOff) >>> 3, ((io + localOff) >>> 3) + count));
  if (!withSeq) return { local: out, seq: out };
  const { buffer, byteOffset } = out;
  return {
    local: new BigUint64Array(buffer, byteOffset, blocks),
    seq: new BigUint64Array(buffer, byteOffset + blocks * 8, blocks),
  };
}

/**
 * Local block hashes over the complete blocks of `tokens` (a trailing partial
 * block is ignored). Throws KVG_ERR_INVALID_BLOCK_SIZE / KVG_ERR_INVALID_TOKEN.
 */
export function blockHashes(
  tokens: Uint32Array | readonly number[],
  blockSize: number,
  opts?: BlockHashOptions,
): BigUint64Array {
  return hashInto(tokens, blockSize, opts, false, 'own').local;
}

/** Local and chained sequence hashes of a prompt in one WASM call. */
export function promptHashes(
  tokens: Uint32Array | readonly number[],
  blockSize: number,
  opts?: BlockHashOptions,
): PromptHashes {
  return hashInto(tokens, blockSize, opts, true, 'own');
}

/**
 * `promptHashes` for a caller that keeps the arrays by reference only and never transfers or detaches
 * their buffer (the router's own hashing): they are views into a buffer shared with other results,
 * which saves an allocation per prompt.
 */
export function promptHashViews(
  tokens: Uint32Array | readonly number[],
  blockSize: number,
  opts?: BlockHashOptions,
): PromptHashes {
  return hashInto(tokens, blockSize, opts, true, 'shared');
}

/** Chained sequence hashes of local block hashes: seq[0] = local[0], seq[i] = XXH3(seq[i-1] ‖ local[i], 1337). */
export function sequenceHashes(local: BigUint64Array): BigUint64Array {
  const m = wasm();
  const n = local.length;
  const io = m.reserve(n * 16 + 8);
  const v = m.views();
  v.u64.set(local, io >>> 3);
  m.exports.chainSequence(io, n, io + n * 8);
  const out = new BigUint64Array(n);
  out.set(v.u64.subarray((io >>> 3) + n, (io >>> 3) + 2 * n));
  return out;
}
