/**
 * Messages cut to the bus's max_payload: a turn's ops (every message fits, ops keep their order, sequence
 * numbers run on) and a heartbeat (every message fits and is a heartbeat of its own; together they say all of
 * it; an entry that fits no message, or an envelope that does not, is returned unsent).
 */
import { describe, expect, it } from 'vitest';
import type { SyncedBooking } from '../../src/core/index.js';
import { encodeBatches, encodeHeartbeats } from '../../src/replicas/fit.js';
import type { Echo } from '../../src/replicas/peer-clock.js';
import { decodeBatch, decodeHeartbeat, encodeHeartbeat, type SyncOp } from '../../src/replicas/protocol.js';

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

describe('encodeHeartbeats', () => {
  const seqs = Object.fromEntries(Array.from({ length: 40 }, (_, i) => [`model-${i}/aggregated`, i * 1000]));
  const echoes = new Map<string, Echo>(
    Array.from({ length: 12 }, (_, i) => [
      `kvgate-peer-${i}`,
      { incarnation: `inc${i}`, sentAt: 1234.5 + i, heldMs: 0.25 },
    ]),
  );
  const hb = { routerId: 'a', incarnation: 'i1', sentAt: 99.5, seqs, echoes };

  it('one message when it fits; else several that fit and together say it all', () => {
    const whole = encodeHeartbeat(hb);
    expect(encodeHeartbeats(hb, whole.byteLength)).toEqual({ messages: [whole], unsent: [] });
    expect(encodeHeartbeats(hb, undefined).messages).toHaveLength(1);
    const { messages, unsent } = encodeHeartbeats(hb, 256);
    expect(unsent).toEqual([]);
    expect(messages.length).toBeGreaterThan(4);
    const got = { seqs: {} as Record<string, number>, echoes: new Map<string, Echo>() };
    for (const m of messages) {
      expect(m.byteLength).toBeLessThanOrEqual(256);
      const part = decodeHeartbeat(m);
      expect(part).toMatchObject({ routerId: 'a', incarnation: 'i1', sentAt: 99.5 });
      Object.assign(got.seqs, part.seqs);
      for (const [k, v] of part.echoes) got.echoes.set(k, v);
    }
    expect(got.seqs).toEqual(seqs);
    expect(got.echoes).toEqual(echoes);
  });

  it('an entry that fits no message is returned unsent; an envelope that does not fit sends nothing', () => {
    const long = `${'m'.repeat(300)}/aggregated`;
    const { messages, unsent } = encodeHeartbeats({ ...hb, seqs: { ...seqs, [long]: 7 } }, 256);
    expect(unsent).toEqual([{ entry: 'seq', key: long, bytes: expect.any(Number) }]);
    expect(messages.flatMap((m) => Object.keys(decodeHeartbeat(m).seqs))).toHaveLength(40);
    // Nothing but an oversized entry: the heartbeat still leaves (liveness), without it.
    const lone = encodeHeartbeats({ ...hb, seqs: { [long]: 7 }, echoes: new Map() }, 256);
    expect(lone.messages.map((m) => decodeHeartbeat(m).seqs)).toEqual([{}]);
    const tiny = encodeHeartbeats({ ...hb, routerId: 'r'.repeat(100) }, 64);
    expect(tiny).toEqual({
      messages: [],
      unsent: [{ entry: 'envelope', key: 'r'.repeat(100), bytes: expect.any(Number) }],
    });
  });
});
