import { describe, expect, it } from 'vitest';
import { decodeKvEventBatch } from '../../src/events/index.js';
import { encodeEventBatch, type KvEvent } from '../../src/mocker/index.js';
import { toCacheEvent } from '../../src/replay/index.js';

const EVENTS: KvEvent[] = [
  {
    type: 'stored',
    blockHashes: [0xfedcba9876543210n, 7n],
    parentBlockHash: null,
    tokenIds: Array.from({ length: 32 }, (_, i) => i * 3),
    blockSize: 16,
    loraName: null,
    cacheSalt: null,
  },
  {
    type: 'stored',
    blockHashes: [99n],
    parentBlockHash: 7n,
    tokenIds: Array.from({ length: 16 }, (_, i) => 1000 + i),
    blockSize: 16,
    loraName: 'adapter-a',
    cacheSalt: null,
  },
  { type: 'removed', blockHashes: [7n, 0xfedcba9876543210n] },
  { type: 'cleared' },
];

describe('KV events from simulated engines to the router', () => {
  for (const encoding of ['array', 'map'] as const) {
    it(`equal what the ZMQ decoder yields for the same events (vLLM ${encoding} encoding)`, () => {
      const decoded = decodeKvEventBatch(encodeEventBatch(1.5, EVENTS, 0, { encoding, flavour: 'vllm' }));
      expect(decoded.ok).toBe(true);
      if (!decoded.ok) return;
      expect(decoded.batch.errors).toEqual([]);
      expect(EVENTS.map(toCacheEvent)).toEqual(decoded.batch.events);
    });
  }
});
