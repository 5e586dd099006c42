/**
 * The binary hand-off of an ingestion thread (batch-codec.ts): batches of several streams packed into
 * one buffer come back equal to what the decoder made, hashes and tokens included, with the stored
 * events' own hashes carried along; rare fields and per-event decode errors survive; a batch larger
 * than a buffer gets one of its own; and the index fed from unpacked batches equals the one fed directly.
 */
import { describe, expect, it } from 'vitest';
import { KvEventApplier, type KvEventBatch, type StoredBlocksEvent } from '../../src/events/index.js';
import { storedLocalHashes } from '../../src/events/applier.js';
import { BatchPacker, unpackBatches, type LocalHashes } from '../../src/events/batch-codec.js';
import { decodedBatch } from '../helpers/kv-batches.js';
import type { EventEncoding, TestEvent } from '../helpers/zmq-publisher.js';
import { mulberry32 } from '../helpers/rng.js';

const BS = 4;

const decoded = (events: TestEvent[], encoding: EventEncoding = 'vllm-array'): KvEventBatch =>
  decodedBatch(events, encoding);

function localsOf(batch: KvEventBatch): LocalHashes {
  return batch.events.map((ev) =>
    ev.type === 'stored' && ev.blockHashes.length > 0 ? storedLocalHashes(ev, ev.blockSize) : undefined,
  );
}

/** What unpacking must give: the batch with each stored event's own hashes attached. */
function withLocals(batch: KvEventBatch): KvEventBatch {
  const locals = localsOf(batch);
  return { ...batch, events: batch.events.map((ev, i) => (locals[i] ? { ...ev, localHashes: locals[i] } : ev)) };
}

function unpackAll(packer: BatchPacker): { id: number; seq: bigint; batch: KvEventBatch }[] {
  const out: { id: number; seq: bigint; batch: KvEventBatch }[] = [];
  // Through structured clone, as the batches cross from the thread (the buffer is transferred).
  const packed = structuredClone(packer.take());
  unpackBatches(packed, (id, seq, batch) => out.push({ id, seq, batch }));
  return out;
}

const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

describe('batch codec', () => {
  it('round-trips batches of several streams with every field the applier reads', () => {
    const a = decoded([
      {
        type: 'stored',
        blockHashes: [0xffffffffffffffffn, 2n],
        parent: null,
        tokens: tokens(8),
        blockSize: BS,
        extraKeys: [['salt-1'], null],
      },
      { type: 'stored', blockHashes: [3n], parent: 2n, tokens: tokens(5, 9), blockSize: BS, loraName: 'ad', loraId: 3 },
      { type: 'removed', blockHashes: [2n, 3n], medium: 'CPU' },
      { type: 'cleared' },
    ]);
    const b = decoded(
      [
        {
          type: 'stored',
          blockHashes: [7n],
          parent: null,
          tokens: tokens(4),
          blockSize: BS,
          cacheSalt: 's',
          groupIdx: 2,
        },
      ],
      'sglang-map',
    );
    const withError = decoded([
      { type: 'stored', blockHashes: [9n], parent: null, tokens: tokens(4), blockSize: BS },
      { type: 'removed', blockHashes: [1n], medium: 'FLOPPY' },
    ]);
    expect(withError.errors).toHaveLength(1);
    expect((a.events[0] as StoredBlocksEvent).extraKeyStrings).toEqual(['salt-1']);
    const packer = new BatchPacker();
    packer.add(1, 10n, a, localsOf(a));
    packer.add(2, 0xfffffffffffffffen, b, localsOf(b));
    packer.add(1, 11n, withError, localsOf(withError));
    expect(unpackAll(packer)).toEqual([
      { id: 1, seq: 10n, batch: withLocals(a) },
      { id: 2, seq: 0xfffffffffffffffen, batch: withLocals(b) },
      { id: 1, seq: 11n, batch: withLocals(withError) },
    ]);
    expect(packer.batches).toBe(0);
  });

  it('refuses a batch that does not fit a partly used buffer, and gives a larger batch a buffer of its own', () => {
    const small = decoded([{ type: 'stored', blockHashes: [1n], parent: null, tokens: tokens(4), blockSize: BS }]);
    const big = decoded([
      { type: 'stored', blockHashes: tokens(300).map(BigInt), parent: null, tokens: tokens(1200), blockSize: BS },
    ]);
    const packer = new BatchPacker(256);
    expect(packer.add(1, 0n, small, localsOf(small))).toBe(true);
    expect(packer.add(1, 1n, big, localsOf(big))).toBe(false);
    expect(unpackAll(packer)).toEqual([{ id: 1, seq: 0n, batch: withLocals(small) }]);
    expect(packer.add(1, 1n, big, localsOf(big))).toBe(true);
    expect(unpackAll(packer)).toEqual([{ id: 1, seq: 1n, batch: withLocals(big) }]);
  });

  it('hands over a buffer at most half used as a copy of its used words, and packs on into the same buffer', () => {
    const one = decoded([{ type: 'stored', blockHashes: [1n], parent: null, tokens: tokens(4), blockSize: BS }]);
    const packer = new BatchPacker(4096);
    packer.add(3, 0n, one, localsOf(one));
    const words = packer.bytes / 8;
    const first = packer.take();
    // What the receiving thread counts as its young generation's off-heap bytes: the words packed, not 4 KiB.
    expect(first.buffer.byteLength).toBe(words * 8);
    expect(first.words).toBe(words);
    packer.add(3, 1n, one, localsOf(one));
    const second = packer.take();
    // The kept buffer was refilled from its start; the first copy is untouched by it.
    const out: { seq: bigint; batch: KvEventBatch }[] = [];
    for (const p of [first, second]) unpackBatches(structuredClone(p), (_id, seq, batch) => out.push({ seq, batch }));
    expect(out).toEqual([
      { seq: 0n, batch: withLocals(one) },
      { seq: 1n, batch: withLocals(one) },
    ]);
  });

  it('hands over a buffer more than half used as it is, and starts a fresh one', () => {
    const one = decoded([{ type: 'stored', blockHashes: [1n], parent: null, tokens: tokens(4), blockSize: BS }]);
    const packer = new BatchPacker(256);
    while (packer.add(1, 0n, one, localsOf(one)) && packer.bytes * 2 <= 256);
    const full = packer.take();
    expect(full.buffer.byteLength).toBe(256);
    expect(packer.bytes).toBe(0);
  });

  it('an index fed from unpacked batches equals one fed from the decoder', () => {
    const rng = mulberry32(5);
    const direct = new KvEventApplier({ blockSize: BS });
    const viaCodec = new KvEventApplier({ blockSize: BS });
    const packer = new BatchPacker(1024);
    const slot = { workerId: 1, dpRank: 0 };
    const held: bigint[] = [];
    let next = 1n;
    for (let seq = 0n; seq < 200n; seq++) {
      const events: TestEvent[] = [];
      for (let e = 0; e < 4; e++) {
        if (held.length > 0 && rng() < 0.4) {
          events.push({ type: 'removed', blockHashes: held.splice(Math.floor(rng() * held.length), 1) });
          continue;
        }
        const n = 1 + Math.floor(rng() * 3);
        const hashes = Array.from({ length: n }, () => next++);
        events.push({
          type: 'stored',
          blockHashes: hashes,
          parent: null,
          tokens: tokens(n * BS, Number(next) * 7),
          blockSize: BS,
        });
        held.push(...hashes);
      }
      const batch = decoded(events);
      direct.applyBatch(slot, batch);
      if (!packer.add(1, seq, batch, localsOf(batch))) {
        for (const u of unpackAll(packer)) viaCodec.applyBatch(slot, u.batch);
        packer.add(1, seq, batch, localsOf(batch));
      }
    }
    for (const u of unpackAll(packer)) viaCodec.applyBatch(slot, u.batch);
    expect(viaCodec.indexes.device.size).toBe(direct.indexes.device.size);
    expect(viaCodec.indexes.device.exportSlot(1, 0)).toEqual(direct.indexes.device.exportSlot(1, 0));
    direct.indexes.dispose();
    viaCodec.indexes.dispose();
  });
});
