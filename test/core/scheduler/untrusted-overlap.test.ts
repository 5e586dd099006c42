/**
 * A worker registered with `kvOverlap: false` (its engine's block size or tokenizer differs from the
 * router's) is scored as holding nothing: its cached-prefix overlap is 0, from the events index and from
 * the approximate fallback alike, while other workers keep theirs; re-registering with trust restores it.
 * (issue 16, engine introspection on join: a mismatched worker is routed without KV overlap)
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvRouter } from '../../../src/routing/index.js';

describe('untrusted KV overlap (kvOverlap: false)', () => {
  const tokens = Array.from({ length: 128 }, (_, i) => i + 1);

  it('scores an untrusted worker with overlap 0 and a trusted one with its cached blocks', () => {
    const kv = new KvRouter({ blockSize: 16, clock: new ManualClock(), rng: seededRng(1), eventFallback: () => true });
    kv.addWorker(1);
    kv.addWorker(2, { kvOverlap: false });
    for (const [id, w] of [
      ['a', 1],
      ['b', 2],
    ] as const) {
      kv.findBestMatch({ requestId: id, tokens, routing: { backendInstanceId: w } });
      kv.free(id);
    }
    const pinned = (w: number, id: string): number =>
      kv.findBestMatch({ requestId: id, tokens, routing: { backendInstanceId: w } }, { mode: 'query' }).overlapBlocks;
    expect(pinned(1, 'q1')).toBe(8);
    expect(pinned(2, 'q2')).toBe(0);
    const best = kv.findBestMatch({ requestId: 'q3', tokens }, { mode: 'query' });
    expect(best.candidates.find((c) => c.workerId === 2)?.overlapBlocks ?? 0).toBe(0);
    // Trusted again (the worker re-registered with matching settings): its recorded blocks count.
    kv.addWorker(2, { kvOverlap: true });
    expect(pinned(2, 'q4')).toBe(8);
  });

  it('keeps distrusting through other workers leaving and re-registering the same way', () => {
    const kv = new KvRouter({ blockSize: 16, clock: new ManualClock(), rng: seededRng(1), eventFallback: () => true });
    kv.addWorker(1, { kvOverlap: false });
    kv.addWorker(2, { kvOverlap: false, dataParallelSize: 2 });
    kv.addWorker(3);
    for (const [id, w] of [
      ['a', 2],
      ['b', 3],
    ] as const) {
      kv.findBestMatch({ requestId: id, tokens, routing: { backendInstanceId: w, dpRank: 0 } });
      kv.free(id);
    }
    let n = 0;
    const overlapOf = (w: number): number =>
      kv
        .findBestMatch({ requestId: `q${n++}`, tokens }, { mode: 'query' })
        .candidates.find((c) => c.workerId === w && c.dpRank === 0)!.overlapBlocks;
    expect([overlapOf(2), overlapOf(3)]).toEqual([0, 8]);
    kv.removeWorker(1);
    kv.addWorker(2, { kvOverlap: false, dataParallelSize: 2 });
    expect([overlapOf(2), overlapOf(3)]).toEqual([0, 8]);
    // One rank fewer: the dropped rank's distrust goes with it, the kept rank's stays.
    kv.addWorker(2, { kvOverlap: false, dataParallelSize: 1 });
    expect([overlapOf(2), overlapOf(3)]).toEqual([0, 8]);
    kv.addWorker(2, { kvOverlap: true });
    expect(overlapOf(2)).toBe(8);
    kv.addWorker(2, { kvOverlap: false });
    expect(overlapOf(2)).toBe(0);
  });
});
