import { describe, expect, it } from 'vitest';
import { PrefixIndex, sequenceHashes } from '../../src/wasm/index.js';
import { mulberry32 } from '../helpers/rng.js';

/**
 * findMatches against a plain reference, on the shape the matching walk is tuned for: documents that many
 * slots store whole in one event (consecutive records whose holders are equal along long runs, and skip
 * the intersection), then holes punched in single slots, slots cleared and restored, the fleet widened
 * past 64 and 128 slots. The reference is a set of sequence hashes per slot.
 */
class Reference {
  readonly held = new Map<number, Set<bigint>>();

  add(slot: number, seq: BigUint64Array): void {
    let set = this.held.get(slot);
    if (!set) this.held.set(slot, (set = new Set()));
    for (const h of seq) set.add(h);
  }

  drop(slot: number, seq: bigint): void {
    this.held.get(slot)?.delete(seq);
  }

  matches(seq: BigUint64Array): Map<number, number> {
    const out = new Map<number, number>();
    for (const [slot, set] of this.held) {
      let depth = 0;
      while (depth < seq.length && set.has(seq[depth]!)) depth++;
      if (depth > 0) out.set(slot, depth);
    }
    return out;
  }
}

/** `n` random u64 from `rng`. */
function randomHashes(rng: () => number, n: number): BigUint64Array {
  const u32 = new Uint32Array(2 * n);
  for (let i = 0; i < u32.length; i++) u32[i] = Math.floor(rng() * 2 ** 32);
  return new BigUint64Array(u32.buffer);
}

/** The slot's engine hash of a block: opaque, unique per (slot, block). */
const engineHash = (slot: number, seq: bigint): bigint => seq ^ (BigInt(slot + 1) << 47n);

function matchesOf(index: PrefixIndex, hashes: BigUint64Array, bySequence: boolean): Map<number, number> {
  const r = index.findMatches(hashes, bySequence);
  const out = new Map<number, number>();
  for (let i = 0; i < r.count; i++) {
    const w = index.slotWorker(r.slots[i]!)!;
    expect(out.has(w.workerId)).toBe(false);
    out.set(w.workerId, r.depths[i]!);
  }
  return out;
}

describe('findMatches against a reference on shared documents', () => {
  for (const seed of [1, 2, 3]) {
    it(`agrees on every document and its variants (seed ${seed}, up to 300 slots)`, () => {
      const rng = mulberry32(seed);
      const docs = Array.from({ length: 6 }, () => randomHashes(rng, 160));
      const seqs = docs.map((d) => sequenceHashes(d));
      const index = new PrefixIndex();
      const ref = new Reference();
      const store = (slot: number, doc: number, len: number): void => {
        const seq = seqs[doc]!.subarray(0, len);
        index.applyStored(
          slot,
          0,
          null,
          seq.map((h) => engineHash(slot, h)),
          docs[doc]!.subarray(0, len),
        );
        ref.add(slot, seq);
      };
      const check = (): void => {
        for (let d = 0; d < docs.length; d++) {
          const partial = docs[d]!.slice();
          partial[1 + Math.floor(rng() * 150)] = 12345n;
          for (const local of [docs[d]!, partial, docs[d]!.subarray(0, 1 + Math.floor(rng() * 159))]) {
            const seq = sequenceHashes(local);
            const want = ref.matches(seq);
            expect(matchesOf(index, seq, true)).toEqual(want);
            expect(matchesOf(index, local, false)).toEqual(want);
          }
        }
      };
      for (const width of [40, 120, 300]) {
        for (let slot = 0; slot < width; slot++) {
          const doc = slot % docs.length;
          // Most slots hold a whole document; a few a prefix, so holders change at a few blocks of a run.
          store(slot, doc, rng() < 0.8 ? 160 : 1 + Math.floor(rng() * 160));
          if (rng() < 0.3) store(slot, (doc + 1) % docs.length, 160);
        }
        check();
        // Holes in single slots: a block in the middle of a run loses one holder, and gets it back.
        for (let k = 0; k < width / 4; k++) {
          const slot = Math.floor(rng() * width);
          const seq = seqs[slot % docs.length]![Math.floor(rng() * 160)]!;
          index.applyRemoved(slot, 0, [engineHash(slot, seq)]);
          ref.drop(slot, seq);
        }
        check();
        for (let k = 0; k < width / 8; k++) {
          const slot = Math.floor(rng() * width);
          index.clearSlot(slot, 0);
          ref.held.delete(slot);
        }
        check();
        for (let slot = 0; slot < width; slot += 3) store(slot, slot % docs.length, 160);
        check();
      }
      index.dispose();
    });
  }
});
