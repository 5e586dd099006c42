import { describe, expect, it } from 'vitest';
import { encode } from '@msgpack/msgpack';
import { blockHashes, PrefixIndex } from '../../src/wasm/index.js';
import {
  KvEventApplier,
  KvEventCounters,
  TieredPrefixIndex,
  decodeKvEventBatch,
  type KvEventBatch,
} from '../../src/events/index.js';
import { encodeBatch, ENCODINGS, type TestEvent } from '../helpers/zmq-publisher.js';
import { mulberry32 } from '../helpers/rng.js';

const BS = 4;
/** The (worker, dp rank) slots events are applied to. */
const W1 = { workerId: 1, dpRank: 0 };
const W2 = { workerId: 2, dpRank: 0 };
const W3R1 = { workerId: 3, dpRank: 1 };

function decoded(
  events: readonly TestEvent[],
  encoding: (typeof ENCODINGS)[number] = 'vllm-array',
  dpRank = 0,
): KvEventBatch {
  const r = decodeKvEventBatch(encodeBatch(events, { encoding, dpRank }));
  if (!r.ok) throw new Error(r.error.message);
  return r.batch;
}

function depthOf(ix: PrefixIndex, tokens: number[], workerId: number, dpRank: number, loraName?: string): number {
  const m = ix.findMatches(blockHashes(tokens, BS, { loraName }));
  const slot = ix.findSlot(workerId, dpRank);
  for (let i = 0; i < m.count; i++) if (m.slots[i] === slot) return m.depths[i]!;
  return 0;
}

describe('KvEventApplier', () => {
  it('stores with our own hashes, resolves parents and removals by engine hash', () => {
    const a = new KvEventApplier({ blockSize: BS });
    const tokens = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
    a.applyBatch(
      W1,
      decoded([
        { type: 'stored', blockHashes: [0xaan, 0xbbn], parent: null, tokens: tokens.slice(0, 8), blockSize: BS },
      ]),
    );
    a.applyBatch(
      W1,
      decoded([{ type: 'stored', blockHashes: [0xccn], parent: 0xbbn, tokens: tokens.slice(8), blockSize: BS }]),
    );
    const dev = a.indexes.device;
    expect(depthOf(dev, tokens, 1, 0)).toBe(3);
    expect(dev.blockCount(1, 0)).toBe(3);
    a.applyBatch(W1, decoded([{ type: 'removed', blockHashes: [0xbbn] }]));
    // Not cascading: block 3 stays, but the prefix walk stops at the hole.
    expect(depthOf(dev, tokens, 1, 0)).toBe(1);
    expect(dev.blockCount(1, 0)).toBe(2);
    a.applyBatch(W1, decoded([{ type: 'cleared' }]));
    expect(dev.blockCount(1, 0)).toBe(0);
  });

  it('reports a status per event and never throws on refused events', () => {
    const counters = new KvEventCounters();
    const a = new KvEventApplier({ blockSize: BS });
    const t = [1, 2, 3, 4];
    const one = (batch: KvEventBatch): string => {
      let status = '';
      a.applyBatch(W1, batch, (type, s) => {
        counters.onApplied(W1, type, s);
        status = s;
      });
      return status;
    };
    const statuses = [
      one(decoded([{ type: 'stored', blockHashes: [1n], parent: 99n, tokens: t, blockSize: BS }])),
      one(decoded([{ type: 'stored', blockHashes: [1n, 1n], parent: null, tokens: [...t, ...t], blockSize: BS }])),
      one(
        decoded([{ type: 'stored', blockHashes: [1n], parent: null, tokens: [1, 2, 3, 4, 5, 6, 7, 8], blockSize: 8 }]),
      ),
      one(decoded([{ type: 'stored', blockHashes: [1n], parent: null, tokens: [1, 2], blockSize: 2 }])),
      one(
        decoded(
          [{ type: 'stored', blockHashes: [1n], parent: null, tokens: t, blockSize: BS, loraId: 3 }],
          'sglang-array',
        ),
      ),
      one(decoded([{ type: 'stored', blockHashes: [1n], parent: null, tokens: t, blockSize: BS, groupIdx: 1 }])),
      one(decoded([{ type: 'removed', blockHashes: [5n] }])),
      one(decoded([{ type: 'removed', blockHashes: [5n], groupIdx: 1 }])),
    ];
    expect(statuses).toEqual([
      'parent_not_found',
      'invalid_sequence',
      'block_size_mismatch',
      'block_size_mismatch',
      'unnamed_lora',
      'other_group',
      'not_found',
      'other_group',
    ]);
    expect(a.indexes.device.size).toBe(0);
    const snap = counters.snapshot();
    expect(snap.events.stored.block_size_mismatch).toBe(2);
    expect(snap.events.removed.not_found).toBe(1);
    expect(snap.slots['1:0']).toMatchObject({ eventsApplied: 1, eventsRefused: 7 });
  });

  it('a truncated store applies its full blocks only', () => {
    const a = new KvEventApplier({ blockSize: BS });
    const ev = decodeKvEventBatch(
      encode([1.5, [['BlockStored', [1, 2, 3], null, [1, 2, 3, 4, 5, 6, 7, 8, 9], BS]], 0]),
    );
    expect(ev.ok).toBe(true);
    if (!ev.ok) return;
    expect(a.applyEvent(W2, ev.batch.events[0]!)).toBe('truncated');
    expect(a.indexes.device.blockCount(2, 0)).toBe(2);
    expect(depthOf(a.indexes.device, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], 2, 0)).toBe(2);
  });

  it('LoRA names and cache salts namespace the blocks exactly as request hashing does', () => {
    // Regression: the first hash with a new LoRA name once clobbered the tokens in WASM memory.
    const fresh = blockHashes([9, 9, 9, 9], BS, { loraName: 'never-seen-before', cacheSalt: undefined });
    expect(blockHashes([9, 9, 9, 9], BS, { loraName: 'never-seen-before' })).toEqual(fresh);
    const a = new KvEventApplier({ blockSize: BS });
    const t = [1, 2, 3, 4];
    a.applyBatch(
      W1,
      decoded(
        [{ type: 'stored', blockHashes: [1n], parent: null, tokens: t, blockSize: BS, loraName: 'adapter-a' }],
        'vllm-map',
      ),
    );
    a.applyBatch(
      W2,
      decoded(
        [{ type: 'stored', blockHashes: [1n], parent: null, tokens: t, blockSize: BS, cacheSalt: 'tenant-a' }],
        'sglang-array',
      ),
    );
    const dev = a.indexes.device;
    const hit = (h: BigUint64Array): number[] => {
      const m = dev.findMatches(h);
      return [...m.slots.subarray(0, m.count)].map((s) => dev.slotWorker(s)!.workerId);
    };
    expect(hit(blockHashes(t, BS))).toEqual([]);
    expect(hit(blockHashes(t, BS, { loraName: 'adapter-a' }))).toEqual([1]);
    expect(hit(blockHashes(t, BS, { cacheSalt: 'tenant-a' }))).toEqual([2]);
  });

  it('storage tiers go to separate indexes; removal and clear follow the tier', () => {
    const a = new KvEventApplier({ blockSize: BS });
    const t = [1, 2, 3, 4, 5, 6, 7, 8];
    a.applyBatch(
      W1,
      decoded([
        { type: 'stored', blockHashes: [1n, 2n], parent: null, tokens: t, blockSize: BS, medium: 'GPU' },
        { type: 'stored', blockHashes: [1n, 2n], parent: null, tokens: t, blockSize: BS, medium: 'CPU' },
        { type: 'stored', blockHashes: [1n], parent: null, tokens: t.slice(0, 4), blockSize: BS, medium: 'DISK' },
      ]),
    );
    expect(a.indexes.tiers()).toEqual(['device', 'host_pinned', 'disk']);
    expect(a.indexes.blockCount(1, 0, 'device')).toBe(2);
    expect(a.indexes.blockCount(1, 0, 'host_pinned')).toBe(2);
    expect(a.indexes.blockCount(1, 0, 'disk')).toBe(1);
    a.applyBatch(W1, decoded([{ type: 'removed', blockHashes: [2n], medium: 'GPU' }]));
    expect(a.indexes.blockCount(1, 0, 'device')).toBe(1);
    expect(a.indexes.blockCount(1, 0, 'host_pinned')).toBe(2);
    a.applyBatch(W1, decoded([{ type: 'cleared' }]));
    expect(a.indexes.tiers().map((t2) => a.indexes.blockCount(1, 0, t2))).toEqual([0, 0, 0]);
  });

  it("lower tiers hold their bytes against the device index's memory budget", () => {
    const device = new PrefixIndex();
    const budget = 256 * 1024;
    const evicted: number[] = [];
    device.setMemoryBudget(budget, (r) => evicted.push(r.entries));
    const a = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(device) });
    const doc = Array.from({ length: 8 * BS }, (_, i) => i + 1);
    const docHashes = Array.from({ length: 8 }, (_, i) => BigInt(i + 1));
    a.applyBatch(W1, decoded([{ type: 'stored', blockHashes: docHashes, parent: null, tokens: doc, blockSize: BS }]));
    // An engine offloading block after block to host memory.
    const rng = mulberry32(5);
    let peak = 0;
    for (let b = 0; b < 40; b++) {
      const events: TestEvent[] = Array.from({ length: 16 }, (_, k) => ({
        type: 'stored',
        blockHashes: Array.from({ length: 16 }, (_, i) => BigInt(1000 + (b * 16 + k) * 16 + i)),
        parent: null,
        tokens: Array.from({ length: 16 * BS }, () => 1 + Math.floor(rng() * 50_000)),
        blockSize: BS,
        medium: 'CPU',
      }));
      a.applyBatch(W1, decoded(events));
      peak = Math.max(peak, device.bytes + (a.indexes.peek('host_pinned')?.bytes ?? 0));
    }
    const host = a.indexes.peek('host_pinned')!;
    expect(peak).toBeLessThanOrEqual(budget);
    expect(device.pooledBytes).toBe(device.bytes + host.bytes);
    expect(host.evictedEntries).toBeGreaterThan(0);
    expect(evicted.reduce((x, y) => x + y, 0)).toBe(host.evictedEntries);
    expect(depthOf(device, doc, 1, 0)).toBe(8);
  });

  it('accepts a router-owned device index', () => {
    const device = new PrefixIndex();
    const a = new KvEventApplier({ blockSize: BS, indexes: new TieredPrefixIndex(device) });
    a.applyBatch(
      W3R1,
      decoded(
        [{ type: 'stored', blockHashes: [1n], parent: null, tokens: [1, 2, 3, 4], blockSize: BS }],
        'vllm-array',
        1,
      ),
    );
    expect(device.blockCount(3, 1)).toBe(1);
    expect(() => new KvEventApplier({ blockSize: 0 })).toThrow(/block size/);
  });
});

/** A simulated engine cache per slot: what the engine holds is the truth the index must reflect. */
interface Block {
  eng: bigint;
  parent: Block | null;
  tokens: number[];
  lora: string | undefined;
}

describe('randomized streams: applier == direct PrefixIndex == engine truth', () => {
  it('over 3 slots, 4 encodings, stores/removes/clears', () => {
    const rng = mulberry32(20261126);
    const rand = (n: number): number => Math.floor(rng() * n);
    const u64 = (): bigint => (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 2 ** 32));
    const pool = Array.from({ length: 24 }, () => Array.from({ length: BS }, () => rand(50_000)));
    const slots: [number, number][] = [
      [1, 0],
      [1, 1],
      [2, 0],
    ];
    const caches = new Map<string, Map<bigint, Block>>(slots.map(([w, r]) => [`${w}:${r}`, new Map()]));
    const viaEvents = new KvEventApplier({ blockSize: BS });
    const direct = new PrefixIndex();
    const path = (b: Block): Block[] => {
      const out: Block[] = [];
      for (let x: Block | null = b; x; x = x.parent) out.unshift(x);
      return out;
    };
    const pathTokens = (b: Block): number[] => path(b).flatMap((x) => x.tokens);

    for (let step = 0; step < 600; step++) {
      const [w, r] = slots[rand(slots.length)]!;
      const cache = caches.get(`${w}:${r}`)!;
      const events: TestEvent[] = [];
      const nEvents = 1 + rand(4);
      for (let e = 0; e < nEvents; e++) {
        const roll = rng();
        const cached = [...cache.values()];
        if (roll < 0.6 || cached.length === 0) {
          const parent = cached.length > 0 && rng() < 0.7 ? cached[rand(cached.length)]! : null;
          const lora = parent ? parent.lora : rng() < 0.2 ? 'adapter-a' : undefined;
          const blocks: Block[] = [];
          let p = parent;
          for (let k = 0, n = 1 + rand(4); k < n; k++) {
            const tokens = pool[rand(pool.length)]!;
            // Engines dedupe: never two cached children with the same content under one parent.
            if ([...cache.values(), ...blocks].some((x) => x.parent === p && x.lora === lora && x.tokens === tokens))
              break;
            const b: Block = { eng: u64(), parent: p, tokens, lora };
            blocks.push(b);
            p = b;
          }
          if (blocks.length === 0) continue;
          for (const b of blocks) cache.set(b.eng, b);
          events.push({
            type: 'stored',
            blockHashes: blocks.map((b) => b.eng),
            parent: parent?.eng ?? null,
            tokens: blocks.flatMap((b) => b.tokens),
            blockSize: BS,
            ...(lora ? { loraName: lora } : {}),
          });
          direct.applyStored(
            w,
            r,
            parent?.eng ?? null,
            blocks.map((b) => b.eng),
            blockHashes(
              blocks.flatMap((b) => b.tokens),
              BS,
              { loraName: lora },
            ),
          );
        } else if (roll < 0.97) {
          const victims = [...new Set([cached[rand(cached.length)]!, cached[rand(cached.length)]!])];
          for (const v of victims) cache.delete(v.eng);
          events.push({ type: 'removed', blockHashes: victims.map((v) => v.eng) });
          direct.applyRemoved(
            w,
            r,
            victims.map((v) => v.eng),
          );
        } else {
          cache.clear();
          events.push({ type: 'cleared' });
          direct.clearSlot(w, r);
        }
      }
      // SGLang legacy arrays cannot carry a LoRA name; use them only for LoRA-free batches.
      const usable = ENCODINGS.filter(
        (enc) => enc !== 'sglang-array' || !events.some((e) => e.type === 'stored' && e.loraName),
      );
      const batch = decodeKvEventBatch(encodeBatch(events, { encoding: usable[rand(usable.length)]!, dpRank: r }));
      expect(batch.ok).toBe(true);
      if (batch.ok)
        expect(viaEvents.applyBatch({ workerId: w, dpRank: r }, batch.batch)).toBe(batch.batch.events.length);

      if (step % 50 === 49) {
        const dev = viaEvents.indexes.device;
        expect(dev.size).toBe(direct.size);
        for (const [w2, r2] of slots) {
          const cache2 = caches.get(`${w2}:${r2}`)!;
          expect(dev.blockCount(w2, r2)).toBe(cache2.size);
          // The index is content-addressed like the engine's prefix cache: a
          // prefix is held when some cached block has exactly that content path.
          const held = new Set([...cache2.values()].map((x) => `${x.lora ?? ''}|${pathTokens(x).join(',')}`));
          for (const b of cache2.values()) {
            const p = path(b);
            let truth = 0;
            while (truth < p.length && held.has(`${b.lora ?? ''}|${pathTokens(p[truth]!).join(',')}`)) truth++;
            const tokens = pathTokens(b);
            expect(depthOf(dev, tokens, w2, r2, b.lora)).toBe(truth);
            expect(depthOf(direct, tokens, w2, r2, b.lora)).toBe(truth);
          }
        }
      }
    }
  });
});
