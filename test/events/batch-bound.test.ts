// A valid batch too large to decode within an event-loop turn (one BlockRemoved of millions of hashes, well
// within the 64 MiB message limit) is refused before it is decoded: counted and logged, the stream goes on.
import { describe, expect, it } from 'vitest';
import { decodeKvEventBatch, MAX_BATCH_ELEMENTS } from '../../src/events/index.js';
import { captureWarnings } from '../helpers/capture-log.js';
import { hugeRemoval as removal } from '../helpers/zmq-publisher.js';
import { chain } from './stream-fixture.js';

describe('a batch holding more msgpack elements than MAX_BATCH_ELEMENTS', () => {
  it('is refused unread as too_large; one at the bound still decodes', () => {
    const at = decodeKvEventBatch(removal(MAX_BATCH_ELEMENTS - 7, 5));
    expect(at.ok).toBe(true);
    expect(at.ok && at.batch.events[0]).toMatchObject({ type: 'removed' });
    expect(decodeKvEventBatch(removal(MAX_BATCH_ELEMENTS - 6, 5))).toMatchObject({
      ok: false,
      error: { kind: 'too_large', message: expect.stringMatching(/more than 1048576 msgpack elements/) },
    });
    // A caller's own bound.
    expect(decodeKvEventBatch(removal(100, 5), { maxElements: 100 })).toMatchObject({
      ok: false,
      error: { kind: 'too_large' },
    });
  });

  it('30M hashes (about 30 MiB, under the 64 MiB message limit) cost a header scan, not a 1.3 s decode', () => {
    const huge = removal(30_000_000, 5);
    const started = performance.now();
    const r = decodeKvEventBatch(huge);
    const ms = performance.now() - started;
    expect(r).toMatchObject({ ok: false, error: { kind: 'too_large' } });
    // Refused at the array's header: microseconds. The bound is loose for a busy shared machine.
    expect(ms).toBeLessThan(100);
  });

  it('in a stream: counted and logged as a decode error, its seq used up; the slot keeps its blocks and goes on', () => {
    const lines: Record<string, unknown>[] = [];
    const t = chain({ logger: captureWarnings(lines) });
    for (let i = 0; i < 3; i++) t.deliver(t.next());
    // In sequence (seq 3): the removal of the chain's first block, repeated past the bound.
    t.stream.onMessage(3n, removal(MAX_BATCH_ELEMENTS, 100));
    t.engine.seq = 4n;
    // And a decisive one (seq 0 again, which a readable batch would make a restart).
    t.stream.onMessage(0n, removal(MAX_BATCH_ELEMENTS, 100));
    const s = t.counters.snapshot();
    expect(s.decodeErrors.too_large).toBe(2);
    expect(s.resets.restart).toBe(0);
    expect(t.stream.cursor).toBe(3n);
    expect(t.depth(t.tokens)).toBe(3);
    expect(lines.filter((l) => l.kind === 'too_large').map((l) => l.seq)).toEqual(['3']);
    t.deliver(t.next());
    expect(t.depth(t.tokens)).toBe(4);
    expect(t.counters.snapshot().gaps).toBe(0);
  });
});
