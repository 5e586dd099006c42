/**
 * A batch is applied whole or not at all (slot-writer.ts, `accept`): one holding an event that does not
 * decode is refused before any of its events reaches the index, whether the main thread decoded it or an
 * ingestion thread handed it over packed. Counted (`dropped.refused`, and each bad event as a decode error)
 * and logged; its seq is used up, and the next batch is applied as usual.
 */
import { decode, encode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { decodeKvEventBatch, storedLocalHashes } from '../../src/events/index.js';
import { BatchPacker } from '../../src/events/batch-codec.js';
import { eachPackedBatch } from '../../src/events/packed-batch.js';
import { captureWarnings } from '../helpers/capture-log.js';
import { encodeBatch, type TestEvent } from '../helpers/zmq-publisher.js';
import { A, B, C, setup, stored } from './stream-fixture.js';

/** `events` as the engine encodes them, then one it does not (an unknown tag) as the batch's last. */
function withBadLast(events: TestEvent[]): Uint8Array {
  const [ts, evs, rank] = decode(encodeBatch(events), { useBigInt64: true }) as [number, unknown[], number];
  return encode([ts, [...evs, ['BlockMoved', [1], null, A, 4]], rank], { useBigInt64: true });
}

describe('a KV-event batch holding a bad event', () => {
  for (const handOver of [false, true]) {
    it(`is refused whole: none of its blocks is indexed (${handOver ? 'handed over packed' : 'decoded here'})`, () => {
      const lines: Record<string, unknown>[] = [];
      const { stream, deliver, depth, counters } = setup({ logger: captureWarnings(lines) });
      const offer = (seq: bigint, payload: Uint8Array): void => {
        if (!handOver) return deliver({ seq, payload });
        const r = decodeKvEventBatch(payload);
        if (!r.ok) throw new Error(r.error.message);
        const locals = r.batch.events.map((ev) => (ev.type === 'stored' ? storedLocalHashes(ev, 4) : undefined));
        const packer = new BatchPacker();
        packer.add(1, seq, r.batch, locals);
        eachPackedBatch(structuredClone(packer.take()), (_id, s, b) => stream.onDecoded(s, b));
      };
      offer(0n, encodeBatch([stored(1, null, A)]));
      // Two good stores (one chained under the block of batch 0), then the bad event.
      offer(1n, withBadLast([stored(2, 100, B), stored(3, null, C)]));
      expect(depth([...A, ...B])).toBe(1);
      expect(depth(C)).toBe(0);
      const s = counters.snapshot();
      expect(s.dropped.refused).toBe(1);
      expect(s.decodeErrors.unknown_tag).toBe(1);
      expect(lines).toContainEqual(expect.objectContaining({ workerId: 7, seq: '1', badEvents: 1, goodEvents: 2 }));
      // Its seq is used up: the next batch is in sequence and applied.
      expect(stream.cursor).toBe(1n);
      offer(2n, encodeBatch([stored(2, 100, B)]));
      expect(depth([...A, ...B])).toBe(2);
      expect(counters.snapshot().gaps).toBe(0);
    });
  }
});
