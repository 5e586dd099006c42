/**
 * vLLM's salted chains (salt-memory.ts) in a slot whose blocks live in more than one index: an engine that offloads
 * publishes the same block hashes in several storage tiers, a hybrid model in several KV-cache groups, each with
 * its own removals. A block's salt is kept while any index of the slot holds the block, so a later event in
 * another tier or group under it is still hashed salted and a salted request matches it there; a removal from
 * every index forgets it, and a removal refused as another group's forgets nothing. The same applied as objects
 * and handed over by an ingestion thread (whose own guess keeps a salt per tier and group, as the main thread does).
 */
import { describe, expect, it } from 'vitest';
import { blockHashes, PrefixIndex, sequenceHashes } from '../../src/wasm/index.js';
import {
  BatchHasher,
  KvEventApplier,
  KvGroupIndexes,
  TieredPrefixIndex,
  type KvEventBatch,
} from '../../src/events/index.js';
import { applyThroughStream, decodedBatch } from '../helpers/kv-batches.js';
import type { TestEvent } from '../helpers/zmq-publisher.js';

const BS = 4;
const SLOT = { workerId: 1, dpRank: 0 };
const SALT = 'tenant-a';
const tokens = (n: number, from = 100): number[] => Array.from({ length: n }, (_, i) => from + i);
/** A first turn of 3 blocks (engine hashes 11, 12, 13), and a follow-up extending from block 12 by 2 blocks. */
const FIRST = tokens(12);
const FOLLOW = [...FIRST.slice(0, 8), ...tokens(8, 500)];
const GPU = 'GPU';
const CPU = 'CPU'; // vLLM's offloading medium: the host_pinned tier

const decoded = (events: TestEvent[]): KvEventBatch => decodedBatch(events);

/** The first turn stored as a salted root (the salt in block 0's extra_keys) in a tier or group. */
const root = (medium: string, groupIdx?: number): KvEventBatch =>
  decoded([
    {
      type: 'stored',
      blockHashes: [11n, 12n, 13n],
      parent: null,
      tokens: FIRST,
      blockSize: BS,
      extraKeys: [[SALT], null, null],
      medium,
      ...(groupIdx === undefined ? {} : { groupIdx }),
    },
  ]);

/** The follow-up under block 12: no extra_keys, no salt (it inherits block 12's). */
const followUp = (medium: string, groupIdx?: number): KvEventBatch =>
  decoded([
    {
      type: 'stored',
      blockHashes: [21n, 22n],
      parent: 12n,
      tokens: FOLLOW.slice(8),
      blockSize: BS,
      medium,
      ...(groupIdx === undefined ? {} : { groupIdx }),
    },
  ]);

const removed = (medium: string, hashes: bigint[] = [12n], groupIdx?: number): KvEventBatch =>
  decoded([{ type: 'removed', blockHashes: hashes, medium, ...(groupIdx === undefined ? {} : { groupIdx }) }]);

/**
 * Applies the batches through a stream, as objects or handed over as an ingestion thread packs them (its own
 * hashes, with the salts its BatchHasher infers: device-tier removals and plain stores go in packed runs).
 */
function applyAll(a: KvEventApplier, batches: KvEventBatch[], handOver: boolean): void {
  const hasher = new BatchHasher();
  applyThroughStream(a, SLOT, batches, handOver ? (b) => hasher.hash(1, b) : undefined);
}

/** The leading blocks of the follow-up's prompt the slot holds in an index, for a request salted or not. */
function depth(ix: PrefixIndex, salt?: string): number {
  const m = ix.findMatches(blockHashes(FOLLOW, BS, { cacheSalt: salt }));
  return m.count === 0 ? 0 : m.depths[0]!;
}

/** Whether the index holds the follow-up's blocks under the salted chain's sequence hashes. */
function holdsSaltedFollowUp(ix: PrefixIndex): boolean {
  const seq = sequenceHashes(blockHashes(FOLLOW, BS, { cacheSalt: SALT }));
  const pairs = ix.exportSlot(SLOT.workerId, SLOT.dpRank);
  const byEngine = new Map<bigint, bigint>();
  for (let i = 0; i < pairs.length; i += 2) byEngine.set(pairs[i]!, pairs[i + 1]!);
  return byEngine.get(21n) === seq[2] && byEngine.get(22n) === seq[3];
}

describe('a salted block held in several storage tiers', () => {
  for (const handOver of [false, true]) {
    const how = handOver ? 'handed over by an ingestion thread' : 'applied as objects';

    it(`the device tier evicts block k: a host-tier event under k is still salted (${how})`, () => {
      const a = new KvEventApplier({ blockSize: BS });
      applyAll(a, [root(GPU), root(CPU), removed(GPU), followUp(CPU)], handOver);
      const host = a.indexes.get('host_pinned');
      expect(a.salts.saltOf(SLOT, 12n)).toBe(SALT);
      expect(holdsSaltedFollowUp(host)).toBe(true);
      expect(depth(host, SALT)).toBe(4);
      expect(depth(host)).toBe(0);
      expect(depth(a.indexes.device, SALT)).toBe(1); // the device tier lost block 12
      a.indexes.dispose();
    });

    it(`the host tier evicts block k: a device-tier event under k is still salted (${how})`, () => {
      const a = new KvEventApplier({ blockSize: BS });
      applyAll(a, [root(GPU), root(CPU), removed(CPU), followUp(GPU)], handOver);
      expect(a.salts.saltOf(SLOT, 12n)).toBe(SALT);
      expect(holdsSaltedFollowUp(a.indexes.device)).toBe(true);
      expect(depth(a.indexes.device, SALT)).toBe(4);
      expect(depth(a.indexes.device)).toBe(0);
      a.indexes.dispose();
    });

    it(`a block removed from every tier is forgotten (${how})`, () => {
      const a = new KvEventApplier({ blockSize: BS });
      applyAll(a, [root(GPU), root(CPU), removed(GPU)], handOver);
      expect(a.salts.size).toBe(3);
      applyAll(a, [removed(CPU, [12n, 13n])], handOver);
      expect(a.salts.saltOf(SLOT, 12n)).toBeUndefined();
      expect(a.salts.saltOf(SLOT, 13n)).toBe(SALT); // the device tier still holds it
      expect(a.salts.size).toBe(2);
      applyAll(a, [removed(GPU, [11n, 13n]), removed(CPU, [11n])], handOver);
      expect(a.salts.size).toBe(0);
      a.indexes.dispose();
    });
  }

  it('an ingestion thread keeps the salt while another tier holds the block, as the main thread does', () => {
    // Its own guess, without the main thread's indexes: the follow-up's hashes come from the thread, salted.
    const thread = new BatchHasher();
    for (const b of [root(GPU), root(CPU), removed(GPU)]) thread.hash(1, b);
    expect(thread.hash(1, followUp(CPU)).salts).toEqual([SALT]);
    const reverse = new BatchHasher();
    for (const b of [root(GPU), root(CPU), removed(CPU)]) reverse.hash(1, b);
    expect(reverse.hash(1, followUp(GPU)).salts).toEqual([SALT]);
    // Removed from both tiers: forgotten (the follow-up is guessed unsalted), and another stream never shared it.
    const gone = new BatchHasher();
    for (const b of [root(GPU), root(CPU), removed(GPU), removed(CPU)]) gone.hash(1, b);
    expect(gone.hash(1, followUp(CPU)).salts).toEqual([]);
    expect(gone.hash(2, followUp(GPU)).salts).toEqual([]);
    // A clear forgets the stream in every tier.
    const cleared = new BatchHasher();
    for (const b of [root(GPU), root(CPU), decoded([{ type: 'cleared' }])]) cleared.hash(1, b);
    expect(cleared.remembered).toBe(0);
  });
});

describe('a salted block held in several KV-cache groups', () => {
  /** A hybrid model's applier: group 0 in the router's index, group 1 in its own. */
  function hybrid(): { a: KvEventApplier; group1: () => PrefixIndex } {
    const primary = new PrefixIndex();
    const groups = new KvGroupIndexes({ primary });
    const a = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(primary), groups });
    return { a, group1: () => groups.others()[0]!.index };
  }

  for (const handOver of [false, true]) {
    const how = handOver ? 'handed over by an ingestion thread' : 'applied as objects';

    it(`group 1 evicts block k: group 0's event under k is still salted, and the reverse (${how})`, () => {
      const one = hybrid();
      applyAll(one.a, [root(GPU, 0), root(GPU, 1), removed(GPU, [12n], 1), followUp(GPU, 0)], handOver);
      expect(depth(one.a.indexes.device, SALT)).toBe(4);
      expect(holdsSaltedFollowUp(one.a.indexes.device)).toBe(true);
      one.a.indexes.dispose();

      const two = hybrid();
      applyAll(two.a, [root(GPU, 0), root(GPU, 1), removed(GPU, [12n], 0), followUp(GPU, 1)], handOver);
      expect(holdsSaltedFollowUp(two.group1())).toBe(true);
      // Removed from both groups: forgotten.
      applyAll(two.a, [removed(GPU, [12n], 1)], handOver);
      expect(two.a.salts.saltOf(SLOT, 12n)).toBeUndefined();
      expect(two.a.salts.size).toBe(4);
      two.a.indexes.dispose();
    });
  }

  it('an ingestion thread keeps the salt while another group holds the block', () => {
    const thread = new BatchHasher();
    for (const b of [root(GPU, 0), root(GPU, 1), removed(GPU, [12n], 1)]) thread.hash(1, b);
    expect(thread.hash(1, followUp(GPU, 0)).salts).toEqual([SALT]);
    thread.hash(1, removed(GPU, [12n], 0));
    expect(thread.hash(1, followUp(GPU, 1)).salts).toEqual([]);
  });

  it("a removal refused as another group's (a model indexed as one group) forgets nothing", () => {
    const a = new KvEventApplier({ blockSize: BS });
    applyAll(a, [root(GPU, 0), removed(GPU, [12n], 1), followUp(GPU, 0)], false);
    expect(a.salts.saltOf(SLOT, 12n)).toBe(SALT);
    expect(depth(a.indexes.device, SALT)).toBe(4);
    a.indexes.dispose();
  });
});
