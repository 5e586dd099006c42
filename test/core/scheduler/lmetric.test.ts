/**
 * LMetric's rule (`router_lmetric`): a candidate scores the prefill tokens it would compute if routed
 * there (queued plus the prompt's uncached tokens) times its batch with the request (active requests
 * + 1); the lowest wins.
 */
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvRouter } from '../../../src/routing/index.js';
import { promptHashes } from '../../../src/wasm/index.js';

const BS = 4;
const tokens = (n: number, from = 1): number[] => Array.from({ length: n }, (_, i) => from + i);

describe('LMetric (router_lmetric)', () => {
  it('multiplies prefill tokens by the batch with the request, and moves off a cached worker once it is busy enough', () => {
    const r = new KvRouter({
      blockSize: BS,
      config: { routerLmetric: true },
      clock: new ManualClock(),
      rng: seededRng(2),
    });
    for (const w of [1, 2, 3]) r.addWorker(w);
    const prompt = tokens(40); // 10 blocks
    const h = promptHashes(prompt.slice(0, 32), BS);
    r.index.applyStored(1, 0, null, h.seq, h.local); // 8 of them on worker 1
    let next = 0;
    const busy = (n: number): void => {
      for (let i = 0; i < n; i++) {
        const id = `busy-${next++}`;
        r.findBestMatch({ requestId: id, tokens: tokens(8, 9000 + i * 8), routing: { backendInstanceId: 1 } });
        r.markPrefillCompleted(id);
      }
    };
    busy(2);
    const costs = (): Record<number, number> =>
      Object.fromEntries(
        r
          .findBestMatch({ requestId: 'q', tokens: prompt }, { mode: 'query' })
          .candidates.map((c) => [c.workerId, c.cost]),
      );
    // Worker 1: 8 uncached tokens x (2 active + 1); the others: 40 x 1.
    expect(costs()).toEqual({ 1: 24, 2: 40, 3: 40 });
    expect(r.findBestMatch({ requestId: 'a', tokens: prompt }, { mode: 'query' }).workerId).toBe(1);
    busy(3);
    expect(costs()).toEqual({ 1: 8 * 6, 2: 40, 3: 40 });
    expect(r.findBestMatch({ requestId: 'b', tokens: prompt }, { mode: 'query' }).workerId).not.toBe(1);
  });
});
