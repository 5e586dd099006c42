import { describe, expect, it } from 'vitest';
import { encode } from '@msgpack/msgpack';
import {
  decodeKvEventBatch,
  parseEventFrames,
  normaliseHash,
  mediumToTier,
  readSeq,
  encodeSeq,
  REPLAY_END_SEQ,
  type KvEventBatch,
  type StoredBlocksEvent,
  type RemovedBlocksEvent,
} from '../../src/events/index.js';
import { encodeBatch, ENCODINGS } from '../helpers/zmq-publisher.js';

/** Bytes from spec notation: hex pairs, and "quoted" ASCII runs (the msgpack str header is written out separately). */
function bytes(spec: string): Uint8Array {
  const out: number[] = [];
  for (const tok of spec.match(/"[^"]*"|[0-9a-fA-F]+/g) ?? []) {
    if (tok.startsWith('"')) for (const ch of tok.slice(1, -1)) out.push(ch.charCodeAt(0));
    else for (let i = 0; i < tok.length; i += 2) out.push(parseInt(tok.slice(i, i + 2), 16));
  }
  return Uint8Array.from(out);
}

function ok(payload: Uint8Array): KvEventBatch {
  const r = decodeKvEventBatch(payload);
  if (!r.ok) throw new Error(`decode failed: ${r.error.kind} ${r.error.message}`);
  return r.batch;
}

const HEADER = '93 cb 3ff8000000000000 91';

describe('vLLM golden bytes (engine-wire-formats.md 1.5)', () => {
  it('(a) legacy positional BlockStored, 52 bytes', () => {
    const b = bytes(
      `${HEADER} 9c ab "BlockStored" 91 cf deadbeef12345678 c0 94 01 02 03 04 04 c0 a3 "GPU" c0 c0 c0 c0 c0 00`,
    );
    expect(b.length).toBe(52);
    const batch = ok(b);
    expect(batch.ts).toBe(1.5);
    expect(batch.dpRank).toBe(0);
    expect(batch.errors).toEqual([]);
    const ev = batch.events[0] as StoredBlocksEvent;
    expect(ev.type).toBe('stored');
    expect([...ev.blockHashes]).toEqual([0xdeadbeef12345678n]);
    expect(ev.parentHash).toBeNull();
    expect([...ev.tokenIds]).toEqual([1, 2, 3, 4]);
    expect(ev.blockSize).toBe(4);
    expect(ev.tier).toBe('device');
    expect(ev.loraName).toBeUndefined();
    expect(ev.loraId).toBeUndefined();
    expect(ev.groupIdx).toBe(0);
    expect(ev.droppedBlocks).toBe(0);
  });

  it('legacy BlockRemoved (33 bytes) and AllBlocksCleared (30 bytes)', () => {
    const rm = bytes(`${HEADER} 94 ac "BlockRemoved" 91 07 a3 "GPU" c0 00`);
    expect(rm.length).toBe(33);
    const ev = ok(rm).events[0] as RemovedBlocksEvent;
    expect(ev).toMatchObject({ type: 'removed', tier: 'device', groupIdx: 0 });
    expect([...ev.blockHashes]).toEqual([7n]);
    const cl = bytes(`${HEADER} 91 b0 "AllBlocksCleared" 00`);
    expect(cl.length).toBe(30);
    expect(ok(cl).events).toEqual([{ type: 'cleared' }]);
  });

  it('(b) map-encoded BlockStored, 175 bytes', () => {
    const b = bytes(
      `${HEADER} 8a a4 "type" ab "BlockStored" ac "block_hashes" 91 cf deadbeef12345678 b1 "parent_block_hash" c0 ` +
        `a9 "token_ids" 94 01 02 03 04 aa "block_size" 04 a7 "lora_id" c0 a6 "medium" a3 "GPU" a9 "lora_name" c0 ` +
        `a9 "group_idx" 00 b2 "kv_cache_spec_kind" ae "full_attention" 00`,
    );
    expect(b.length).toBe(175);
    const ev = ok(b).events[0] as StoredBlocksEvent;
    expect([...ev.blockHashes]).toEqual([0xdeadbeef12345678n]);
    expect([...ev.tokenIds]).toEqual([1, 2, 3, 4]);
    expect(ev).toMatchObject({
      type: 'stored',
      parentHash: null,
      blockSize: 4,
      tier: 'device',
      groupIdx: 0,
      loraName: undefined,
    });
  });

  it('map BlockRemoved and AllBlocksCleared', () => {
    const rm = ok(
      bytes(
        `${HEADER} 84 a4 "type" ac "BlockRemoved" ac "block_hashes" 91 07 a6 "medium" a3 "GPU" a9 "group_idx" 00 00`,
      ),
    );
    expect(rm.events[0]).toMatchObject({ type: 'removed', tier: 'device', groupIdx: 0 });
    expect([...(rm.events[0] as RemovedBlocksEvent).blockHashes]).toEqual([7n]);
    expect(ok(bytes(`${HEADER} 81 a4 "type" b0 "AllBlocksCleared" 00`)).events).toEqual([{ type: 'cleared' }]);
  });

  it('sequence frames: batch 0, batch 258, end marker', () => {
    expect(readSeq(bytes('00 00 00 00 00 00 00 00'))).toBe(0n);
    expect(readSeq(bytes('00 00 00 00 00 00 01 02'))).toBe(258n);
    expect(readSeq(bytes('ff ff ff ff ff ff ff ff'))).toBe(REPLAY_END_SEQ);
    expect([...encodeSeq(258n)]).toEqual([0, 0, 0, 0, 0, 0, 1, 2]);
    expect(readSeq(bytes('00 01'))).toBeUndefined();
  });

  it('the real-world v0.26 sample shape (kthena#1535): u64 above 2^63 keeps every bit', () => {
    const payload = encode(
      [
        1789095808.83,
        [
          {
            type: 'BlockStored',
            block_hashes: [15760518052499183552n],
            parent_block_hash: null,
            token_ids: Array.from({ length: 16 }, (_, i) => 1000 + i),
            block_size: 16,
            lora_id: null,
            medium: 'GPU',
            lora_name: null,
            extra_keys: [null],
            group_idx: 0,
            kv_cache_spec_kind: 'full_attention',
          },
        ],
        0,
      ],
      { useBigInt64: true },
    );
    const ev = ok(payload).events[0] as StoredBlocksEvent;
    expect([...ev.blockHashes]).toEqual([15760518052499183552n]);
    expect(ev.tokenIds.length).toBe(16);
    expect(ev.mmHashes).toBeUndefined();
  });

  it('digest-byte hashes (INT_BLOCK_HASHES=0) fold to their last 8 bytes, big-endian', () => {
    const digest = Uint8Array.from({ length: 32 }, (_, i) => i);
    const payload = encode([1.5, [['BlockRemoved', [digest], 'GPU']], 0], { useBigInt64: true });
    expect([...(ok(payload).events[0] as RemovedBlocksEvent).blockHashes]).toEqual([0x18191a1b1c1d1e1fn]);
  });

  it('positional arrays of every length from the oldest (tag + 4) to newer (tag + 15) decode alike', () => {
    const fields: unknown[] = [
      [5],
      9,
      [1, 2],
      2,
      null,
      'GPU',
      'lora-x',
      null,
      0,
      'full_attention',
      null,
      'LOCAL',
      null,
      's',
      1,
    ];
    for (let n = 4; n <= fields.length; n++) {
      const ev = ok(encode([1.5, [['BlockStored', ...fields.slice(0, n)]]], { useBigInt64: true }))
        .events[0] as StoredBlocksEvent;
      expect(ev.parentHash).toBe(9n);
      expect([...ev.tokenIds]).toEqual([1, 2]);
      expect(ev.loraName).toBe(n >= 7 ? 'lora-x' : undefined);
    }
    // A two-element batch (vLLM before data_parallel_rank) has no rank.
    expect(ok(encode([1.5, []])).dpRank).toBeNull();
  });

  it('extra_keys digests become per-block multimodal hashes (first 16 hex digits)', () => {
    const d = 'ab'.repeat(32);
    const ev = ok(
      encode([
        1.5,
        [
          {
            type: 'BlockStored',
            block_hashes: [1, 2],
            parent_block_hash: null,
            token_ids: [1, 2, 3, 4],
            block_size: 2,
            extra_keys: [null, [d, 'lora-or-salt']],
          },
        ],
        0,
      ]),
    ).events[0] as StoredBlocksEvent;
    expect(ev.mmHashes).toEqual([undefined, [0xababababababababn]]);
    expect(ev.extraKeyStrings).toBeUndefined();
  });

  it("the strings of block 0's extra_keys entry (LoRA name, cache salt) are reported, not its digests", () => {
    const d = 'cd'.repeat(32);
    const stored = (extraKeys: unknown): StoredBlocksEvent =>
      ok(
        encode([
          1.5,
          [['BlockStored', [1, 2], null, [1, 2, 3, 4], 2, null, 'GPU', 'lora-x', extraKeys, 0, null, null]],
          0,
        ]),
      ).events[0] as StoredBlocksEvent;
    const ev = stored([['lora-x', d, 'salt-1'], null]);
    expect(ev.extraKeyStrings).toEqual(['lora-x', 'salt-1']);
    expect(ev.mmHashes).toEqual([[0xcdcdcdcdcdcdcdcdn], undefined]);
    expect(ev.cacheSalt).toBeUndefined(); // vLLM's salt is reported, never hashed
    expect(stored([null, null]).extraKeyStrings).toBeUndefined();
    expect(stored(null).extraKeyStrings).toBeUndefined();
  });
});

describe('SGLang flavour (engine-wire-formats.md 2)', () => {
  it('map-form BlockStored, 123 bytes: signed int64 hash normalised to u64', () => {
    const b = bytes(
      `${HEADER} 88 a4 "type" ab "BlockStored" ac "block_hashes" 91 fb b1 "parent_block_hash" c0 a9 "token_ids" 92 01 02 ` +
        `aa "block_size" 02 a7 "lora_id" c0 a6 "medium" a3 "GPU" aa "session_id" a2 "s1" 00`,
    );
    expect(b.length).toBe(123);
    const ev = ok(b).events[0] as StoredBlocksEvent;
    expect([...ev.blockHashes]).toEqual([(1n << 64n) - 5n]);
    expect([...ev.tokenIds]).toEqual([1, 2]);
    expect(ev).toMatchObject({ blockSize: 2, tier: 'device', cacheSalt: undefined, loraName: undefined });
  });

  it('legacy salted BlockStored: the 8th element is {cache_salt}, not a lora_name', () => {
    const ev = ok(bytes(`${HEADER} 98 ab "BlockStored" 91 7b c0 92 01 02 02 c0 a3 "GPU" 81 aa "cache_salt" a1 "t" 00`))
      .events[0] as StoredBlocksEvent;
    expect([...ev.blockHashes]).toEqual([123n]);
    expect(ev.cacheSalt).toBe('t');
    expect(ev.loraName).toBeUndefined();
  });

  it('negative int64 hashes (d3) and 64-bit parents normalise bitwise', () => {
    const ev = ok(
      encode([1.5, [['BlockStored', [-1n, -(1n << 63n)], -2n, [1, 2], 1, null, 'GPU']], 3], { useBigInt64: true }),
    ).events[0] as StoredBlocksEvent;
    expect([...ev.blockHashes]).toEqual([(1n << 64n) - 1n, 1n << 63n]);
    expect(ev.parentHash).toBe((1n << 64n) - 2n);
  });

  it('media map to storage tiers', () => {
    expect(mediumToTier(null)).toBe('device');
    expect(mediumToTier('GPU')).toBe('device');
    expect(mediumToTier('CPU')).toBe('host_pinned');
    expect(mediumToTier('CPU_TIER1')).toBe('host_pinned');
    expect(mediumToTier('CPU_PINNED')).toBe('host_pinned');
    expect(mediumToTier('CPU_TIER2')).toBe('disk');
    expect(mediumToTier('DISK')).toBe('disk');
    expect(mediumToTier('EXTERNAL')).toBe('external');
    expect(mediumToTier('TAPE')).toBeUndefined();
  });
});

describe('every test-publisher encoding decodes to the same events', () => {
  it('stored / removed / cleared', () => {
    const big = 0xfedcba9876543210n;
    const events = [
      {
        type: 'stored' as const,
        blockHashes: [big, 5n],
        parent: 0x8000000000000000n,
        tokens: [1, 2, 3, 4],
        blockSize: 2,
        loraName: 'ad',
        medium: 'CPU_TIER1',
      },
      { type: 'removed' as const, blockHashes: [big] },
      { type: 'cleared' as const },
    ];
    for (const encoding of ENCODINGS) {
      const batch = ok(encodeBatch(events, { encoding, dpRank: 2 }));
      expect(batch.dpRank).toBe(2);
      const [st, rm, cl] = batch.events as [StoredBlocksEvent, RemovedBlocksEvent, { type: string }];
      expect([...st.blockHashes], encoding).toEqual([big, 5n]);
      expect(st.parentHash).toBe(0x8000000000000000n);
      expect(st.tier).toBe('host_pinned');
      // Legacy SGLang arrays have no lora_name position (only lora_id).
      expect(st.loraName).toBe(encoding === 'sglang-array' ? undefined : 'ad');
      expect([...rm.blockHashes]).toEqual([big]);
      expect(cl.type).toBe('cleared');
    }
  });
});

describe('bad input is a typed value, never a throw', () => {
  it('frame counts and sequence frames', () => {
    expect(parseEventFrames([bytes('00')])).toMatchObject({ ok: false, error: { kind: 'frame_count' } });
    expect(parseEventFrames([bytes(''), bytes('00'), bytes('00'), bytes('00')])).toMatchObject({
      ok: false,
      error: { kind: 'frame_count' },
    });
    expect(parseEventFrames([bytes(''), bytes('0001'), bytes('90')])).toMatchObject({
      ok: false,
      error: { kind: 'bad_sequence' },
    });
    expect(parseEventFrames([bytes(''), bytes('0000000000000005'), bytes('90')])).toMatchObject({
      ok: true,
      value: { seq: 5n },
    });
  });

  it('garbled payloads and wrong batch shapes', () => {
    expect(decodeKvEventBatch(bytes('c1'))).toMatchObject({ ok: false, error: { kind: 'msgpack' } });
    expect(decodeKvEventBatch(bytes('93 01'))).toMatchObject({ ok: false, error: { kind: 'msgpack' } });
    expect(decodeKvEventBatch(bytes('01 02'))).toMatchObject({ ok: false, error: { kind: 'msgpack' } });
    expect(decodeKvEventBatch(bytes(''))).toMatchObject({ ok: false, error: { kind: 'msgpack' } });
    expect(decodeKvEventBatch(encode({ a: 1 }))).toMatchObject({ ok: false, error: { kind: 'batch_shape' } });
    expect(decodeKvEventBatch(encode([1.5]))).toMatchObject({ ok: false, error: { kind: 'batch_shape' } });
    expect(decodeKvEventBatch(encode(['x', []]))).toMatchObject({ ok: false, error: { kind: 'batch_shape' } });
    expect(decodeKvEventBatch(encode([1.5, 'events']))).toMatchObject({ ok: false, error: { kind: 'batch_shape' } });
    expect(decodeKvEventBatch(encode([1.5, [], -1]))).toMatchObject({ ok: false, error: { kind: 'batch_shape' } });
  });

  it('a bad event is dropped with its index; the rest of the batch survives', () => {
    const good = ['BlockRemoved', [7], 'GPU'];
    const cases: [unknown, string][] = [
      [['BlockUpdated', [1]], 'unknown_tag'],
      [{ type: 'Teleported' }, 'unknown_tag'],
      [[42, [1]], 'bad_event'],
      [{ no_type: 1 }, 'bad_event'],
      ['BlockStored', 'bad_event'],
      [['BlockStored', [1], null, [1, 2]], 'bad_event'],
      [['BlockStored', [1], null, [1, 2], 0], 'bad_event'],
      [['BlockStored', [1], null, [1, -2], 2], 'bad_event'],
      [
        [
          'BlockStored',
          [1],
          null,
          [
            [1, 2],
            [2, 3],
          ],
          2,
        ],
        'bad_event',
      ],
      [['BlockStored', [1], null, [1, 2, 3], 1], 'bad_event'],
      [['BlockStored', [1.5], null, [1, 2], 2], 'bad_hash'],
      [['BlockStored', ['x'], null, [1, 2], 2], 'bad_hash'],
      [['BlockStored', [1], new Uint8Array(0), [1, 2], 2], 'bad_hash'],
      [['BlockStored', [1], null, [1, 2], 2, null, 'TAPE'], 'unknown_medium'],
      [['BlockRemoved'], 'bad_event'],
      [{ type: 'BlockStored', block_hashes: [1] }, 'bad_event'],
      [{ type: 'BlockStored', block_hashes: [1], token_ids: [1], block_size: 1, lora_name: 5 }, 'bad_event'],
      // Indexes and ids the engines send only as non-negative integers: a KV-cache group, a LoRA id, a window.
      [['BlockStored', [1], null, [1, 2], 2, null, 'GPU', null, null, -1], 'bad_event'],
      [{ type: 'BlockStored', block_hashes: [1], token_ids: [1], block_size: 1, group_idx: -1 }, 'bad_event'],
      [['BlockRemoved', [1], 'GPU', -1], 'bad_event'],
      [{ type: 'BlockRemoved', block_hashes: [1], group_idx: -3 }, 'bad_event'],
      [{ type: 'BlockRemoved', block_hashes: [1], group_idx: 0.5 }, 'bad_event'],
      // extra_keys is a list (one entry per block) or nil: another shape would lose its multimodal hashes.
      [['BlockStored', [1], null, [1, 2], 2, null, 'GPU', null, 'a'.repeat(64)], 'bad_event'],
      [{ type: 'BlockStored', block_hashes: [1], token_ids: [1], block_size: 1, extra_keys: { k: 1 } }, 'bad_event'],
      [['BlockStored', [1], null, [1, 2], 2, -1], 'bad_event'],
      [{ type: 'BlockStored', block_hashes: [1], token_ids: [1], block_size: 1, lora_id: -7 }, 'bad_event'],
      [{ type: 'BlockStored', block_hashes: [1], token_ids: [1], block_size: 1, lora_id: 1.5 }, 'bad_event'],
      [
        {
          type: 'BlockStored',
          block_hashes: [1],
          token_ids: [1],
          block_size: 1,
          kv_cache_spec_kind: 'sliding_window',
          kv_cache_spec_sliding_window: -128,
        },
        'bad_event',
      ],
    ];
    for (const [bad, kind] of cases) {
      const r = decodeKvEventBatch(encode([1.5, [good, bad, good], 0]));
      expect(r.ok, JSON.stringify(bad)).toBe(true);
      if (!r.ok) continue;
      expect(r.batch.events.length, JSON.stringify(bad)).toBe(2);
      expect(r.batch.errors, JSON.stringify(bad)).toEqual([expect.objectContaining({ kind, eventIndex: 1 })]);
    }
  });

  it('a field of any shape or size is named in a short message, never rendered: no throw, no payload-sized log line', () => {
    /** `depth` nested one-element arrays around 0: a few bytes each, and String() of it overflows the stack. */
    const deep = (depth: number): Uint8Array => Uint8Array.from([...new Array<number>(depth).fill(0x91), 0x00]);
    const batch = (rank: Uint8Array, event?: Uint8Array): Uint8Array =>
      Uint8Array.from([0x93, ...bytes('cb 3ff8000000000000'), ...(event ? [0x91, ...event] : [0x90]), ...rank]);
    const hugeBin = Uint8Array.from([0xc6, 0x00, 0x04, 0x00, 0x00, ...new Array<number>(1 << 18).fill(7)]);
    const rankCases = [deep(200_000), hugeBin, encode('r'.repeat(1 << 18)), encode(new Array(1 << 16).fill(1))];
    for (const rank of rankCases) {
      const r = decodeKvEventBatch(batch(rank));
      expect(r).toMatchObject({ ok: false, error: { kind: 'batch_shape' } });
      if (!r.ok) expect(r.error.message.length).toBeLessThan(200);
    }
    // Inside an event: the block size, the medium and the tag (head: a stored event's first fields, unframed).
    const head = encode(['BlockStored', [1], null, [1, 2]]).subarray(1);
    const eventCases: [Uint8Array, string][] = [
      [Uint8Array.from([0x95, ...head, ...deep(200_000)]), 'bad_event'],
      [Uint8Array.from([0x95, ...head, ...hugeBin]), 'bad_event'],
      [Uint8Array.from([0x97, ...head, 0x02, 0xc0, ...deep(200_000)]), 'unknown_medium'],
      [Uint8Array.from([0x97, ...head, 0x02, 0xc0, ...encode('M'.repeat(1 << 18))]), 'unknown_medium'],
      [encode(['T'.repeat(1 << 18), [1]]), 'unknown_tag'],
    ];
    for (const [event, kind] of eventCases) {
      const r = decodeKvEventBatch(batch(Uint8Array.of(0x00), event));
      expect(r.ok).toBe(true);
      if (!r.ok) continue;
      expect(r.batch.errors).toEqual([expect.objectContaining({ kind, eventIndex: 0 })]);
      expect(r.batch.errors[0]!.message.length).toBeLessThan(200);
    }
  });

  it("vLLM's offloading placeholder (no tokens, block size 0) is a store of no block, not a bad event", () => {
    // The offloading connector's event for a chunk it cannot describe, in the step's batch beside its GPU stores.
    const placeholder = { type: 'BlockStored', block_hashes: [9], parent_block_hash: null, token_ids: [] };
    const batch = ok(
      encode([
        1.5,
        [{ ...placeholder, block_size: 0, lora_id: null, medium: 'CPU', lora_name: null, group_idx: 1 }],
        0,
      ]),
    );
    expect(batch.errors).toEqual([]);
    const ev = batch.events[0] as StoredBlocksEvent;
    expect(ev).toMatchObject({ type: 'stored', tier: 'host_pinned', blockSize: 0, droppedBlocks: 1, groupIdx: 1 });
    expect(ev.blockHashes.length).toBe(0);
    expect(ev.tokenIds.length).toBe(0);
    // A block size of 0 with tokens, or a negative one, is still no engine's.
    for (const [tokens, size] of [
      [[1, 2], 0],
      [[], -1],
      [[], 0.5],
    ] as const) {
      const r = ok(encode([1.5, [{ ...placeholder, token_ids: tokens, block_size: size }], 0]));
      expect(r.errors, `${tokens.length} tokens, block size ${size}`).toEqual([
        expect.objectContaining({ kind: 'bad_event', eventIndex: 0 }),
      ]);
    }
  });

  it('a timestamp that is not finite is carried, not refused: kvgate never reads it', () => {
    for (const ts of [Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY]) {
      const batch = ok(encode([ts, [['BlockRemoved', [7], 'GPU']], 0]));
      expect(batch.errors).toEqual([]);
      expect(batch.events).toHaveLength(1);
    }
  });

  it('fewer tokens than blocks keeps the leading full blocks', () => {
    const ev = ok(encode([1.5, [['BlockStored', [1, 2, 3], null, [1, 2, 3, 4, 5], 2]]])).events[0] as StoredBlocksEvent;
    expect([...ev.blockHashes]).toEqual([1n, 2n]);
    expect([...ev.tokenIds]).toEqual([1, 2, 3, 4]);
    expect(ev.droppedBlocks).toBe(1);
  });

  it('normaliseHash', () => {
    expect(normaliseHash(7)).toBe(7n);
    expect(normaliseHash(-5)).toBe((1n << 64n) - 5n);
    expect(normaliseHash(1n << 70n)).toBe(0n);
    expect(normaliseHash(Uint8Array.of(1, 2))).toBe(0x0102n);
    expect(normaliseHash(0.5)).toBeUndefined();
    expect(normaliseHash(null)).toBeUndefined();
  });
});

describe('msgpack headers that claim more than the payload holds (issue 23)', () => {
  /** `n` nested containers, each header claiming `count` elements, and nothing after them. */
  const nested = (head: number[], n: number): Uint8Array =>
    Uint8Array.from(Array.from({ length: n }, () => head).flat());

  it('are refused before the decoder allocates what they claim, whatever the container', () => {
    const bombs = [
      nested([0xdc, 0xff, 0xff], 1000), // array16 of 65535, 1000 deep: 65 million slots if believed
      nested([0xdd, 0xff, 0xff, 0xff, 0xff], 600),
      nested([0xdf, 0xff, 0xff, 0xff, 0xff], 600),
      bytes('93 cb 3ff8000000000000 dd 7fffffff'),
      bytes('c6 ffffffff 01 02'),
      bytes('db ffffffff 61'),
      bytes('c9 ffffffff 01 02'),
    ];
    const started = performance.now();
    for (let i = 0; i < 50; i++) {
      for (const b of bombs) expect(decodeKvEventBatch(b)).toMatchObject({ ok: false, error: { kind: 'msgpack' } });
    }
    // Scanned, not allocated: 350 refusals take well under a second (believing the first alone costs tens of ms each).
    expect(performance.now() - started).toBeLessThan(500);
  });

  it('honest payloads of every msgpack form still decode, large arrays and maps included', () => {
    const tokens = Array.from({ length: 70_000 }, (_, i) => i % 5000);
    const blockHashes = Array.from({ length: 70_000 / 16 }, (_, i) => (1n << 63n) + BigInt(i));
    const big = ok(encodeBatch([{ type: 'stored', blockHashes, parent: null, tokens, blockSize: 16 }]));
    expect(big.events[0]).toMatchObject({ type: 'stored', blockSize: 16 });
    expect((big.events[0] as StoredBlocksEvent).tokenIds.length).toBe(70_000);
    const removed = {
      type: 'BlockRemoved',
      block_hashes: [1, -1, 2 ** 40, 'x'.repeat(300)],
      medium: null,
      extra: new Uint8Array(70_000),
      f32: 0.25,
    };
    const mixed = [1.5, [removed], 0];
    const r = decodeKvEventBatch(encode(mixed));
    expect(r.ok).toBe(true);
  });
});
