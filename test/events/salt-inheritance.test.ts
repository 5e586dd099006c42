/**
 * vLLM's salted requests (salt-memory.ts): the salt comes only in block 0's `extra_keys` of a root event, and a
 * later event of the chain inherits its parent block's. A request salted the same matches the whole chain, an
 * unsalted one or one with another salt none; the same applied as objects and handed over by an ingestion thread
 * (packed runs included); a removed block's salt is forgotten; the memory's cap evicts and counts.
 */
import { describe, expect, it } from 'vitest';
import { blockHashes } from '../../src/wasm/index.js';
import { KvEventApplier, storedLocalHashes, type KvEventBatch } from '../../src/events/index.js';
import { SaltMemory, type SaltEvictionReport } from '../../src/events/salt-memory.js';
import { applyThroughStream, decodedBatch } from '../helpers/kv-batches.js';
import type { TestEvent } from '../helpers/zmq-publisher.js';

const BS = 4;
const SLOT = { workerId: 1, dpRank: 0 };
const tokens = (n: number, from = 100): number[] => Array.from({ length: n }, (_, i) => from + i);
/** A first turn of 3 blocks, and a follow-up extending from its block 2 (engine hash 12) by 2 blocks. */
const FIRST = tokens(12);
const FOLLOW = [...FIRST.slice(0, 8), ...tokens(8, 500)];

const decoded = (events: TestEvent[], encoding: 'vllm-array' | 'sglang-array' = 'vllm-array'): KvEventBatch =>
  decodedBatch(events, encoding);

function saltedChain(extraKeys: readonly string[], loraName?: string): KvEventBatch[] {
  const lora = loraName === undefined ? {} : { loraName, loraId: 1 };
  return [
    decoded([
      {
        type: 'stored',
        blockHashes: [11n, 12n, 13n],
        parent: null,
        tokens: FIRST,
        blockSize: BS,
        extraKeys: [extraKeys, null, null],
        ...lora,
      },
    ]),
    // The follow-up forks from block 2 (hash 12): no extra_keys, no salt.
    decoded([
      { type: 'stored', blockHashes: [21n, 22n], parent: 12n, tokens: FOLLOW.slice(8), blockSize: BS, ...lora },
    ]),
    // Unsalted traffic beside it on the same slot.
    decoded([{ type: 'stored', blockHashes: [31n], parent: null, tokens: tokens(4, 900), blockSize: BS }]),
  ];
}

/** Applies the batches as objects, or handed over as an ingestion thread packs them (hashes computed there, unsalted). */
function applyAll(a: KvEventApplier, batches: KvEventBatch[], handOver: boolean): void {
  const unsalted = (b: KvEventBatch) => ({
    locals: b.events.map((ev) => (ev.type === 'stored' ? storedLocalHashes(ev, ev.blockSize) : undefined)),
  });
  applyThroughStream(a, SLOT, batches, handOver ? unsalted : undefined);
}

function depth(a: KvEventApplier, t: number[], opts: { cacheSalt?: string; loraName?: string } = {}): number {
  const m = a.indexes.device.findMatches(blockHashes(t, BS, opts));
  return m.count === 0 ? 0 : m.depths[0]!;
}

describe("vLLM's cache salt, inherited along the chain", () => {
  for (const handOver of [false, true]) {
    const how = handOver ? 'handed over by an ingestion thread' : 'applied as objects';
    it(`a salted chain matches its own salt only, follow-up included (${how})`, () => {
      const a = new KvEventApplier({ blockSize: BS });
      applyAll(a, saltedChain(['tenant-a']), handOver);
      expect(depth(a, FIRST, { cacheSalt: 'tenant-a' })).toBe(3);
      expect(depth(a, FOLLOW, { cacheSalt: 'tenant-a' })).toBe(4);
      expect(depth(a, FOLLOW)).toBe(0);
      expect(depth(a, FOLLOW, { cacheSalt: 'tenant-b' })).toBe(0);
      expect(depth(a, tokens(4, 900))).toBe(1); // unsalted traffic stays unsalted
      expect(a.salts.size).toBe(5);
      a.indexes.dispose();
    });

    it(`a LoRA name and a salt both in extra_keys: the salt is the other string (${how})`, () => {
      const a = new KvEventApplier({ blockSize: BS });
      applyAll(a, saltedChain(['adapter-x', 'tenant-a'], 'adapter-x'), handOver);
      expect(depth(a, FOLLOW, { loraName: 'adapter-x', cacheSalt: 'tenant-a' })).toBe(4);
      expect(depth(a, FOLLOW, { loraName: 'adapter-x' })).toBe(0);
      a.indexes.dispose();
    });
  }

  it('more than one salt candidate is counted and hashed unsalted', () => {
    let ambiguous = 0;
    const a = new KvEventApplier({ blockSize: BS, onSaltAmbiguous: () => ambiguous++ });
    applyAll(a, saltedChain(['s1', 's2']), false);
    expect(ambiguous).toBe(1);
    expect(depth(a, FOLLOW)).toBe(4);
    expect(a.salts.size).toBe(0);
    a.indexes.dispose();
  });

  it("SGLang's cache_salt is hashed as ever and needs no memory", () => {
    const a = new KvEventApplier({ blockSize: BS });
    a.applyBatch(
      SLOT,
      decoded(
        [
          {
            type: 'stored',
            blockHashes: [11n, 12n, 13n],
            parent: null,
            tokens: FIRST,
            blockSize: BS,
            cacheSalt: 'tenant-a',
          },
        ],
        'sglang-array',
      ),
    );
    expect(depth(a, FIRST, { cacheSalt: 'tenant-a' })).toBe(3);
    expect(a.salts.size).toBe(0);
    a.indexes.dispose();
  });

  it('a removed block, a cleared slot and a removed slot forget their salts', () => {
    const a = new KvEventApplier({ blockSize: BS });
    applyAll(a, saltedChain(['tenant-a']), false);
    a.applyBatch(SLOT, decoded([{ type: 'removed', blockHashes: [13n] }]));
    expect(a.salts.saltOf(SLOT, 13n)).toBeUndefined();
    expect(a.salts.saltOf(SLOT, 12n)).toBe('tenant-a');
    expect(a.salts.size).toBe(4);
    a.applyBatch(SLOT, decoded([{ type: 'cleared' }]));
    expect(a.salts.size).toBe(0);
    applyAll(a, saltedChain(['tenant-a']), false);
    a.removeSlot(SLOT);
    expect(a.salts.size).toBe(0);
    a.indexes.dispose();
  });

  it('the cap evicts the oldest entries, counted, the first of an episode said so', () => {
    const reports: SaltEvictionReport[] = [];
    const a = new KvEventApplier({ blockSize: BS, saltMemoryCap: 4, onSaltEvicted: (r) => reports.push(r) });
    applyAll(a, saltedChain(['tenant-a']), false);
    expect(a.salts.size).toBe(4);
    expect(a.salts.evictions).toBe(1);
    expect(reports).toEqual([{ evicted: 1, episodeStart: true }]);
    expect(a.salts.saltOf(SLOT, 11n)).toBeUndefined(); // the oldest
    expect(a.salts.saltOf(SLOT, 22n)).toBe('tenant-a');
    a.indexes.dispose();
  });

  it("a replica snapshot's entries, oldest first, are taken by another memory under its own cap", () => {
    const a = new KvEventApplier({ blockSize: BS });
    applyAll(a, saltedChain(['tenant-a']), false);
    const runs = a.salts.exportSlot(SLOT);
    expect(runs).toEqual([{ salt: 'tenant-a', hashes: new BigUint64Array([11n, 12n, 13n, 21n, 22n]) }]);
    expect(a.salts.exportSlot({ workerId: 9, dpRank: 0 })).toEqual([]);
    const b = new SaltMemory(3);
    expect(b.importSlot(SLOT, runs)).toBe(5);
    expect(b.size).toBe(3); // the oldest two evicted, as in the memory they came from
    expect(b.saltOf(SLOT, 12n)).toBeUndefined();
    expect(b.saltOf(SLOT, 13n)).toBe('tenant-a');
    a.indexes.dispose();
  });
});
