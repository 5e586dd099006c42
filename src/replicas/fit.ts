/**
 * Messages cut to the bus's largest (NATS's `max_payload`, which the server refuses a message over, 1 MiB by
 * default and often set lower): a turn's batch of ops and a heartbeat leave as several messages that each fit.
 * What cannot fit even alone is returned, for the caller to count and log. (Snapshots cross in chunks cut to
 * the same bound: transfer.ts.)
 */
import { encode } from '@msgpack/msgpack';
import type { Echo } from './peer-clock.js';
import { encodeBatch, encodeHeartbeat, opArray, type Batch, type Heartbeat, type SyncOp } from './protocol.js';

/** One message of a turn's batch cut to the bus's `max_payload`, or an op too large for any message. */
export type BatchPart =
  | { readonly seq: number; readonly bytes: Uint8Array; readonly ops: number }
  | { readonly seq: number; readonly oversized: SyncOp; readonly opBytes: number };

/** Worst case of a msgpack array header (array32), so that a part's size is known before it is encoded. */
const ARRAY_HEADER_BYTES = 5;

/**
 * A turn's ops as batches of at most `maxBytes` encoded (undefined: unbounded), in op order, each with its
 * own sequence number: `seq` for the first part, then `nextSeq()` for each further one, in order: peers see consecutive batches, as
 * from several turns, and a lost part is a gap that fetches a snapshot. The whole batch is one part when it
 * fits. An op that cannot fit even alone (a prompt of enormous hash lists) is a part of its own that is not
 * sent: its sequence number is skipped, so peers see the gap and take the booking from a snapshot
 * (chunked, so it crosses).
 */
export function encodeBatches(
  b: Omit<Batch, 'seq'>,
  seq: number,
  nextSeq: () => number,
  maxBytes: number | undefined,
): BatchPart[] {
  const whole = encodeBatch({ ...b, seq });
  if (maxBytes === undefined || whole.byteLength <= maxBytes) return [{ seq, bytes: whole, ops: b.ops.length }];
  // The envelope at its largest: the largest sequence number, the largest array header.
  const envelope = encodeBatch({ ...b, seq: Number.MAX_SAFE_INTEGER, ops: [] }).byteLength - 1 + ARRAY_HEADER_BYTES;
  const parts: BatchPart[] = [];
  let pending: SyncOp[] = [];
  let size = envelope;
  let seqOf: number | undefined = seq;
  const take = (): number => {
    const s = seqOf ?? nextSeq();
    seqOf = undefined;
    return s;
  };
  const cut = (): void => {
    if (pending.length === 0) return;
    const s = take();
    parts.push({ seq: s, bytes: encodeBatch({ ...b, seq: s, ops: pending }), ops: pending.length });
    pending = [];
    size = envelope;
  };
  for (const op of b.ops) {
    const opBytes = encode(opArray(op)).byteLength;
    if (envelope + opBytes > maxBytes) {
      cut();
      parts.push({ seq: take(), oversized: op, opBytes });
      continue;
    }
    if (size + opBytes > maxBytes) cut();
    pending.push(op);
    size += opBytes;
  }
  cut();
  return parts;
}

/** A heartbeat's entry that fits no message (a channel key or router id of enormous length), or its envelope alone. */
export interface UnsentHeartbeatEntry {
  readonly entry: 'seq' | 'echo' | 'envelope';
  /** The channel (`seq`), the peer (`echo`) or this replica (`envelope`). */
  readonly key: string;
  readonly bytes: number;
}

/** Worst case of a msgpack map header (map32). */
const MAP_HEADER_BYTES = 5;

/**
 * A heartbeat as messages of at most `maxBytes` encoded (undefined: unbounded): one when it fits, else its
 * per-channel sequences and per-peer echoes spread over several, each a heartbeat of its own (same sender,
 * incarnation and send time: a peer takes each as the whole of what it says). At least one message leaves
 * (a peer's liveness rests on it), unless the envelope alone does not fit: then none, and the envelope is the
 * one unsent entry. An entry that cannot fit even alone is not sent, and returned.
 */
export function encodeHeartbeats(
  h: Heartbeat,
  maxBytes: number | undefined,
): { readonly messages: Uint8Array[]; readonly unsent: UnsentHeartbeatEntry[] } {
  const whole = encodeHeartbeat(h);
  if (maxBytes === undefined || whole.byteLength <= maxBytes) return { messages: [whole], unsent: [] };
  const part = (seqs: Record<string, number>, echoes: Map<string, Echo>): Heartbeat => ({ ...h, seqs, echoes });
  // The envelope at its largest: both maps' headers at their largest (an empty map's is one byte).
  const envelope = encodeHeartbeat(part({}, new Map())).byteLength + 2 * (MAP_HEADER_BYTES - 1);
  if (envelope > maxBytes) return { messages: [], unsent: [{ entry: 'envelope', key: h.routerId, bytes: envelope }] };
  const entries = [
    ...Object.entries(h.seqs).map(([key, seq]) => ({ entry: 'seq' as const, key, value: seq as unknown })),
    ...[...h.echoes].map(([key, x]) => ({ entry: 'echo' as const, key, value: [x.incarnation, x.sentAt, x.heldMs] })),
  ];
  const messages: Uint8Array[] = [];
  const unsent: UnsentHeartbeatEntry[] = [];
  let seqs: Record<string, number> = {};
  let echoes = new Map<string, Echo>();
  let size = envelope;
  const cut = (): void => {
    messages.push(encodeHeartbeat(part(seqs, echoes)));
    seqs = {};
    echoes = new Map();
    size = envelope;
  };
  for (const e of entries) {
    const bytes = encode(e.key).byteLength + encode(e.value).byteLength;
    if (envelope + bytes > maxBytes) {
      unsent.push({ entry: e.entry, key: e.key, bytes });
      continue;
    }
    if (size + bytes > maxBytes) cut();
    if (e.entry === 'seq') seqs[e.key] = h.seqs[e.key]!;
    else echoes.set(e.key, h.echoes.get(e.key)!);
    size += bytes;
  }
  if (size > envelope || messages.length === 0) cut();
  return { messages, unsent };
}
