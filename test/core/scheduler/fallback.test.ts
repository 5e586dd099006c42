import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng } from '../../../src/common/index.js';
import { KvRouter } from '../../../src/routing/index.js';

describe('per-worker approximate fallback (KV events on, one worker silent)', () => {
  const tokens = Array.from({ length: 128 }, (_, i) => i + 1);

  it('records decisions only for workers whose events are not live, and trusts events once they are', () => {
    const silent = new Set([2]);
    const clock = new ManualClock();
    const kv = new KvRouter({ blockSize: 16, clock, rng: seededRng(1), eventFallback: (w) => silent.has(w) });
    kv.addWorker(1);
    kv.addWorker(2);
    // A request pinned to the silent worker is recorded as if it had cached the prompt.
    kv.findBestMatch({ requestId: 'a', tokens, routing: { backendInstanceId: 2 } });
    kv.free('a');
    const d = kv.findBestMatch({ requestId: 'b', tokens }, { mode: 'query' });
    expect(d.workerId).toBe(2);
    expect(d.overlapBlocks).toBe(8);
    // Decisions for a live worker are not recorded.
    kv.findBestMatch({ requestId: 'c', tokens: tokens.map((t) => t + 1000), routing: { backendInstanceId: 1 } });
    kv.free('c');
    expect(
      kv.findBestMatch({ requestId: 'd', tokens: tokens.map((t) => t + 1000) }, { mode: 'query' }).overlapBlocks,
    ).toBe(0);
    // Worker 2's events become live: its recorded entries no longer count.
    silent.delete(2);
    expect(kv.findBestMatch({ requestId: 'e', tokens }, { mode: 'query' }).overlapBlocks).toBe(0);
    // And recorded entries expire with router_ttl_secs.
    silent.add(2);
    expect(kv.findBestMatch({ requestId: 'f', tokens }, { mode: 'query' }).overlapBlocks).toBe(8);
    clock.advance(120_001);
    kv.tick();
    expect(kv.findBestMatch({ requestId: 'g', tokens }, { mode: 'query' }).overlapBlocks).toBe(0);
  });
});
