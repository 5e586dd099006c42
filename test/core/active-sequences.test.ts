import { describe, expect, it } from 'vitest';
import { ActiveSequences, outputBlockDecay } from '../../src/core/active-sequences.js';
import { ManualClock, seededRng } from '../../src/common/index.js';
import { promptHashes, type PromptHashes } from '../../src/wasm/index.js';

const BS = 4;

function prompt(prefix: number[], suffixLen: number, salt: number): PromptHashes {
  const tokens = [...prefix];
  for (let i = 0; i < suffixLen; i++) tokens.push(1_000_000 + salt * 1000 + i);
  return promptHashes(tokens, BS);
}

const range = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

function fresh(clock = new ManualClock()): ActiveSequences {
  const a = new ActiveSequences({ clock });
  a.ensureSlot(0, 10, 0);
  a.ensureSlot(1, 10, 1);
  a.ensureSlot(2, 11, 0);
  return a;
}

describe('ActiveSequences (spec 4.5)', () => {
  it('shared in-flight prefixes are counted once per slot, and freed only when the last holder leaves', () => {
    const a = fresh();
    const system = range(16); // 4 shared blocks
    const r1 = prompt(system, 8, 1); // 6 blocks
    const r2 = prompt(system, 12, 2); // 7 blocks, 4 shared with r1
    a.add({ requestId: 'r1', slot: 0, hashes: r1, prefillTokens: 0 });
    expect(a.load(0).activeDecodeBlocks).toBe(6);
    a.add({ requestId: 'r2', slot: 0, hashes: r2, prefillTokens: 0 });
    expect(a.load(0).activeDecodeBlocks).toBe(6 + 3);
    // The same prompt on another slot is counted there separately.
    a.add({ requestId: 'r3', slot: 1, hashes: r2, prefillTokens: 0 });
    expect(a.load(1).activeDecodeBlocks).toBe(7);
    // An identical prompt adds nothing.
    a.add({ requestId: 'r4', slot: 0, hashes: r2, prefillTokens: 0 });
    expect(a.load(0)).toEqual({ activePrefillTokens: 0, activeDecodeBlocks: 9, activeRequests: 3 });
    // depthsInto: the prompt is fully active on slots 0 and 1, not on 2.
    const out = new Float64Array(3);
    a.depthsInto(r2.seq, out);
    expect([...out]).toEqual([7, 7, 0]);
    expect(a.free('r2')).toBe(true);
    expect(a.load(0).activeDecodeBlocks).toBe(9); // r4 still holds r2's blocks
    expect(a.free('r4')).toBe(true);
    expect(a.load(0).activeDecodeBlocks).toBe(6);
    expect(a.free('r1')).toBe(true);
    expect(a.load(0).activeDecodeBlocks).toBe(0);
    expect(a.free('r1')).toBe(false);
  });

  it('prefill load is removed at markPrefillCompleted; free implies it', () => {
    const a = fresh();
    a.add({ requestId: 'a', slot: 2, hashes: prompt([], 8, 3), prefillTokens: 300 });
    a.add({ requestId: 'b', slot: 2, hashes: null, privateBlocks: 5, prefillTokens: 200 });
    expect(a.load(2).activePrefillTokens).toBe(500);
    expect(a.load(2).activeDecodeBlocks).toBe(7);
    expect(a.markPrefillCompleted('a')).toBe(true);
    expect(a.markPrefillCompleted('a')).toBe(false);
    expect(a.load(2).activePrefillTokens).toBe(200);
    expect(a.load(2).activeDecodeBlocks).toBe(7); // blocks stay
    a.free('b');
    expect(a.load(2)).toEqual({ activePrefillTokens: 0, activeDecodeBlocks: 2, activeRequests: 1 });
  });

  it('output blocks decay as max(0, 1 - osl/expected) over the blocks only the request holds', () => {
    expect(outputBlockDecay(0, 100)).toBe(1);
    expect(outputBlockDecay(25, 100)).toBe(0.75);
    expect(outputBlockDecay(150, 100)).toBe(0);
    expect(outputBlockDecay(10, undefined)).toBeUndefined();
    const a = fresh();
    const system = range(8); // 2 shared blocks
    a.add({ requestId: 'x', slot: 0, hashes: prompt(system, 12, 5), prefillTokens: 0, expectedOutputTokens: 100 }); // 5 blocks
    a.add({ requestId: 'y', slot: 0, hashes: prompt(system, 4, 6), prefillTokens: 0 }); // 3 blocks, 2 shared
    expect(a.load(0).activeDecodeBlocks).toBe(6);
    // Without a decay hint the output block counts fully.
    a.addOutputBlock('x');
    expect(a.load(0).activeDecodeBlocks).toBe(7);
    // x holds alone: 3 prompt blocks + 2 output blocks = 5; decay 0.75 => 5 × 0.25 = 1.25 off.
    a.addOutputBlock('x', outputBlockDecay(25, 100));
    expect(a.request('x')!.outputBlocks).toBe(2);
    expect(a.load(0).activeDecodeBlocks).toBe(Math.round(8 - 1.25));
    // Next block at decay 0.2: 6 exclusive × 0.8 = 4.8 off (replaces the earlier marks).
    a.addOutputBlock('x', 0.2);
    expect(a.load(0).activeDecodeBlocks).toBe(Math.round(9 - 4.8));
    // y's blocks never decay with x's.
    a.free('x');
    expect(a.load(0).activeDecodeBlocks).toBe(3);
    expect(() => a.addOutputBlock('y', 1.5)).toThrow(/decay/);
  });

  it('a request never freed is expired at 300 s (injected clock), also when checked lazily on add', () => {
    const clock = new ManualClock(1000);
    const a = fresh(clock);
    a.add({ requestId: 'old', slot: 0, hashes: prompt([], 8, 1), prefillTokens: 50 });
    clock.advance(100_000);
    a.add({ requestId: 'newer', slot: 0, hashes: null, privateBlocks: 1, prefillTokens: 0 });
    clock.advance(199_999);
    expect(a.expire()).toEqual([]);
    clock.advance(1);
    expect(a.expire()).toEqual(['old']);
    expect(a.has('old')).toBe(false);
    expect(a.load(0)).toEqual({ activePrefillTokens: 0, activeDecodeBlocks: 1, activeRequests: 1 });
    // Lazily: an add more than 30 s after the last check sweeps first.
    clock.advance(100_000);
    a.add({ requestId: 'trigger', slot: 1, hashes: null, prefillTokens: 0 });
    expect(a.has('newer')).toBe(false);
    expect(a.has('trigger')).toBe(true);
  });

  it('a request booked again with its first start expires from that start, out of insertion order', () => {
    const clock = new ManualClock(1000);
    const a = fresh(clock);
    clock.advance(200_000);
    a.add({ requestId: 'fresh', slot: 0, hashes: null, prefillTokens: 0 });
    a.add({ requestId: 'again', slot: 1, hashes: prompt([], 8, 1), prefillTokens: 0, startedAt: 1000 });
    expect(a.request('again')?.startedAt).toBe(1000);
    clock.advance(99_999);
    expect(a.expire()).toEqual([]);
    clock.advance(1);
    // Booked after 'fresh', it is past its expiry first: read apart from the start-ordered requests.
    expect(a.expire()).toEqual(['again']);
    expect(a.load(1)).toEqual({ activePrefillTokens: 0, activeDecodeBlocks: 0, activeRequests: 0 });
    clock.advance(200_000);
    expect(a.expire()).toEqual(['fresh']);
  });

  it('duplicate ids are refused; owner-conditional free', () => {
    const a = fresh();
    a.add({ requestId: 'd', slot: 0, hashes: null, prefillTokens: 1 });
    expect(() => a.add({ requestId: 'd', slot: 1, hashes: null, prefillTokens: 1 })).toThrow(
      expect.objectContaining({ code: 'KVG_ERR_DUPLICATE_REQUEST' }),
    );
    expect(a.free('d', 1)).toBe(false);
    expect(a.free('d', 0)).toBe(true);
    expect(() => a.add({ requestId: 'e', slot: 7, hashes: null, prefillTokens: 1 })).toThrow(/not registered/);
  });

  it('after any random sequence of add / complete / output / free, every counter returns to zero', () => {
    const rng = seededRng(2024);
    const int = (n: number): number => Math.floor(rng() * n);
    const clock = new ManualClock();
    const a = fresh(clock);
    const systems = [range(20, 1), range(12, 500), range(36, 900)];
    // Reference model of unique shared blocks per slot (ref-counted by sequence hash).
    const refs = [new Map<bigint, number>(), new Map<bigint, number>(), new Map<bigint, number>()];
    const priv = [0, 0, 0];
    const prefill = [0, 0, 0];
    const live = new Map<
      string,
      { slot: number; hashes: PromptHashes | null; priv: number; prefill: number; out: number; decayed: boolean }
    >();
    let decayedAny = [false, false, false];
    let next = 0;
    for (let step = 0; step < 3000; step++) {
      clock.advance(10);
      const op = rng();
      const ids = [...live.keys()];
      if (op < 0.4 || ids.length === 0) {
        const id = `q${next++}`;
        const slot = int(3);
        const shared = rng() < 0.8;
        const hashes = shared ? prompt(systems[int(3)]!.slice(0, int(40)), int(24), int(6)) : null;
        const pb = shared ? 0 : int(6);
        const pf = int(500);
        a.add({ requestId: id, slot, hashes, privateBlocks: pb, prefillTokens: pf, expectedOutputTokens: 64 });
        live.set(id, { slot, hashes, priv: pb, prefill: pf, out: 0, decayed: false });
        if (hashes) for (const h of hashes.seq) refs[slot]!.set(h, (refs[slot]!.get(h) ?? 0) + 1);
        priv[slot]! += pb;
        prefill[slot]! += pf;
      } else if (op < 0.6) {
        const id = ids[int(ids.length)]!;
        const r = live.get(id)!;
        if (a.markPrefillCompleted(id)) {
          prefill[r.slot]! -= r.prefill;
          r.prefill = 0;
        }
      } else if (op < 0.75) {
        const id = ids[int(ids.length)]!;
        const r = live.get(id)!;
        const decay = rng() < 0.5 ? outputBlockDecay(r.out * 4, 64) : undefined;
        a.addOutputBlock(id, decay);
        r.out++;
        priv[r.slot]! += 1;
        if (decay !== undefined) {
          r.decayed = true;
          decayedAny[r.slot] = true;
        }
      } else {
        const id = ids[int(ids.length)]!;
        const r = live.get(id)!;
        expect(a.free(id)).toBe(true);
        live.delete(id);
        if (r.hashes) {
          for (const h of r.hashes.seq) {
            const c = refs[r.slot]!.get(h)! - 1;
            if (c === 0) refs[r.slot]!.delete(h);
            else refs[r.slot]!.set(h, c);
          }
        }
        priv[r.slot]! -= r.priv + r.out;
        prefill[r.slot]! -= r.prefill;
        if (![...live.values()].some((x) => x.slot === r.slot && x.decayed)) decayedAny[r.slot] = false;
      }
      // Depth queries agree with the model: the longest prefix whose blocks are all active on the slot.
      const probe = prompt(systems[int(3)]!.slice(0, int(40)), int(24), int(6));
      const depths = new Float64Array(3);
      a.depthsInto(probe.seq, depths);
      for (let s = 0; s < 3; s++) {
        let d = 0;
        while (d < probe.seq.length && refs[s]!.has(probe.seq[d]!)) d++;
        expect(depths[s]).toBe(d);
      }
      for (let s = 0; s < 3; s++) {
        expect(a.sharedBlocks(s)).toBe(refs[s]!.size);
        const load = a.load(s);
        expect(load.activePrefillTokens).toBe(prefill[s]);
        expect(load.activeRequests).toBe([...live.values()].filter((x) => x.slot === s).length);
        if (!decayedAny[s]) expect(load.activeDecodeBlocks).toBe(refs[s]!.size + priv[s]!);
        else expect(load.activeDecodeBlocks).toBeLessThanOrEqual(refs[s]!.size + priv[s]!);
      }
    }
    for (const id of [...live.keys()]) a.free(id);
    decayedAny = [false, false, false];
    expect(a.size).toBe(0);
    for (let s = 0; s < 3; s++)
      expect(a.load(s)).toEqual({ activePrefillTokens: 0, activeDecodeBlocks: 0, activeRequests: 0 });
    for (let s = 0; s < 3; s++) expect(a.sharedBlocks(s)).toBe(0);
  });

  it('takes a service-time sample from requests that end, not from those a slot removal or an expiry drops', () => {
    const clock = new ManualClock(0);
    const a = new ActiveSequences({ clock, expiryMs: 300_000 });
    a.ensureSlot(0, 10, 0);
    a.ensureSlot(1, 11, 0);
    a.add({ requestId: 'served', slot: 0, hashes: null, prefillTokens: 1 });
    clock.advance(2_000);
    a.free('served');
    expect(a.meanServiceMs).toBe(2_000);
    // A worker leaving 10 ms into its requests: no sample cut short.
    a.add({ requestId: 'left', slot: 1, hashes: null, prefillTokens: 1 });
    clock.advance(10);
    expect(a.removeSlot(1)).toEqual(['left']);
    expect(a.meanServiceMs).toBe(2_000);
    // A request never freed, expired: no sample of the expiry's length.
    a.add({ requestId: 'leaked', slot: 0, hashes: null, prefillTokens: 1 });
    clock.advance(300_000);
    expect(a.expire()).toEqual(['leaked']);
    expect(a.meanServiceMs).toBe(2_000);
  });
});
