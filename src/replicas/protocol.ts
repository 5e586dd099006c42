/**
 * The replica sync wire format: msgpack messages on NATS subjects (or the
 * cluster IPC channel, which carries the same bytes).
 *
 *   <prefix>.ops.<channel>   a batch of one replica's bookkeeping changes for one
 *                            channel (a model's pool), one per event-loop turn:
 *                            { r: router id, i: incarnation, s: batch sequence, t: sent at (ms), o: ops,
 *                              z: the channel's KV block size (absent from a replica that predates it: not checked) }
 *   <prefix>.hb              a heartbeat: { r, i, t, s: { channel: last batch sequence },
 *                            e: { router: [its incarnation, its last heartbeat's t, held (ms)] } }
 *                            (e, the echoes that measure lag without comparing clocks: peer-clock.ts;
 *                            absent from a replica that predates them)
 *   <prefix>.snap.<router>   request/reply: { c: channel, x: with the prefix index } -> a snapshot
 *                            { r, i, s, b: bookings, x: sessions, k: index slots, z: block size } (chunked: transfer.ts);
 *                            a slot [worker, rank, endpoint, cursor, [[tier, pairs]...], [[salt, hashes]...]?,
 *                            [[group, kind, window, pairs]...]?]: its salted blocks (absent, or null before groups,
 *                            when none) and a hybrid model's KV-cache groups (absent for a one-group model); each
 *                            absent from a replica that predates it, which reads only the items it knows
 *   <prefix>.warm.<channel>  the same request, answered by one replica of the queue group (warm start)
 *   <prefix>.chunk.<router>  request/reply: a snapshot's next chunk (transfer.ts)
 *
 * Ops are arrays, kind first: [0, booking...] added, [1, id] prefill completed,
 * [2, id, outputBlocks, decay|null] output progress (an absolute count, so a
 * repeat is harmless), [3, id] freed, [4, session, workerId, dpRank, ttlMs]
 * a sticky-session binding. Sequence hashes travel as the little-endian bytes
 * of their u64s. Every decoder validates and throws `MalformedSync` rather
 * than apply half a message.
 */
import { decode, encode } from '@msgpack/msgpack';
import type { KvGroupSnapshot, KvSlotSnapshot, SaltRun, WorkerRank } from '../common/index.js';
import type { SyncedBooking } from '../core/index.js';
import type { Echo } from './peer-clock.js';

/** Most output blocks one booking may claim (guards the apply loop against a corrupt count). */
const MAX_OUTPUT_BLOCKS = 1 << 20;

export class MalformedSync extends Error {}

/** A sticky-session binding a replica made: first live binding wins on its peers. */
export interface SharedSession extends WorkerRank {
  readonly session: string;
  readonly ttlMs: number;
}

export type SyncOp =
  | { readonly kind: 'added'; readonly booking: SyncedBooking }
  | { readonly kind: 'prefill'; readonly requestId: string }
  | {
      readonly kind: 'output';
      readonly requestId: string;
      readonly outputBlocks: number;
      readonly decay: number | undefined;
    }
  | { readonly kind: 'freed'; readonly requestId: string }
  | { readonly kind: 'session'; readonly binding: SharedSession };

export interface Batch {
  readonly routerId: string;
  readonly incarnation: string;
  readonly seq: number;
  readonly sentAt: number;
  readonly ops: readonly SyncOp[];
  /** The channel's KV block size at the sender: its hashes mean nothing under another (undefined: not said). */
  readonly blockSize?: number | undefined;
}

export interface Heartbeat {
  readonly routerId: string;
  readonly incarnation: string;
  readonly sentAt: number;
  /** Last batch sequence published per channel. */
  readonly seqs: Readonly<Record<string, number>>;
  /** Per peer router id, the echo of the last heartbeat heard from it. */
  readonly echoes: ReadonlyMap<string, Echo>;
}

export interface Snapshot {
  readonly routerId: string;
  readonly incarnation: string;
  /** The channel's last batch sequence the snapshot includes. */
  readonly seq: number;
  readonly bookings: readonly SyncedBooking[];
  readonly sessions: readonly SharedSession[];
  /** The prefix index with its KV-event cursors, when asked for (a warm start). */
  readonly slots?: readonly KvSlotSnapshot[] | undefined;
  /** The channel's KV block size at the sender (undefined: a replica that predates it). */
  readonly blockSize?: number | undefined;
}

/** NATS subject tokens cannot hold `.`, `*`, `>` or whitespace: other characters are escaped as `~hex~`. */
function subjectToken(s: string): string {
  return s.replace(/[^A-Za-z0-9_-]/g, (c) => `~${c.codePointAt(0)!.toString(16)}~`);
}

export function opsSubject(prefix: string, channel: string): string {
  return `${prefix}.ops.${subjectToken(channel)}`;
}

export function snapshotSubject(prefix: string, routerId: string): string {
  return `${prefix}.snap.${subjectToken(routerId)}`;
}

/** Every replica serving `channel` listens here in one queue group: one of them answers a warm start. */
export function warmStartSubject(prefix: string, channel: string): string {
  return `${prefix}.warm.${subjectToken(channel)}`;
}

export function chunkSubject(prefix: string, routerId: string): string {
  return `${prefix}.chunk.${subjectToken(routerId)}`;
}

export function heartbeatSubject(prefix: string): string {
  return `${prefix}.hb`;
}

function bookingArray(b: SyncedBooking): unknown[] {
  const seq = b.seq === null ? null : new Uint8Array(b.seq.buffer, b.seq.byteOffset, b.seq.byteLength);
  return [
    b.requestId,
    b.workerId,
    b.dpRank,
    seq,
    b.privateBlocks,
    b.prefillTokens,
    b.expectedOutputTokens ?? null,
    b.prefillCompleted,
    b.outputBlocks,
    b.decay ?? null,
  ];
}

export function opArray(op: SyncOp): unknown[] {
  switch (op.kind) {
    case 'added':
      return [0, ...bookingArray(op.booking)];
    case 'prefill':
      return [1, op.requestId];
    case 'output':
      return [2, op.requestId, op.outputBlocks, op.decay ?? null];
    case 'freed':
      return [3, op.requestId];
    // Whole milliseconds on the wire (the decoder takes nothing else): a live binding's remaining TTL
    // is measured on a fractional clock; rounded up, so a binding live here is live on arrival.
    case 'session':
      return [4, op.binding.session, op.binding.workerId, op.binding.dpRank, Math.ceil(op.binding.ttlMs)];
  }
}

export function encodeBatch(b: Batch): Uint8Array {
  const m: Record<string, unknown> = { r: b.routerId, i: b.incarnation, s: b.seq, t: b.sentAt, o: b.ops.map(opArray) };
  if (b.blockSize !== undefined) m.z = b.blockSize;
  return encode(m);
}

export function encodeHeartbeat(h: Heartbeat): Uint8Array {
  const e = Object.create(null) as Record<string, unknown[]>;
  for (const [router, x] of h.echoes) e[router] = [x.incarnation, x.sentAt, x.heldMs];
  return encode({ r: h.routerId, i: h.incarnation, t: h.sentAt, s: h.seqs, e });
}

function u64Bytes(a: BigUint64Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

function slotArray(s: KvSlotSnapshot): unknown[] {
  const out: unknown[] = [
    s.workerId,
    s.dpRank,
    s.endpoint,
    String(s.cursor),
    s.tiers.map((t) => [t.tier, u64Bytes(t.pairs)]),
  ];
  const salts = s.salts?.length ? s.salts.map((r) => [r.salt, u64Bytes(r.hashes)]) : null;
  const groups = s.groups?.length
    ? s.groups.map((g) => [g.groupIdx, g.kind, g.slidingWindow ?? null, u64Bytes(g.pairs)])
    : null;
  if (salts !== null || groups !== null) out.push(salts);
  if (groups !== null) out.push(groups);
  return out;
}

export function encodeSnapshot(s: Snapshot): Uint8Array {
  return encode({
    r: s.routerId,
    i: s.incarnation,
    s: s.seq,
    b: s.bookings.map(bookingArray),
    x: s.sessions.map((x) => opArray({ kind: 'session', binding: x }).slice(1)),
    k: (s.slots ?? []).map(slotArray),
    ...(s.blockSize === undefined ? {} : { z: s.blockSize }),
  });
}

export function encodeSnapshotRequest(channel: string, withIndex: boolean): Uint8Array {
  return encode({ c: channel, x: withIndex });
}

// ---------------------------------------------------------------- decoding

function fail(what: string): never {
  throw new MalformedSync(what);
}

function obj(bytes: Uint8Array): Record<string, unknown> {
  let v: unknown;
  try {
    v = decode(bytes);
  } catch (err) {
    fail(`not msgpack: ${(err as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail('not a map');
  return v as Record<string, unknown>;
}

function str(v: unknown, what: string): string {
  if (typeof v !== 'string' || v.length === 0 || v.length > 1024) fail(`${what} must be a non-empty string`);
  return v;
}

function count(v: unknown, what: string, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max)
    fail(`${what} must be an integer in [0, ${max}]`);
  return v;
}

function num(v: unknown, what: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) fail(`${what} must be a finite number >= 0`);
  return v;
}

function optNum(v: unknown, what: string): number | undefined {
  return v === null || v === undefined ? undefined : num(v, what);
}

/** u64s from their little-endian bytes, `multiple` of them at a time. */
function u64s(v: unknown, what: string, multiple = 1): BigUint64Array {
  if (!(v instanceof Uint8Array) || v.byteLength % (8 * multiple) !== 0)
    fail(`${what} must be bytes, a multiple of ${8 * multiple} long`);
  // Copied: the decoded bytes are a view into the message (a Node Buffer's slice shares it), maybe unaligned for u64s.
  const copy = new Uint8Array(v.byteLength);
  copy.set(v);
  return new BigUint64Array(copy.buffer);
}

function seqHashes(v: unknown): BigUint64Array | null {
  if (v === null) return null;
  const h = u64s(v, 'seq');
  return h.length === 0 ? null : h;
}

function slot(v: unknown): KvSlotSnapshot {
  if (!Array.isArray(v) || !Array.isArray(v[4])) fail('an index slot must be [worker, rank, endpoint, cursor, tiers]');
  const cursor = v[3];
  if (typeof cursor !== 'string' || !/^\d{1,20}$/.test(cursor) || BigInt(cursor) >= 1n << 64n)
    fail("an index slot's cursor must be a u64 in decimal");
  const tiers = (v[4] as unknown[]).map((t) =>
    Array.isArray(t)
      ? { tier: str(t[0], 'tier'), pairs: u64s(t[1], 'pairs', 2) }
      : fail('a tier must be [name, pairs]'),
  );
  const salts = saltRuns(v[5]);
  const groups = kvGroups(v[6]);
  return {
    workerId: count(v[0], 'workerId'),
    dpRank: count(v[1], 'dpRank', 0xffff),
    endpoint: str(v[2], 'endpoint'),
    cursor: BigInt(cursor),
    tiers,
    ...(salts === undefined ? {} : { salts }),
    ...(groups === undefined ? {} : { groups }),
  };
}

/** A slot's KV-cache groups (a hybrid model's); undefined when absent. */
function kvGroups(v: unknown): KvGroupSnapshot[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) fail("an index slot's groups must be an array of [group, kind, window, pairs]");
  return v.map((g) => {
    if (!Array.isArray(g)) fail('a KV-cache group must be [group, kind, window, pairs]');
    const window = g[2] === null || g[2] === undefined ? undefined : count(g[2], 'slidingWindow');
    return {
      groupIdx: count(g[0], 'groupIdx'),
      kind: str(g[1], 'kind'),
      ...(window === undefined ? {} : { slidingWindow: window }),
      pairs: u64s(g[3], 'group pairs', 2),
    };
  });
}

/**
 * A slot's salted blocks; undefined when absent. A salt is any non-empty string: a client's, with no bound of its
 * own (not `str`'s 1,024 characters), the snapshot's `max_snapshot_bytes` bounding it.
 */
function saltRuns(v: unknown): SaltRun[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) fail("an index slot's salts must be an array of [salt, hashes]");
  return v.map((r) =>
    Array.isArray(r) && typeof r[0] === 'string' && r[0].length > 0
      ? { salt: r[0], hashes: u64s(r[1], 'salted hashes') }
      : fail('a salt run must be [salt, hashes]'),
  );
}

function booking(a: unknown[], at: number): SyncedBooking {
  const decay = optNum(a[at + 9], 'decay');
  if (decay !== undefined && decay > 1) fail('decay must be in [0, 1]');
  const completed = a[at + 7];
  if (typeof completed !== 'boolean') fail('prefillCompleted must be a boolean');
  return {
    requestId: str(a[at], 'requestId'),
    workerId: count(a[at + 1], 'workerId'),
    dpRank: count(a[at + 2], 'dpRank'),
    seq: seqHashes(a[at + 3]),
    privateBlocks: count(a[at + 4], 'privateBlocks'),
    prefillTokens: num(a[at + 5], 'prefillTokens'),
    expectedOutputTokens: optNum(a[at + 6], 'expectedOutputTokens'),
    prefillCompleted: completed,
    outputBlocks: count(a[at + 8], 'outputBlocks', MAX_OUTPUT_BLOCKS),
    decay,
  };
}

function session(a: unknown[], at: number): SharedSession {
  return {
    session: str(a[at], 'session'),
    workerId: count(a[at + 1], 'workerId'),
    dpRank: count(a[at + 2], 'dpRank'),
    ttlMs: count(a[at + 3], 'ttlMs'),
  };
}

function op(v: unknown): SyncOp {
  if (!Array.isArray(v)) fail('an op must be an array');
  switch (v[0]) {
    case 0:
      return { kind: 'added', booking: booking(v, 1) };
    case 1:
      return { kind: 'prefill', requestId: str(v[1], 'requestId') };
    case 2: {
      const decay = optNum(v[3], 'decay');
      if (decay !== undefined && decay > 1) fail('decay must be in [0, 1]');
      return {
        kind: 'output',
        requestId: str(v[1], 'requestId'),
        outputBlocks: count(v[2], 'outputBlocks', MAX_OUTPUT_BLOCKS),
        decay,
      };
    }
    case 3:
      return { kind: 'freed', requestId: str(v[1], 'requestId') };
    case 4:
      return { kind: 'session', binding: session(v, 1) };
    default:
      return fail(`unknown op kind ${String(v[0])}`);
  }
}

/** A message's block size, undefined when absent (a replica that predates it). */
function blockSizeOf(v: unknown): number | undefined {
  if (v === undefined || v === null) return undefined;
  const n = count(v, 'z', 1 << 20);
  return n === 0 ? fail('z must be a block size >= 1') : n;
}

/** @throws MalformedSync */
export function decodeBatch(bytes: Uint8Array): Batch {
  const m = obj(bytes);
  if (!Array.isArray(m.o)) fail('o must be an array of ops');
  return {
    routerId: str(m.r, 'r'),
    incarnation: str(m.i, 'i'),
    seq: count(m.s, 's'),
    sentAt: num(m.t, 't'),
    ops: m.o.map(op),
    blockSize: blockSizeOf(m.z),
  };
}

/** @throws MalformedSync */
export function decodeHeartbeat(bytes: Uint8Array): Heartbeat {
  const m = obj(bytes);
  const seqs: Record<string, number> = {};
  if (typeof m.s !== 'object' || m.s === null || Array.isArray(m.s)) fail('s must be a map');
  for (const [k, v] of Object.entries(m.s)) seqs[k] = count(v, `s.${k}`);
  return { routerId: str(m.r, 'r'), incarnation: str(m.i, 'i'), sentAt: num(m.t, 't'), seqs, echoes: echoes(m.e) };
}

/** A heartbeat's echoes; none from a replica that predates them. */
function echoes(v: unknown): Map<string, Echo> {
  const out = new Map<string, Echo>();
  if (v === undefined) return out;
  if (typeof v !== 'object' || v === null || Array.isArray(v)) fail('e must be a map');
  for (const [router, x] of Object.entries(v)) {
    if (!Array.isArray(x)) fail(`e.${router} must be [incarnation, sentAt, heldMs]`);
    out.set(router, {
      incarnation: str(x[0], `e.${router}[0]`),
      sentAt: num(x[1], `e.${router}[1]`),
      heldMs: num(x[2], `e.${router}[2]`),
    });
  }
  return out;
}

/** @throws MalformedSync */
export function decodeSnapshot(bytes: Uint8Array): Snapshot {
  const m = obj(bytes);
  if (!Array.isArray(m.b) || !Array.isArray(m.x) || !Array.isArray(m.k)) fail('b, x and k must be arrays');
  return {
    routerId: str(m.r, 'r'),
    incarnation: str(m.i, 'i'),
    seq: count(m.s, 's'),
    bookings: m.b.map((a) => (Array.isArray(a) ? booking(a, 0) : fail('a booking must be an array'))),
    sessions: m.x.map((a) => (Array.isArray(a) ? session(a, 0) : fail('a session must be an array'))),
    slots: m.k.map(slot),
    blockSize: blockSizeOf(m.z),
  };
}

/** @throws MalformedSync */
export function decodeSnapshotRequest(bytes: Uint8Array): { readonly channel: string; readonly withIndex: boolean } {
  const m = obj(bytes);
  return { channel: str(m.c, 'c'), withIndex: m.x === true };
}

/** A channel key is `model/role`; the model may itself hold slashes. */
export function channelKey(model: string, role: string): string {
  return `${model}/${role}`;
}
