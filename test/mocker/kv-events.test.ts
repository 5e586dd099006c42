import { describe, expect, it } from 'vitest';
import { decode } from '@msgpack/msgpack';
import { encodeSeq, REPLAY_END_SEQ } from '../../src/common/index.js';
import { encodeEventBatch } from '../../src/mocker/kv-events.js';
import type { KvEvent } from '../../src/mocker/index.js';

/** msgpack fixstr as hex */
const s = (text: string): string => (0xa0 + text.length).toString(16) + Buffer.from(text, 'ascii').toString('hex');
const hex = (...parts: string[]): string => parts.join('').replace(/\s+/g, '');
const toHex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

const HEADER = '93 cb 3ff8000000000000'; // array(3), float64 1.5
const stored: KvEvent = {
  type: 'stored',
  blockHashes: [0xdeadbeef12345678n],
  parentBlockHash: null,
  tokenIds: [1, 2, 3, 4],
  blockSize: 4,
  loraName: null,
  cacheSalt: null,
};
const removed: KvEvent = { type: 'removed', blockHashes: [7n] };
const cleared: KvEvent = { type: 'cleared' };

describe('engine-wire-formats.md section 1.5 example bytes', () => {
  it('seq frames: batch 0, batch 258, replay end marker', () => {
    expect(toHex(encodeSeq(0))).toBe('0000000000000000');
    expect(toHex(encodeSeq(258))).toBe('0000000000000102');
    expect(toHex(encodeSeq(REPLAY_END_SEQ))).toBe('ffffffffffffffff');
  });

  it('(a) legacy positional BlockStored, 52 bytes', () => {
    const bytes = encodeEventBatch(1.5, [stored], 0, { encoding: 'array', flavour: 'vllm' });
    expect(bytes.length).toBe(52);
    expect(toHex(bytes)).toBe(
      hex(
        HEADER,
        '91',
        '9c',
        s('BlockStored'),
        '91 cf deadbeef12345678',
        'c0',
        '94 01020304',
        '04',
        'c0',
        s('GPU'),
        'c0c0c0c0c0',
        '00',
      ),
    );
  });

  it('(a) legacy BlockRemoved (33 bytes) and AllBlocksCleared (30 bytes)', () => {
    const r = encodeEventBatch(1.5, [removed], 0, { encoding: 'array', flavour: 'vllm' });
    expect(r.length).toBe(33);
    expect(toHex(r)).toBe(hex(HEADER, '91 94', s('BlockRemoved'), '91 07', s('GPU'), 'c0', '00'));
    expect(decode(r)).toEqual([1.5, [['BlockRemoved', [7], 'GPU', null]], 0]);
    const c = encodeEventBatch(1.5, [cleared], 0, { encoding: 'array', flavour: 'vllm' });
    expect(c.length).toBe(30);
    expect(toHex(c)).toBe(hex(HEADER, '91 91 b0', Buffer.from('AllBlocksCleared').toString('hex'), '00'));
  });

  it('(b) map-encoded BlockStored, 175 bytes', () => {
    const bytes = encodeEventBatch(1.5, [stored], 0, { encoding: 'map', flavour: 'vllm' });
    expect(bytes.length).toBe(175);
    expect(toHex(bytes)).toBe(
      hex(
        HEADER,
        '91',
        '8a',
        s('type'),
        s('BlockStored'),
        s('block_hashes'),
        '91 cf deadbeef12345678',
        'b1',
        Buffer.from('parent_block_hash').toString('hex'),
        'c0',
        s('token_ids'),
        '94 01020304',
        s('block_size'),
        '04',
        s('lora_id'),
        'c0',
        s('medium'),
        s('GPU'),
        s('lora_name'),
        'c0',
        s('group_idx'),
        '00',
        'b2',
        Buffer.from('kv_cache_spec_kind').toString('hex'),
        s('full_attention'),
        '00',
      ),
    );
  });

  it('(b) map BlockRemoved and AllBlocksCleared', () => {
    const r = encodeEventBatch(1.5, [removed], 0, { encoding: 'map', flavour: 'vllm' });
    expect(toHex(r)).toBe(
      hex(
        HEADER,
        '91',
        '84',
        s('type'),
        s('BlockRemoved'),
        s('block_hashes'),
        '91 07',
        s('medium'),
        s('GPU'),
        s('group_idx'),
        '00',
        '00',
      ),
    );
    const c = encodeEventBatch(1.5, [cleared], 0, { encoding: 'map', flavour: 'vllm' });
    expect(toHex(c)).toBe(
      hex(HEADER, '91', '81', s('type'), 'b0', Buffer.from('AllBlocksCleared').toString('hex'), '00'),
    );
  });

  it('decodes with @msgpack/msgpack (useBigInt64) to the documented values', () => {
    const bytes = encodeEventBatch(1.5, [stored, removed], 3, { encoding: 'map', flavour: 'vllm' });
    const [ts, events, rank] = decode(bytes, { useBigInt64: true }) as [number, Record<string, unknown>[], number];
    expect(ts).toBe(1.5);
    expect(rank).toBe(3);
    expect(events[0]!.block_hashes).toEqual([16045690981402826360n]);
    expect(events[1]).toEqual({ type: 'BlockRemoved', block_hashes: [7], medium: 'GPU', group_idx: 0 });
  });
});

describe('SGLang flavour (section 2)', () => {
  it('legacy salted BlockStored matches the documented example', () => {
    const ev: KvEvent = {
      type: 'stored',
      blockHashes: [123n],
      parentBlockHash: null,
      tokenIds: [1, 2],
      blockSize: 2,
      loraName: null,
      cacheSalt: 't',
    };
    const bytes = encodeEventBatch(1.5, [ev], 0, { encoding: 'array', flavour: 'sglang' });
    expect(toHex(bytes)).toBe(
      hex(HEADER, '91 98', s('BlockStored'), '91 7b c0 92 01 02 02 c0', s('GPU'), '81', s('cache_salt'), s('t'), '00'),
    );
  });

  it('hashes are signed int64 (d3 when the top bit is set)', () => {
    const ev: KvEvent = {
      type: 'stored',
      blockHashes: [0xdeadbeef12345678n],
      parentBlockHash: 0x1n,
      tokenIds: [5],
      blockSize: 1,
      loraName: null,
      cacheSalt: null,
    };
    const bytes = encodeEventBatch(2.25, [ev], 1, { encoding: 'map', flavour: 'sglang' });
    expect(toHex(bytes)).toContain('91d3deadbeef12345678');
    const [, events, rank] = decode(bytes, { useBigInt64: true }) as [number, Record<string, unknown>[], number];
    expect(rank).toBe(1);
    expect(events[0]).toEqual({
      type: 'BlockStored',
      block_hashes: [BigInt.asIntN(64, 0xdeadbeef12345678n)],
      parent_block_hash: 1,
      token_ids: [5],
      block_size: 1,
      lora_id: null,
      medium: 'GPU',
    });
    const r = decode(
      encodeEventBatch(2.25, [{ type: 'removed', blockHashes: [9n] }], 0, { encoding: 'array', flavour: 'sglang' }),
    );
    expect(r).toEqual([2.25, [['BlockRemoved', [9], 'GPU']], 0]);
  });

  it('ts stays float64 even when integral', () => {
    const bytes = encodeEventBatch(2, [cleared], 0, { encoding: 'array', flavour: 'vllm' });
    expect(toHex(bytes.subarray(0, 10))).toBe('93cb4000000000000000');
  });
});

describe("a salted request's blocks", () => {
  const salted = (parentBlockHash: bigint | null): KvEvent => ({
    type: 'stored',
    blockHashes: [1n, 2n],
    parentBlockHash,
    tokenIds: [1, 2, 3, 4, 5, 6, 7, 8],
    blockSize: 4,
    loraName: null,
    cacheSalt: 'salt-1',
  });

  it("vLLM: the cache_salt in block 0's extra_keys entry, as vLLM reports it (array and map)", () => {
    for (const encoding of ['array', 'map'] as const) {
      for (const [parent, keys] of [
        [null, [['salt-1'], null]],
        [5n, [null, null]],
      ] as const) {
        const bytes = encodeEventBatch(1.5, [salted(parent)], 0, { encoding, flavour: 'vllm' });
        const ev = (decode(bytes, { useBigInt64: true }) as unknown[][])[1]![0];
        expect(encoding === 'array' ? (ev as unknown[])[8] : (ev as Record<string, unknown>).extra_keys).toEqual(keys);
      }
    }
    // Unsalted: nil, the byte-pinned layout above.
    const plain = encodeEventBatch(1.5, [stored], 0, { encoding: 'array', flavour: 'vllm' });
    expect(((decode(plain, { useBigInt64: true }) as unknown[][])[1]![0] as unknown[])[8]).toBeNull();
  });
});
