/** A turn's ops cut to the bus's max_payload: every message fits, ops keep their order, sequence numbers run on. */
import { describe, expect, it } from 'vitest';
import type { SyncedBooking } from '../../src/core/index.js';
import { decodeBatch, encodeBatches, type SyncOp } from '../../src/replicas/protocol.js';

function added(requestId: string, blocks: number): SyncOp {
  const booking: SyncedBooking = {
    requestId,
    workerId: 1,
    dpRank: 0,
    seq: BigUint64Array.from({ length: blocks }, (_, i) => BigInt(i + 1)),
    privateBlocks: 0,
    prefillTokens: blocks * 16,
    expectedOutputTokens: undefined,
    prefillCompleted: false,
    outputBlocks: 0,
    decay: undefined,
  };
  return { kind: 'added', booking };
}

describe('encodeBatches', () => {
  const base = { routerId: 'a', incarnation: 'i1', sentAt: 12.5 };

  it('one message when the batch fits; else consecutive messages that fit, in op order', () => {
    let seq = 127; // across 127 -> 128 the sequence number's encoding grows a byte
    const nextSeq = () => ++seq;
    const ops = [...Array.from({ length: 60 }, (_, i) => added(`r${i}`, 10 + (i % 7))), added('huge', 400)];
    ops.splice(30, 0, { kind: 'freed', requestId: 'r3' });
    expect(encodeBatches({ ...base, ops: ops.slice(0, 2) }, 127, nextSeq, 1024)).toHaveLength(1);
    const parts = encodeBatches({ ...base, ops }, 127, nextSeq, 1024);
    expect(parts.length).toBeGreaterThan(5);
    expect(parts.map((p) => p.seq)).toEqual(parts.map((_, i) => 127 + i));
    const sent: SyncOp[] = [];
    for (const p of parts.slice(0, -1)) {
      if (!('bytes' in p)) throw new Error('only the last op is oversized');
      expect(p.bytes.byteLength).toBeLessThanOrEqual(1024);
      const b = decodeBatch(p.bytes);
      expect(b.seq).toBe(p.seq);
      sent.push(...b.ops);
    }
    expect(sent.map((o) => (o.kind === 'added' ? o.booking.requestId : `-${o.kind}`))).toEqual(
      ops.slice(0, -1).map((o) => (o.kind === 'added' ? o.booking.requestId : `-${o.kind}`)),
    );
    const last = parts.at(-1)!;
    expect('oversized' in last && last.oversized).toBe(ops.at(-1));
  });
});
