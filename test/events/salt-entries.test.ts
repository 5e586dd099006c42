/**
 * The salt memory's table (salt-entries.ts) and the memory over it (salt-memory.ts): the table keeps every
 * entry findable through growth and deletions (backward shift, wrapping around the table's end), each slot's
 * entries oldest first, and a salt string only while an entry holds it; the memory answers, evicts, reports and
 * exports exactly as a memory of one `Map` per slot (its former form, the reference here) under seeded traffic
 * over several slots, with and without its cap.
 */
import { describe, expect, it } from 'vitest';
import type { SaltRun, WorkerRank } from '../../src/common/index.js';
import { HashSet, SaltEntries } from '../../src/events/salt-entries.js';
import { SaltMemory, type SaltEvictionReport } from '../../src/events/salt-memory.js';
import { mulberry32 } from '../helpers/rng.js';

/** The memory as it was: one `Map` per slot in insertion order (the contract is its behaviour). */
class ReferenceMemory {
  readonly slots = new Map<string, Map<bigint, string>>();
  size = 0;
  inEpisode = false;
  evictions = 0;

  constructor(
    readonly cap: number,
    readonly onEvicted: (r: SaltEvictionReport) => void,
  ) {}

  saltOf(slot: WorkerRank, h: bigint): string | undefined {
    return this.size === 0 ? undefined : this.slots.get(key(slot))?.get(h);
  }

  holds(slot: WorkerRank): boolean {
    return this.size > 0 && (this.slots.get(key(slot))?.size ?? 0) > 0;
  }

  remember(slot: WorkerRank, hashes: BigUint64Array, salt: string): void {
    const k = key(slot);
    let m = this.slots.get(k);
    if (m === undefined) this.slots.set(k, (m = new Map()));
    for (const h of hashes) {
      const had = m.has(h);
      m.delete(h);
      m.set(h, salt);
      if (!had) this.size++;
      if (this.size > this.cap) this.evictOne(m);
    }
    if (this.size <= (this.cap * 3) / 4) this.inEpisode = false;
  }

  exportSlot(slot: WorkerRank): SaltRun[] {
    const m = this.size === 0 ? undefined : this.slots.get(key(slot));
    const out: SaltRun[] = [];
    for (const [h, s] of m ?? []) {
      const last = out.at(-1);
      if (last?.salt === s) (last.hashes as unknown as bigint[]).push(h);
      else out.push({ salt: s, hashes: [h] as unknown as BigUint64Array });
    }
    return out.map((r) => ({ salt: r.salt, hashes: BigUint64Array.from(r.hashes as unknown as bigint[]) }));
  }

  forget(slot: WorkerRank, hashes: BigUint64Array): void {
    if (this.size === 0) return;
    const m = this.slots.get(key(slot));
    if (m === undefined) return;
    for (const h of hashes) if (m.delete(h)) this.size--;
    if (this.size <= (this.cap * 3) / 4) this.inEpisode = false;
  }

  clearSlot(slot: WorkerRank): void {
    if (this.size === 0) return;
    const m = this.slots.get(key(slot));
    if (m === undefined) return;
    this.size -= m.size;
    this.slots.delete(key(slot));
    if (this.size <= (this.cap * 3) / 4) this.inEpisode = false;
  }

  evictOne(m: Map<bigint, string>): void {
    let from = m;
    if (m.size <= 1) from = [...this.slots.values()].find((o) => o !== m && o.size > 0) ?? m;
    const oldest = from.keys().next();
    if (oldest.done === true) return;
    from.delete(oldest.value);
    this.size--;
    this.evictions++;
    const episodeStart = !this.inEpisode;
    this.inEpisode = true;
    this.onEvicted({ evicted: 1, episodeStart });
  }
}

function key(slot: WorkerRank): string {
  return `${slot.workerId}:${slot.dpRank}`;
}

describe('SaltEntries', () => {
  /** Seeded adds, renewals and removals over 3 slots, from a table of 2 entries, against a `Map` per slot. */
  it('keeps every entry findable and each slot oldest first through growth and deletions', () => {
    const rng = mulberry32(7);
    const t = new SaltEntries(2);
    const ref = [new Map<string, number>(), new Map<string, number>(), new Map<string, number>()];
    const ids = ['a', 'b', 'c', 'd'].map((s) => t.hold(s));
    // Few distinct halves, so keys share a half with many others and probe runs are long.
    const halves = (): [number, number] => [Math.floor(rng() * 40) * 0x10001, Math.floor(rng() * 3) * 0xfffffff];
    const check = (): void => {
      for (let s = 0; s < 3; s++) {
        const order: string[] = [];
        for (let e = t.oldest(s); e >= 0; e = t.newer(e)) {
          order.push(`${t.lo(e)}/${t.hi(e)}`);
          expect(t.saltId(e)).toBe(ref[s]!.get(`${t.lo(e)}/${t.hi(e)}`));
        }
        expect(order).toEqual([...ref[s]!.keys()]);
        expect(t.count(s)).toBe(ref[s]!.size);
        for (const k of ref[s]!.keys()) {
          const [lo, hi] = k.split('/').map(Number) as [number, number];
          expect(t.find(s, lo, hi)).toBeGreaterThanOrEqual(0);
        }
      }
      expect(t.size).toBe(ref.reduce((n, m) => n + m.size, 0));
    };
    for (let round = 0; round < 40; round++) {
      for (let op = 0; op < 60; op++) {
        const s = Math.floor(rng() * 3);
        const [lo, hi] = halves();
        const k = `${lo}/${hi}`;
        const e = t.find(s, lo, hi);
        expect(e >= 0).toBe(ref[s]!.has(k));
        const salt = ids[Math.floor(rng() * ids.length)]!;
        // Growing in the first rounds, then as many removals as adds (the table fills and empties in places).
        if (e < 0 && rng() < (round < 10 ? 0.9 : 0.5)) {
          t.add(s, lo, hi, salt);
          ref[s]!.set(k, salt);
        } else if (e >= 0 && rng() < 0.6) {
          t.remove(e);
          ref[s]!.delete(k);
        } else if (e >= 0) {
          t.renew(e, salt);
          ref[s]!.delete(k);
          ref[s]!.set(k, salt);
        }
      }
      check();
    }
    // Emptied, every probe position is free again: nothing left findable, and the table takes entries anew.
    for (let s = 0; s < 3; s++) for (let e = t.oldest(s); e >= 0; e = t.oldest(s)) t.remove(e);
    expect(t.size).toBe(0);
    expect(t.find(0, 0, 0)).toBe(-1);
    t.add(1, 5, 6, ids[0]!);
    expect(t.find(1, 5, 6)).toBeGreaterThanOrEqual(0);
    expect(t.find(0, 5, 6)).toBe(-1); // the slot is part of the key
  });

  it('keeps a salt while an entry or a hold refers to it, and reuses its id after', () => {
    const t = new SaltEntries();
    const a = t.hold('tenant-a');
    const e = t.add(0, 1, 0, a);
    t.release(a); // the entry still refers to it
    expect(t.saltOf(t.saltId(e))).toBe('tenant-a');
    const b = t.hold('tenant-b');
    t.renew(e, b); // the last reference to tenant-a goes
    t.release(b);
    expect(t.saltOf(t.saltId(e))).toBe('tenant-b');
    const c = t.hold('tenant-c');
    expect(c).toBe(a); // tenant-a's id, free again
    expect(t.hold('tenant-b')).toBe(b); // still held by the entry: the same id
  });
});

describe('HashSet', () => {
  it('holds the hashes added, duplicates once, through growth, and none after a clear', () => {
    const set = new HashSet();
    const many = BigUint64Array.from({ length: 1000 }, (_, i) => (BigInt(i % 500) << 32n) | BigInt(i % 7));
    set.addAll(many);
    set.addAll(many.subarray(0, 10)); // again: no second entry
    for (const h of many) expect(set.has(h)).toBe(true);
    expect(set.has((3n << 32n) | 4n)).toBe(false); // its halves each in the set, not together
    set.clear();
    for (const h of many) expect(set.has(h)).toBe(false);
    set.addAll(new BigUint64Array([0n, 2n ** 64n - 1n]));
    expect([0n, 2n ** 64n - 1n, 1n].map((h) => set.has(h))).toEqual([true, true, false]);
  });
});

describe('SaltMemory', () => {
  const slots: WorkerRank[] = [
    { workerId: 1, dpRank: 0 },
    { workerId: 1, dpRank: 1 },
    { workerId: 2, dpRank: 0 },
    { workerId: 3, dpRank: 0 },
  ];

  for (const cap of [1, 5, 40, 1 << 20]) {
    it(`answers, evicts, reports and exports as a Map per slot (cap ${cap}, seeded traffic over 4 slots)`, () => {
      const rng = mulberry32(cap);
      const got: SaltEvictionReport[] = [];
      const want: SaltEvictionReport[] = [];
      const m = new SaltMemory(cap, (r) => got.push(r));
      const ref = new ReferenceMemory(cap, (r) => want.push(r));
      // Hashes over the whole u64 range and small ones; salts from a few tenants.
      const hash = (): bigint =>
        rng() < 0.5
          ? BigInt(Math.floor(rng() * 60))
          : (BigInt(Math.floor(rng() * 2 ** 32)) << 32n) | BigInt(Math.floor(rng() * 8));
      const hashes = (n: number): BigUint64Array => BigUint64Array.from({ length: n }, hash);
      const pool: bigint[] = [];
      for (let op = 0; op < 3000; op++) {
        const slot = slots[Math.floor(rng() * slots.length)]!;
        const r = rng();
        if (r < 0.45) {
          const hs = hashes(Math.floor(rng() * 6));
          pool.push(...hs);
          const salt = `tenant-${Math.floor(rng() * 3)}`;
          m.remember(slot, hs, salt);
          ref.remember(slot, hs, salt);
        } else if (r < 0.75) {
          const hs = BigUint64Array.from({ length: Math.floor(rng() * 4) }, () =>
            rng() < 0.7 && pool.length > 0 ? pool[Math.floor(rng() * pool.length)]! : hash(),
          );
          m.forget(slot, hs);
          ref.forget(slot, hs);
        } else if (r < 0.8) {
          m.clearSlot(slot);
          ref.clearSlot(slot);
        } else if (r < 0.85) {
          const runs = ref.exportSlot(slot);
          expect(m.exportSlot(slot)).toEqual(runs);
          const to = slots[Math.floor(rng() * slots.length)]!;
          expect(m.importSlot(to, runs)).toBe(runs.reduce((n, x) => n + x.hashes.length, 0));
          for (const x of runs) ref.remember(to, x.hashes, x.salt);
        }
        const probe = pool.length > 0 && rng() < 0.8 ? pool[Math.floor(rng() * pool.length)]! : hash();
        expect(m.saltOf(slot, probe)).toBe(ref.saltOf(slot, probe));
        expect(m.holds(slot)).toBe(ref.holds(slot));
        expect(m.size).toBe(ref.size);
      }
      for (const slot of slots) expect(m.exportSlot(slot)).toEqual(ref.exportSlot(slot));
      expect(m.evictions).toBe(ref.evictions);
      expect(got).toEqual(want);
      if (cap < 100) expect(m.evictions).toBeGreaterThan(0);
    });
  }

  it('evicts the storing slot oldest first, or the first slot holding any when it holds only the new one', () => {
    const m = new SaltMemory(3);
    const [a, b, c] = slots as [WorkerRank, WorkerRank, WorkerRank];
    m.remember(b, new BigUint64Array([1n]), 's');
    m.remember(a, new BigUint64Array([2n, 3n]), 's');
    m.remember(a, new BigUint64Array([4n]), 's'); // a's oldest goes
    expect([2n, 3n, 4n].map((h) => m.saltOf(a, h))).toEqual([undefined, 's', 's']);
    m.remember(c, new BigUint64Array([5n]), 's'); // c holds only 5: b, the first slot holding any, loses 1
    expect(m.saltOf(b, 1n)).toBeUndefined();
    expect(m.holds(b)).toBe(false);
    m.remember(b, new BigUint64Array([6n]), 's'); // b, first in order but empty, is passed over: a loses 3
    expect([3n, 4n, 5n, 6n].map((h, i) => m.saltOf([a, a, c, b][i]!, h))).toEqual([undefined, 's', 's', 's']);
    expect(m.evictions).toBe(3);
  });
});
