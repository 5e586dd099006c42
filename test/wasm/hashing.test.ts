import { describe, expect, it } from 'vitest';
import { xxh3 as native } from '@node-rs/xxhash';
import { blockHashes, promptHashes, promptHashViews, sequenceHashes, xxh3, requestSeed } from '../../src/wasm/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import { mulberry32 } from '../helpers/rng.js';

const enc = new TextEncoder();

describe('xxh3 against Dynamo test vectors (spec section 2)', () => {
  it('XXH3("test data", 1337)', () => {
    expect(xxh3(enc.encode('test data'), 1337n)).toBe(13226331709069118873n);
  });

  it('local and sequence hashes of [1..4],[5..8],[9..12]', () => {
    const { local, seq } = promptHashes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 4);
    expect([...local]).toEqual([14643705804678351452n, 16777012769546811212n, 483935686894639516n]);
    expect([...seq]).toEqual([14643705804678351452n, 4945711292740353085n, 12583592247330656132n]);
    expect([...sequenceHashes(local)]).toEqual([...seq]);
  });

  it('derived regression vectors', () => {
    expect([...blockHashes([0, 1, 2, 3], 4)]).toEqual([9143094415614847814n]);
    const r = promptHashes([0, 1, 2, 3, 4, 5, 6, 7], 4);
    expect([...r.local]).toEqual([9143094415614847814n, 12124091508212882195n]);
    expect([...r.seq]).toEqual([9143094415614847814n, 9510318385840434533n]);
    expect([...blockHashes([0, 1, 2, 3, 4, 5], 2)]).toEqual([
      10918435022357402928n,
      10731123482949079648n,
      12189426826560619506n,
    ]);
    expect([...blockHashes([0, 1, 2, 3, 4, 5], 2, { eagle: true })]).toEqual([
      11646242937812223497n,
      9948816348502404300n,
    ]);
  });

  it('LoRA and cache-salt seeds', () => {
    expect(requestSeed('adapter-a')).toBe(8842669519798868182n);
    expect([...blockHashes([0, 1, 2, 3], 4, { loraName: 'adapter-a' })]).toEqual([6665157333201000639n]);
    expect(requestSeed(undefined, 'tenant-a')).toBe(1948188790972764086n);
    expect([...blockHashes([1, 2, 3, 4], 4, { cacheSalt: 'tenant-a' })]).toEqual([5738685477468498325n]);
    // Empty LoRA name is the base model; different LoRAs differ.
    expect([...blockHashes([1, 2, 3, 4], 4, { loraName: '' })]).toEqual([14643705804678351452n]);
    expect(blockHashes([1, 2, 3, 4], 4, { loraName: 'a' })[0]).not.toBe(
      blockHashes([1, 2, 3, 4], 4, { loraName: 'b' })[0],
    );
  });

  it('multimodal hashes are appended sorted', () => {
    expect([...blockHashes([1, 2, 3, 4], 4, { mmHashes: [[42n]] })]).toEqual([14000361058806882387n]);
    expect([...blockHashes([1, 2, 3, 4], 4, { mmHashes: [[42n, 7n]] })]).toEqual([6295130183325757331n]);
    expect([...blockHashes([1, 2, 3, 4, 5, 6, 7, 8], 4, { mmHashes: [undefined, [7n, 42n]] })]).toEqual([
      14643705804678351452n,
      blockHashes([5, 6, 7, 8], 4, { mmHashes: [[42n, 7n]] })[0],
    ]);
  });

  it('block counts (Dynamo behavioural tests)', () => {
    for (const bs of [11, 32, 64]) {
      const seq = (len: number): number[] => Array.from({ length: len }, (_, i) => i);
      expect(blockHashes(seq(bs), bs).length).toBe(1);
      expect(blockHashes(seq(bs + 1), bs).length).toBe(1);
      expect(blockHashes(seq(2 * bs + 1), bs).length).toBe(2);
      expect(blockHashes(seq(bs - 1), bs).length).toBe(0);
    }
  });
});

describe('xxh3 against native XXH3 (@node-rs/xxhash)', () => {
  const classes: [number, number][] = [
    [0, 0],
    [1, 3],
    [4, 8],
    [9, 16],
    [17, 128],
    [129, 240],
    [241, 4096],
  ];
  for (const [lo, hi] of classes) {
    it(`10,000 random inputs of ${lo}..${hi} bytes with random seeds`, () => {
      const rng = mulberry32(lo * 7919 + hi);
      for (let i = 0; i < 10_000; i++) {
        const len = lo + Math.floor(rng() * (hi - lo + 1));
        const bytes = new Uint8Array(len);
        for (let j = 0; j < len; j++) bytes[j] = Math.floor(rng() * 256);
        const seed = (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
        const s = i % 10 === 0 ? 0n : seed;
        const got = xxh3(bytes, s);
        const want = native.xxh64(bytes, s);
        if (got !== want) expect({ len, seed: s, got }).toEqual({ len, seed: s, got: want });
      }
    });
  }
});

describe('whole-prompt hashing against native XXH3 of each block', () => {
  /** Local and chained sequence hashes computed one block at a time with the native XXH3. */
  function reference(
    tokens: Uint32Array,
    bs: number,
    eagle: boolean,
    seed: bigint,
  ): { local: bigint[]; seq: bigint[] } {
    const bytes = new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength);
    const n = eagle ? (tokens.length === 0 ? 0 : Math.floor((tokens.length - 1) / bs)) : Math.floor(tokens.length / bs);
    const window = (bs + (eagle ? 1 : 0)) * 4;
    const local: bigint[] = [];
    const seq: bigint[] = [];
    const pair = new BigUint64Array(2);
    for (let i = 0; i < n; i++) {
      local.push(native.xxh64(bytes.subarray(i * bs * 4, i * bs * 4 + window), seed));
      if (i === 0) seq.push(local[0]!);
      else {
        pair[0] = seq[i - 1]!;
        pair[1] = local[i]!;
        seq.push(native.xxh64(new Uint8Array(pair.buffer), 1337n));
      }
    }
    return { local, seq };
  }

  // Windows of 17..128 bytes are hashed two blocks at a time in SIMD lanes with the chain in the same loop;
  // odd block counts end with one block alone, and 1, 2 and 3 blocks cover the loop's edges.
  // Windows of 241..1,024 bytes (block sizes 61..256, the mocker's 64 among them) go one block at a time in
  // vectors; 1,028 bytes (256 with an eagle token) and longer take the scalar path again.
  it('block sizes 1..40, 56..66, 128, 255, 256, 300 (plain and eagle windows), odd and even block counts, LoRA seeds', () => {
    const rng = mulberry32(2026);
    const sizes = [
      ...Array.from({ length: 40 }, (_, i) => i + 1),
      ...Array.from({ length: 11 }, (_, i) => 56 + i),
      128,
      255,
      256,
      300,
    ];
    for (const bs of sizes) {
      for (const blocks of [1, 2, 3, 8, 33]) {
        for (const eagle of [false, true]) {
          const tokens = Uint32Array.from({ length: blocks * bs + (eagle ? 1 : 0) + (bs > 1 ? 1 : 0) }, () =>
            Math.floor(rng() * 2 ** 32),
          );
          const loraName = blocks === 3 ? `adapter-${bs}` : undefined;
          const want = reference(tokens, bs, eagle, requestSeed(loraName));
          const got = promptHashes(tokens, bs, { eagle, loraName });
          expect({ bs, blocks, eagle, local: [...got.local], seq: [...got.seq] }).toEqual({
            bs,
            blocks,
            eagle,
            ...want,
          });
          expect([...blockHashes(tokens, bs, { eagle, loraName })]).toEqual(want.local);
        }
      }
    }
  });
});

// The default XXH3 secret's first 64 bytes: with the seed, the keys of 17..128-byte inputs and of the 16-byte chain step.
const SECRET_HEX =
  'b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f' +
  'cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c' +
  '3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8' +
  'a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364';
const SECRET = Uint8Array.from(SECRET_HEX.match(/../g)!, (h) => parseInt(h, 16));
const secretWord = (offset: number): bigint => new DataView(SECRET.buffer).getBigUint64(offset, true);
const u64 = (v: bigint): bigint => BigInt.asUintN(64, v);
/** Multiplier words at the edges of the 32x32->64 partial products' carries. */
const EXTREMES = [
  0n,
  1n,
  0xffffffffn,
  1n << 32n,
  0xffffffff00000000n,
  u64(-1n),
  0x8000000080000000n,
  0xfffffffeffffffffn,
];

describe("128-bit products at their carries' edges", () => {
  it('17..128-byte windows whose mixed words are all-ones, half-ones and the like, against native XXH3', () => {
    const rng = mulberry32(77);
    for (const bs of [8, 16, 24, 32]) {
      const len = bs * 4;
      // Each 16-byte chunk's key: offsets 0, len - 16, 16, len - 32, ... take keys 0, 16, 32, 48, ... in turn.
      const keyOf = new Map<number, number>();
      for (let r = 0; r < len / 32; r++) {
        keyOf.set(16 * r, 32 * r);
        keyOf.set(len - 16 - 16 * r, 32 * r + 16);
      }
      for (const loraName of [undefined, 'adapter-x']) {
        const seed = requestSeed(loraName);
        const blocks = 9;
        const words = new BigUint64Array((blocks * len) / 8);
        for (let b = 0; b < blocks; b++) {
          for (const [off, key] of keyOf) {
            const pick = (): bigint => EXTREMES[Math.floor(rng() * EXTREMES.length)]!;
            words[(b * len + off) / 8] = pick() ^ u64(secretWord(key) + seed);
            words[(b * len + off) / 8 + 1] = pick() ^ u64(secretWord(key + 8) - seed);
          }
        }
        const tokens = new Uint32Array(words.buffer);
        const bytes = new Uint8Array(words.buffer);
        const got = promptHashes(tokens, bs, { loraName });
        for (let b = 0; b < blocks; b++) {
          expect(got.local[b]).toBe(native.xxh64(bytes.subarray(b * len, (b + 1) * len), seed));
        }
        expect([...sequenceHashes(got.local)]).toEqual([...got.seq]);
      }
    }
  });

  it('the 16-byte chain step and 9..16-byte inputs with extreme words, against native XXH3', () => {
    const keyLo = u64((secretWord(24) ^ secretWord(32)) + 1337n);
    const keyHi = u64((secretWord(40) ^ secretWord(48)) - 1337n);
    for (const lo of EXTREMES) {
      for (const hi of EXTREMES) {
        const pair = BigUint64Array.of(lo ^ keyLo, hi ^ keyHi);
        const want = native.xxh64(new Uint8Array(pair.buffer), 1337n);
        expect(sequenceHashes(pair)[1]).toBe(want);
        expect(xxh3(new Uint8Array(pair.buffer), 1337n)).toBe(want);
      }
    }
  });
});

describe('bad input', () => {
  it('zero, negative and fractional block sizes are rejected with a typed error', () => {
    for (const bs of [0, -1, 1.5, Number.NaN]) {
      try {
        blockHashes([1, 2, 3, 4], bs);
        expect.unreachable();
      } catch (e) {
        expect(isKvgateError(e, 'KVG_ERR_INVALID_BLOCK_SIZE')).toBe(true);
      }
    }
  });

  it('tokens outside u32 are rejected, naming the index', () => {
    for (const t of [-1, 2 ** 32, 1.5, Number.NaN]) {
      try {
        blockHashes([1, 2, t, 4], 4);
        expect.unreachable();
      } catch (e) {
        expect(isKvgateError(e, 'KVG_ERR_INVALID_TOKEN')).toBe(true);
        expect((e as Error).message).toContain('index 2');
      }
    }
  });

  it('an empty prompt and a prompt shorter than a block give no hashes', () => {
    expect(promptHashes([], 16).local.length).toBe(0);
    expect(promptHashes(new Uint32Array(15), 16).seq.length).toBe(0);
    expect(sequenceHashes(new BigUint64Array(0)).length).toBe(0);
  });

  it('Uint32Array and number[] inputs agree, including u32 max', () => {
    const tokens = [0, 1, 0xffffffff, 7, 8, 9, 10, 11];
    expect([...blockHashes(new Uint32Array(tokens), 4)]).toEqual([...blockHashes(tokens, 4)]);
  });
});

describe('promptHashViews: the router hashes into views of a shared buffer', () => {
  const rng = mulberry32(28);
  const prompt = (tokens: number): Uint32Array =>
    Uint32Array.from({ length: tokens }, () => Math.floor(rng() * 150_000));

  it('gives the hashes promptHashes gives, and each result stays intact through later calls', () => {
    // Enough prompts to fill several shared buffers, of sizes on both sides of the carving limit.
    const prompts = [100, 8192, 16, 4096, 40_000, 8192, 1000, 8192, 8192, 8192, 8192, 8192, 8192, 8192].map(prompt);
    const views = prompts.map((p) => promptHashViews(p, 16, { loraName: 'adapter-a' }));
    for (const [i, p] of prompts.entries()) {
      const own = promptHashes(p, 16, { loraName: 'adapter-a' });
      expect([...views[i]!.local]).toEqual([...own.local]);
      expect([...views[i]!.seq]).toEqual([...own.seq]);
    }
    // Results never share bytes: each one's arrays cover a region no other result covers.
    const regions = views
      .flatMap((v) => [v.local, v.seq])
      .filter((a) => a.length > 0)
      .map((a) => ({ buffer: a.buffer, from: a.byteOffset, to: a.byteOffset + a.byteLength }))
      .sort((a, b) => a.from - b.from);
    for (const [i, a] of regions.entries()) {
      for (const b of regions.slice(i + 1)) if (a.buffer === b.buffer) expect(b.from).toBeGreaterThanOrEqual(a.to);
    }
  });

  it('promptHashes keeps its own buffer per result (a caller may transfer it)', () => {
    const p = prompt(8192);
    const a = promptHashes(p, 16);
    const b = promptHashes(p, 16);
    expect(a.seq.buffer).toBe(a.local.buffer);
    expect(a.local.buffer).not.toBe(b.local.buffer);
    expect(a.local.buffer.byteLength).toBe(2 * 512 * 8);
  });
});
