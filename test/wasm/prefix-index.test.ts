import { describe, expect, it } from 'vitest';
import { PrefixIndex, sequenceHashes, xxh3 } from '../../src/wasm/index.js';
import { isKvgateError } from '../../src/errors/index.js';
import { mulberry32 } from '../helpers/rng.js';

/**
 * An obviously-correct model of the index: per slot, engine hash -> the path
 * of local hashes from the root to that block. A slot's overlap with a request
 * is the largest k such that it holds blocks with paths local[0..j] for every j <= k.
 */
class ModelIndex {
  readonly slots = new Map<string, Map<bigint, string>>();

  #slot(w: number, r: number): Map<bigint, string> {
    const key = `${w}:${r}`;
    let m = this.slots.get(key);
    if (!m) this.slots.set(key, (m = new Map()));
    return m;
  }

  stored(w: number, r: number, parent: bigint | null, eng: bigint[], local: bigint[]): 'ok' | 'parent' | 'dup' {
    const m = this.#slot(w, r);
    let path = '';
    if (parent !== null) {
      const p = m.get(parent);
      if (p === undefined) return 'parent';
      path = p;
    }
    const all = parent === null ? eng : [parent, ...eng];
    if (new Set(all).size !== all.length) return 'dup';
    for (let i = 0; i < eng.length; i++) {
      path = `${path}/${local[i]}`;
      m.set(eng[i]!, path);
    }
    return 'ok';
  }

  removed(w: number, r: number, eng: bigint[]): number {
    const m = this.slots.get(`${w}:${r}`);
    let missing = 0;
    for (const h of eng) if (!m?.delete(h)) missing++;
    return missing;
  }

  clearWorker(w: number): void {
    for (const [k, m] of this.slots) if (k.startsWith(`${w}:`)) m.clear();
  }

  removeWorker(w: number): void {
    for (const k of [...this.slots.keys()]) if (k.startsWith(`${w}:`)) this.slots.delete(k);
  }

  removeRank(w: number, r: number): void {
    this.slots.delete(`${w}:${r}`);
  }

  matches(local: bigint[]): Map<string, number> {
    const out = new Map<string, number>();
    for (const [key, m] of this.slots) {
      const paths = new Set(m.values());
      let path = '';
      let depth = 0;
      for (const h of local) {
        path = `${path}/${h}`;
        if (!paths.has(path)) break;
        depth++;
      }
      if (depth > 0) out.set(key, depth);
    }
    return out;
  }

  size(): number {
    let n = 0;
    for (const m of this.slots.values()) n += m.size;
    return n;
  }
}

function indexMatches(index: PrefixIndex, local: bigint[]): Map<string, number> {
  const r = index.findMatches(BigUint64Array.from(local));
  const out = new Map<string, number>();
  for (let i = 0; i < r.count; i++) {
    const w = index.slotWorker(r.slots[i]!)!;
    out.set(`${w.workerId}:${w.dpRank}`, r.depths[i]!);
  }
  return out;
}

/** Engines name blocks by content: an opaque 64-bit id of (slot salt, path). */
function engineHash(w: number, r: number, path: string): bigint {
  return xxh3(new TextEncoder().encode(`${w}:${r}|${path}`), 99n);
}

describe('PrefixIndex against the model on randomized event streams', () => {
  // 64 slots: every shared block's holders are a one-word bitset. 320 and 512 slots: holders move
  // between inline pairs, sorted lists and bitsets as slots join and leave.
  const cases = [1, 2, 3, 4]
    .map((seed) => ({ seed, workers: 16 }))
    .concat({ seed: 5, workers: 128 }, { seed: 6, workers: 80 });
  for (const { seed, workers: workerCount } of cases) {
    it(`agrees on every query (seed ${seed}, ${workerCount * 4} slots)`, () => {
      const rng = mulberry32(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
      const index = new PrefixIndex();
      const model = new ModelIndex();
      const workers = Array.from({ length: workerCount }, (_, i) => 1000 + i);
      const ranks = [0, 1, 2, 3];
      const alphabet = Array.from({ length: 6 }, (_, i) => (BigInt(i + 1) * 0x9e3779b97f4a7c15n) % (1n << 64n));
      // Local-hash paths stored so far, to build queries from.
      const known: bigint[][] = [];
      let checks = 0;
      for (let step = 0; step < (workerCount > 16 ? 8000 : 3000); step++) {
        const w = pick(workers);
        const r = pick(ranks);
        const op = rng();
        const slotPaths: [bigint, string][] = [...(model.slots.get(`${w}:${r}`)?.entries() ?? [])];
        if (op < 0.55) {
          // stored: under root or a held block, 1..8 blocks
          let parent: bigint | null = null;
          let path = '';
          if (slotPaths.length > 0 && rng() < 0.7) {
            const [h, p] = pick(slotPaths);
            parent = h;
            path = p;
          }
          const n = 1 + Math.floor(rng() * 8);
          const local: bigint[] = [];
          const eng: bigint[] = [];
          for (let i = 0; i < n; i++) {
            const h = pick(alphabet);
            local.push(h);
            path = `${path}/${h}`;
            eng.push(engineHash(w, r, path));
          }
          if (rng() < 0.03) parent = 0xdeadbeefn; // unknown parent
          if (rng() < 0.03 && n > 1) eng[n - 1] = eng[0]!; // self-referencing sequence
          const want = model.stored(w, r, parent, eng, local);
          try {
            index.applyStored(w, r, parent, eng, local);
            expect(want).toBe('ok');
          } catch (e) {
            expect(want).not.toBe('ok');
            expect(
              isKvgateError(e, want === 'parent' ? 'KVG_ERR_PARENT_BLOCK_NOT_FOUND' : 'KVG_ERR_INVALID_BLOCK_SEQUENCE'),
            ).toBe(true);
          }
          known.push(local);
        } else if (op < 0.8) {
          const hashes = slotPaths.filter(() => rng() < 0.3).map(([h]) => h);
          if (rng() < 0.2) hashes.push(0x1234n); // unknown hash
          const missing = model.removed(w, r, hashes);
          expect(index.applyRemoved(w, r, hashes)).toEqual({ removed: hashes.length - missing, missing });
        } else if (op < 0.84) {
          model.clearWorker(w);
          index.clearWorker(w);
        } else if (op < 0.86) {
          model.removeWorker(w);
          index.removeWorker(w);
        } else if (op < 0.88) {
          model.removeRank(w, r);
          index.removeWorkerDpRank(w, r);
        } else {
          // queries: a known path, possibly extended or perturbed
          for (let q = 0; q < 5 && known.length > 0; q++) {
            const base = [...pick(known)];
            if (rng() < 0.5) base.push(pick(alphabet));
            if (rng() < 0.2 && base.length > 1) base[Math.floor(rng() * base.length)] = pick(alphabet);
            expect(indexMatches(index, base)).toEqual(model.matches(base));
            checks++;
          }
        }
        if (step % 100 === 0) {
          expect(index.size).toBe(model.size());
          for (const [key, m] of model.slots) {
            const [ws, rs] = key.split(':');
            expect(index.blockCount(Number(ws), Number(rs))).toBe(m.size);
          }
        }
      }
      expect(checks).toBeGreaterThan(100);
      expect(index.size).toBe(model.size());
      index.dispose();
    });
  }
});

describe('PrefixIndex semantics', () => {
  it('matches leading blocks per slot, across dp ranks', () => {
    const index = new PrefixIndex();
    const local = [11n, 12n, 13n, 14n];
    index.applyStored(1, 0, null, [101n, 102n, 103n], local.slice(0, 3));
    index.applyStored(2, 0, null, [201n], local.slice(0, 1));
    index.applyStored(2, 1, null, [301n, 302n, 303n, 304n], local);
    expect(indexMatches(index, local)).toEqual(
      new Map([
        ['1:0', 3],
        ['2:0', 1],
        ['2:1', 4],
      ]),
    );
    // by sequence hash gives the same answer
    const seq = sequenceHashes(BigUint64Array.from(local));
    const r = index.findMatches(seq, true);
    expect(r.count).toBe(3);
    expect(index.blockCount(2, 1)).toBe(4);
  });

  it('findMatches over more than 64 slots: every slot at its own depth, the arrays sized to the count', () => {
    const index = new PrefixIndex();
    const local = Array.from({ length: 40 }, (_, i) => BigInt(1000 + i));
    for (let w = 0; w < 130; w++)
      index.applyStored(
        w,
        0,
        null,
        [...local.keys()].slice(0, 1 + (w % 40)).map((i) => BigInt(w * 100 + i)),
        local.slice(0, 1 + (w % 40)),
      );
    const seq = sequenceHashes(BigUint64Array.from(local));
    const copied = index.findMatches(seq, true);
    expect(copied.count).toBe(130);
    expect(copied.slots.length).toBe(copied.count);
    expect(copied.depths.length).toBe(copied.count);
    expect(new Set(copied.depths)).toEqual(new Set(Array.from({ length: 40 }, (_, i) => i + 1)));
  });

  it('a store under a parent continues the chain', () => {
    const index = new PrefixIndex();
    index.applyStored(7, 0, null, [1n, 2n], [5n, 6n]);
    index.applyStored(7, 0, 2n, [3n], [7n]);
    expect(indexMatches(index, [5n, 6n, 7n])).toEqual(new Map([['7:0', 3]]));
    // parents are scoped per slot: worker 8 has no block 2n
    expect(() => index.applyStored(8, 0, 2n, [9n], [7n])).toThrow(/parent block/);
    expect(index.blockCount(8, 0)).toBe(0);
  });

  it('removal does not cascade, but a missing block ends the match', () => {
    const index = new PrefixIndex();
    index.applyStored(1, 0, null, [1n, 2n, 3n], [5n, 6n, 7n]);
    expect(index.applyRemoved(1, 0, [2n])).toEqual({ removed: 1, missing: 0 });
    expect(index.blockCount(1, 0)).toBe(2);
    expect(indexMatches(index, [5n, 6n, 7n])).toEqual(new Map([['1:0', 1]]));
    // re-storing the middle block restores the full match (the child stayed)
    index.applyStored(1, 0, 1n, [2n], [6n]);
    expect(indexMatches(index, [5n, 6n, 7n])).toEqual(new Map([['1:0', 3]]));
  });

  it('an unknown removal is reported and changes nothing', () => {
    const index = new PrefixIndex();
    index.applyStored(1, 0, null, [1n], [5n]);
    expect(index.applyRemoved(1, 0, [42n])).toEqual({ removed: 0, missing: 1 });
    expect(index.applyRemoved(9, 0, [1n])).toEqual({ removed: 0, missing: 1 });
    expect(indexMatches(index, [5n])).toEqual(new Map([['1:0', 1]]));
  });

  it('an empty query and an empty store are defined no-ops', () => {
    const index = new PrefixIndex();
    index.applyStored(1, 0, null, [], []);
    expect(index.findMatches(new BigUint64Array(0)).count).toBe(0);
    expect(index.size).toBe(0);
  });

  it('signed i64 hashes are reinterpreted as u64', () => {
    const index = new PrefixIndex();
    index.applyStored(1, 0, null, [-1n], [5n]);
    expect(index.applyRemoved(1, 0, [(1n << 64n) - 1n])).toEqual({ removed: 1, missing: 0 });
  });

  it('grows past its initial tables and past 64 slots without losing entries', () => {
    const index = new PrefixIndex();
    const chain = Array.from({ length: 300 }, (_, i) => BigInt(i + 1));
    for (let w = 0; w < 200; w++) {
      const len = 1 + (w % 300);
      index.applyStored(
        w,
        0,
        null,
        chain.slice(0, len).map((h) => h + BigInt(w) * 1000n),
        chain.slice(0, len),
      );
    }
    const m = indexMatches(index, chain);
    expect(m.size).toBe(200);
    for (let w = 0; w < 200; w++) expect(m.get(`${w}:0`)).toBe(1 + (w % 300));
    expect(index.distinctBlocks).toBe(200); // the longest chain stored has 200 blocks
    expect(index.bytes).toBeGreaterThan(0);
  });

  it('rejects invalid worker slots with a typed error', () => {
    const index = new PrefixIndex();
    expect(() => index.slotOf(-1, 0)).toThrow(/invalid worker slot/);
    expect(() => index.slotOf(1, 1.5)).toThrow(/invalid worker slot/);
    expect(() => index.applyStored(1, 0, null, [1n, 2n], [1n])).toThrow(/block hashes but/);
  });

  it('markHeld marks the engine hashes a slot holds, per slot, and leaves the other bytes as they were', () => {
    const index = new PrefixIndex();
    index.applyStored(1, 0, null, [1n, 2n, 3n], [5n, 6n, 7n]);
    index.applyStored(2, 0, null, [4n], [8n]);
    index.applyRemoved(1, 0, [2n]);
    const asked = BigUint64Array.from([3n, 2n, 4n, 1n, 99n]);
    const held = new Uint8Array(asked.length);
    expect(index.markHeld(1, 0, asked, held)).toBe(2);
    expect([...held]).toEqual([1, 0, 0, 1, 0]);
    // Another slot marks the same array: its block added, the marks already there kept.
    expect(index.markHeld(2, 0, asked, held)).toBe(1);
    expect([...held]).toEqual([1, 0, 1, 1, 0]);
    // A slot never registered, and no hashes, ask nothing of the module.
    expect(index.markHeld(9, 0, asked, held)).toBe(0);
    expect(index.markHeld(1, 0, new BigUint64Array(0), held)).toBe(0);
    expect([...held]).toEqual([1, 0, 1, 1, 0]);
    // Many hashes at once (the I/O region grows), signed i64 hashes read as u64.
    const many = BigUint64Array.from({ length: 20_000 }, (_, i) => BigInt(i * 7 + 1000));
    index.applyStored(3, 0, null, many.subarray(0, 1), [9n]);
    index.applyStored(3, 0, null, [-1n], [10n]);
    const all = new BigUint64Array([...many, (1n << 64n) - 1n]);
    const marks = new Uint8Array(all.length);
    expect(index.markHeld(3, 0, all, marks)).toBe(2);
    expect(marks[0]).toBe(1);
    expect(marks[all.length - 1]).toBe(1);
    expect(marks.reduce((x, y) => x + y, 0)).toBe(2);
    index.dispose();
  });

  it('removed slots are recycled cleanly', () => {
    const index = new PrefixIndex();
    index.applyStored(1, 0, null, [1n], [5n]);
    index.removeWorker(1);
    index.applyStored(2, 0, null, [2n], [6n]);
    expect(indexMatches(index, [5n])).toEqual(new Map());
    expect(indexMatches(index, [6n])).toEqual(new Map([['2:0', 1]]));
    index.dispose();
    index.dispose();
    expect(() => index.size).toThrow(/after dispose/);
  });
});
