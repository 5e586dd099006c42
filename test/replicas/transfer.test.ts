/**
 * Chunked snapshot transfers and the warm start over them (issue 15, warm
 * start): chunks reassemble in any order, a missing chunk fails the whole
 * transfer (counted), an oversized one is refused before it is fetched, and
 * a warm start nobody answers starts cold at once (counted).
 */
import { decode as msgpackDecode, encode as msgpackEncode } from '@msgpack/msgpack';
import { describe, expect, it } from 'vitest';
import { ManualClock, seededRng, type KvSlotSnapshot } from '../../src/common/index.js';
import { KvScheduler, type SyncedBooking } from '../../src/core/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { MalformedSync, decodeSnapshot, encodeSnapshot } from '../../src/replicas/protocol.js';
import {
  ChunkAssembler,
  TransferFailed,
  TransferServer,
  decodeChunk,
  encodeChunkRequest,
  fetchTransfer,
} from '../../src/replicas/transfer.js';
import { MemoryBus } from './memory-bus.js';
import { replica } from './test-replica.js';

const KEY = 'mock-model/decode';

function payload(n: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 31 + 7) & 0xff);
}

/** The chunks of one transfer of `bytes` from a server cutting `chunkBytes`. */
function chunksOf(bytes: Uint8Array, chunkBytes: number) {
  const server = new TransferServer('a', chunkBytes, new ManualClock(0));
  const first = decodeChunk(server.open(bytes));
  const rest = Array.from({ length: first.count - 1 }, (_, i) =>
    decodeChunk(server.serve(encodeChunkRequest(first.transfer, i + 1))),
  );
  return { first, rest };
}

function scheduler(): KvScheduler {
  const s = new KvScheduler({ blockSize: 16, clock: new ManualClock(0), rng: seededRng(1) });
  s.addWorker(1);
  s.addWorker(2);
  return s;
}

function booking(requestId: string): SyncedBooking {
  return {
    requestId,
    workerId: 1,
    dpRank: 0,
    seq: BigUint64Array.from([11n, 12n]),
    privateBlocks: 2,
    prefillTokens: 32,
    expectedOutputTokens: undefined,
    prefillCompleted: false,
    outputBlocks: 0,
    decay: undefined,
  };
}

/** A slot of `blocks` blocks (an index far larger than one chunk). */
function slot(workerId: number, blocks: number): KvSlotSnapshot {
  const pairs = new BigUint64Array(blocks * 2).map((_, i) => BigInt(workerId * 1_000_000 + i));
  return {
    workerId,
    dpRank: 0,
    endpoint: `tcp://127.0.0.1:${5550 + workerId}`,
    cursor: 41n,
    tiers: [{ tier: 'device', pairs }],
  };
}

/** The first replica of a fleet (nobody to ask: it answers warm starts), its pool's index `blocks` blocks on worker 1. */
async function source(bus: MemoryBus, id: string, blocks: number, opts: Parameters<typeof replica>[2] = {}) {
  const r = replica(bus, id, opts);
  await r.sync.warmStart([KEY], 5000);
  r.sync.attach(KEY, { kv: scheduler(), workerTypeOf: () => 'aggregated', index: () => [slot(1, blocks)] });
  return r;
}

async function counter(m: KvgateMetrics, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = (await m.registry.getMetricsAsJSON()).find((x) => x.name === name);
  return (metric?.values ?? [])
    .filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l))
    .reduce((n, v) => n + v.value, 0);
}

describe('chunk reassembly', () => {
  it('reassembles chunks that arrive out of order, ignoring duplicates', () => {
    const bytes = payload(10_000);
    const { first, rest } = chunksOf(bytes, 1024);
    expect(first.count).toBe(10);
    const asm = new ChunkAssembler(first, 1 << 20);
    for (const c of [...rest].reverse()) asm.add(c);
    asm.add(rest[3]!);
    expect(asm.complete).toBe(true);
    expect(asm.bytes()).toEqual(bytes);
  });

  it('a missing chunk fails the transfer; an oversized one is refused before any chunk is asked', () => {
    const { first, rest } = chunksOf(payload(5000), 1024);
    const asm = new ChunkAssembler(first, 1 << 20);
    for (const c of rest.filter((c) => c.index !== 2)) asm.add(c);
    expect(asm.missing()).toEqual([2]);
    expect(() => asm.bytes()).toThrow(TransferFailed);
    expect(() => new ChunkAssembler(first, 4096)).toThrow(/exceeds the bound/);
    // A chunk of another transfer does not slip in.
    const other = chunksOf(payload(5000), 1024);
    expect(() => asm.add(other.rest[1]!)).toThrow(/another transfer/);
  });

  it('fetches a transfer chunk by chunk from the server that answered; a lost chunk fails it', async () => {
    const bus = new MemoryBus();
    const server = new TransferServer('a', 1000, new ManualClock(0));
    const bytes = payload(9_500);
    const srv = bus.transport();
    srv.subscribe('first', (_, reply) => reply!(server.open(bytes)));
    srv.subscribe('chunk.a', (data, reply) => reply!(server.serve(data)));
    const client = bus.transport();
    const opts = { maxBytes: 1 << 20, requestTimeoutMs: 200, chunkSubject: (r: string) => `chunk.${r}` };
    const t = await fetchTransfer(client, 'first', new Uint8Array(1), opts);
    expect(t.bytes).toEqual(bytes);
    expect(t.chunks).toBe(10);
    expect(bus.requests.filter((r) => r.subject === 'chunk.a')).toHaveLength(9);

    bus.lose = (subject, data) => subject === 'chunk.a' && decodeChunkIndex(data) === 6;
    await expect(fetchTransfer(client, 'first', new Uint8Array(1), opts)).rejects.toThrow(/chunk 6 of 10/);
  });
});

/** The chunk a chunk request asks for. */
function decodeChunkIndex(data: Uint8Array): number {
  return (msgpackDecode(data) as { k: number }).k;
}

describe('warm start between two replicas', () => {
  it("B takes A's bookings and prefix index in many chunks, and applies the bookings as its pool attaches", async () => {
    const bus = new MemoryBus();
    const a = replica(bus, 'a', { chunkBytes: 2048 });
    await a.sync.warmStart([KEY], 5000); // the first replica: nobody to ask, so its own index is complete
    const kvA = scheduler();
    const slots = [slot(1, 500), slot(2, 300)];
    a.sync.attach(KEY, { kv: kvA, workerTypeOf: () => 'aggregated', index: () => slots });
    kvA.addRequest({ requestId: 'r1', workerId: 2, isl: 64, hashes: null });
    const b = replica(bus, 'b');
    const got = await b.sync.warmStart([KEY], 5000);
    const seeds = got.get(KEY)!;
    expect(seeds.map((s) => [s.workerId, s.cursor, s.tiers[0]!.pairs.length])).toEqual([
      [1, 41n, 1000],
      [2, 41n, 600],
    ]);
    expect(seeds[0]!.tiers[0]!.pairs).toEqual(slots[0]!.tiers[0]!.pairs);
    expect(bus.requests.filter((r) => r.subject.includes('.chunk.')).length).toBeGreaterThan(5);
    expect(
      await counter(b.metrics, 'kvgate_replica_snapshot_transfers_total', { direction: 'warm_start', outcome: 'ok' }),
    ).toBe(1);
    expect(await counter(b.metrics, 'kvgate_replica_snapshot_blocks_received_total')).toBe(800);
    expect(await counter(b.metrics, 'kvgate_replica_snapshot_bytes_total', { direction: 'received' })).toBeGreaterThan(
      800 * 16,
    );
    expect(
      await counter(a.metrics, 'kvgate_replica_snapshot_transfers_total', { direction: 'served', outcome: 'ok' }),
    ).toBe(1);
    // The bookings wait for B's pool, and are A's once it attaches.
    const kvB = scheduler();
    b.sync.attach(KEY, { kv: kvB, workerTypeOf: () => 'aggregated' });
    expect(kvB.peers.requestsOn({ workerId: 2, dpRank: 0 })).toBe(1);
    expect(b.sync.peers()).toEqual(['a']);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it('a lost chunk fails the warm start: counted, and the replica starts cold', async () => {
    const bus = new MemoryBus();
    const a = await source(bus, 'a', 400, { chunkBytes: 1024 });
    const b = replica(bus, 'b');
    bus.lose = (subject, data) => subject.includes('.chunk.') && decodeChunkIndex(data) === 3;
    const got = await b.sync.warmStart([KEY], 5000);
    expect(got.size).toBe(0);
    expect(
      await counter(b.metrics, 'kvgate_replica_snapshot_transfers_total', {
        direction: 'warm_start',
        outcome: 'failed',
      }),
    ).toBe(1);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it('no peer: starts cold at once (no_peer counted); an oversized snapshot is refused (too_large counted)', async () => {
    const bus = new MemoryBus();
    const b = replica(bus, 'b');
    const clock = Date.now();
    expect((await b.sync.warmStart([KEY], 5000)).size).toBe(0);
    expect(Date.now() - clock).toBeLessThan(1000);
    expect(
      await counter(b.metrics, 'kvgate_replica_snapshot_transfers_total', {
        direction: 'warm_start',
        outcome: 'no_peer',
      }),
    ).toBe(1);

    const a = await source(bus, 'a', 5000, { maxSnapshotBytes: 1 << 16 });
    expect((await b.sync.warmStart([KEY], 5000)).size).toBe(0);
    expect(
      await counter(a.metrics, 'kvgate_replica_snapshot_transfers_total', {
        direction: 'served',
        outcome: 'too_large',
      }),
    ).toBe(1);
    expect(
      await counter(b.metrics, 'kvgate_replica_snapshot_transfers_total', {
        direction: 'warm_start',
        outcome: 'failed',
      }),
    ).toBe(1);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it("chunks shrink to fit the bus's max_payload when snapshot_chunk_bytes is larger", async () => {
    const bus = new MemoryBus();
    bus.maxPayload = 1500;
    const a = await source(bus, 'a', 800, { chunkBytes: 1 << 20 });
    const b = replica(bus, 'b');
    const got = await b.sync.warmStart([KEY], 5000);
    expect(got.get(KEY)![0]!.tiers[0]!.pairs.length).toBe(1600);
    // The first chunk answers the request; the index alone (16 bytes a block) needs 9 of at most 1500 bytes.
    const chunks = 1 + bus.requests.filter((r) => r.subject.includes('.chunk.')).length;
    expect(chunks).toBeGreaterThanOrEqual(Math.ceil((800 * 16) / 1500));
    expect(await counter(a.metrics, 'kvgate_replica_sync_messages_dropped_total')).toBe(0);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it("a max_payload below a chunk's envelope refuses the snapshot at once: counted, logged once, short refusal", async () => {
    const bus = new MemoryBus();
    bus.maxPayload = 64; // a chunk's envelope alone (ids, transfer, counts) is about 80 bytes
    const lines: Record<string, unknown>[] = [];
    const a = await source(bus, 'a', 10, { lines });
    const b = replica(bus, 'b');
    for (let i = 0; i < 2; i++) expect((await b.sync.warmStart([KEY], 5000)).size).toBe(0);
    const refused = { direction: 'served', outcome: 'too_large' };
    expect(await counter(a.metrics, 'kvgate_replica_snapshot_transfers_total', refused)).toBe(2);
    expect(await counter(a.metrics, 'kvgate_replica_sync_messages_dropped_total')).toBe(0);
    const failed = { direction: 'warm_start', outcome: 'failed' };
    expect(await counter(b.metrics, 'kvgate_replica_snapshot_transfers_total', failed)).toBe(2);
    expect(lines.filter((l) => String(l['msg']).includes('snapshots are not served'))).toEqual([
      expect.objectContaining({ level: 50, maxPayload: 64 }),
    ]);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it('an answer the bus refuses is counted and logged, never thrown into the bus client', async () => {
    const bus = new MemoryBus();
    bus.maxPayload = 1500;
    bus.announced = false; // the bound is enforced but not known: the first chunk is cut at 1 MiB
    const a = await source(bus, 'a', 800, { chunkBytes: 1 << 20 });
    const b = replica(bus, 'b');
    expect((await b.sync.warmStart([KEY], 300)).size).toBe(0);
    const failed = { direction: 'in', reason: 'apply_failed' };
    expect(await counter(a.metrics, 'kvgate_replica_sync_messages_dropped_total', failed)).toBe(1);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it('only a replica with a complete index answers warm starts: the first, or one warm from a peer; not one started cold beside them', async () => {
    const bus = new MemoryBus();
    // C started cold (warm start off) beside A: it knows only what the engines' buffers gave it.
    const c = replica(bus, 'c');
    c.sync.attach(KEY, { kv: scheduler(), workerTypeOf: () => 'aggregated', index: () => [slot(1, 3)] });
    const b = replica(bus, 'b');
    expect((await b.sync.warmStart([KEY], 5000)).size).toBe(0); // C does not answer: nobody does
    // A, the first with warm start on, answers; so does D, warm from A; C never does.
    const a = replica(bus, 'a');
    await a.sync.warmStart([KEY], 5000);
    a.sync.attach(KEY, { kv: scheduler(), workerTypeOf: () => 'aggregated', index: () => [slot(1, 40)] });
    const d = replica(bus, 'd');
    for (let i = 0; i < 3; i++)
      expect((await d.sync.warmStart([KEY], 5000)).get(KEY)![0]!.tiers[0]!.pairs.length).toBe(80);
    d.sync.attach(KEY, { kv: scheduler(), workerTypeOf: () => 'aggregated', index: () => [slot(1, 40)] });
    expect(await counter(c.metrics, 'kvgate_replica_snapshot_transfers_total', { direction: 'served' })).toBe(0);
    await Promise.all([a.sync.close(), b.sync.close(), c.sync.close(), d.sync.close()]);
  });

  it('a snapshot with index slots survives the wire format', () => {
    const s = { routerId: 'a', incarnation: 'i', seq: 3, bookings: [booking('r1')], sessions: [], slots: [slot(3, 2)] };
    const back = decodeSnapshot(encodeSnapshot(s));
    expect(back.slots).toEqual(s.slots);
    expect(back.bookings[0]!.seq).toEqual(booking('r1').seq);
  });

  it("a slot's salted blocks cross with it, in order, and a slot without them decodes without", () => {
    const salts = [
      { salt: 'tenant-a', hashes: new BigUint64Array([11n, 12n, 2n ** 64n - 1n]) },
      { salt: 'tenant-b', hashes: new BigUint64Array([21n]) },
      { salt: 'tenant-a', hashes: new BigUint64Array([31n]) },
    ];
    const slots = [{ ...slot(3, 2), salts }, slot(4, 1)];
    const back = decodeSnapshot(
      encodeSnapshot({ routerId: 'a', incarnation: 'i', seq: 3, bookings: [], sessions: [], slots }),
    );
    expect(back.slots).toEqual(slots);
    expect(back.slots![1]!.salts).toBeUndefined();
  });

  /** A hybrid model's groups of a slot: the primary's spec alone, a window group's and a Mamba group's blocks. */
  const groups = [
    { groupIdx: 0, kind: 'full_attention', pairs: new BigUint64Array(0) },
    {
      groupIdx: 1,
      kind: 'sliding_window',
      slidingWindow: 128,
      pairs: new BigUint64Array([5n, 6n, 2n ** 64n - 1n, 8n]),
    },
    { groupIdx: 7, kind: 'mamba', pairs: new BigUint64Array([9n, 10n]) },
  ];

  it("a hybrid model's KV-cache groups cross with a slot, with or without its salts; a slot without them decodes without", () => {
    const salts = [{ salt: 'tenant-a', hashes: new BigUint64Array([11n]) }];
    const slots = [{ ...slot(3, 2), groups }, { ...slot(5, 1), salts, groups }, slot(4, 1)];
    const bytes = encodeSnapshot({ routerId: 'a', incarnation: 'i', seq: 3, bookings: [], sessions: [], slots });
    const back = decodeSnapshot(bytes);
    expect(back.slots).toEqual(slots);
    expect(back.slots![0]!.salts).toBeUndefined();
    expect(back.slots![2]!.groups).toBeUndefined();
    // A replica that predates them reads a slot's first five items (the salts' release, six): unchanged, the
    // salts' place null when there are none.
    const k = (msgpackDecode(bytes) as { k: unknown[][] }).k;
    expect(k.map((a) => a.length)).toEqual([7, 7, 5]);
    expect(k[0]![5]).toBeNull();
  });

  it("a warm start carries a slot's KV-cache groups through the chunked transfer", async () => {
    const bus = new MemoryBus();
    const a = replica(bus, 'a', { chunkBytes: 4096 });
    await a.sync.warmStart([KEY], 5000);
    const hybrid = { ...slot(1, 2000), groups };
    a.sync.attach(KEY, { kv: scheduler(), workerTypeOf: () => 'aggregated', index: () => [hybrid] });
    const b = replica(bus, 'b');
    expect((await b.sync.warmStart([KEY], 5000)).get(KEY)).toEqual([hybrid]);
    // Counted with the primary's 2,000: the window group's two blocks and the Mamba group's one.
    expect(await counter(b.metrics, 'kvgate_replica_snapshot_blocks_received_total')).toBe(2003);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it("a slot's KV-cache groups count against max_snapshot_bytes", async () => {
    const bus = new MemoryBus();
    const a = replica(bus, 'a', { maxSnapshotBytes: 1 << 16 });
    await a.sync.warmStart([KEY], 5000);
    // 2,000 blocks, 32 KB: within the bound; with a group of 4,000 more, 96 KB: past it.
    let index: KvSlotSnapshot[] = [slot(1, 2000)];
    a.sync.attach(KEY, { kv: scheduler(), workerTypeOf: () => 'aggregated', index: () => index });
    const b = replica(bus, 'b');
    expect((await b.sync.warmStart([KEY], 5000)).size).toBe(1);
    index = [{ ...slot(1, 2000), groups: [{ groupIdx: 1, kind: 'mamba', pairs: new BigUint64Array(8000) }] }];
    expect((await b.sync.warmStart([KEY], 5000)).size).toBe(0);
    const refused = { direction: 'served', outcome: 'too_large' };
    expect(await counter(a.metrics, 'kvgate_replica_snapshot_transfers_total', refused)).toBe(1);
    await Promise.all([a.sync.close(), b.sync.close()]);
  });

  it.each([
    ['not an array', 'x'],
    ['a group not an array', [1]],
    ['a negative group index', [[-1, 'mamba', null, new Uint8Array(16)]]],
    ['an empty kind', [[1, '', null, new Uint8Array(16)]]],
    ['a window not a count', [[1, 'sliding_window', 1.5, new Uint8Array(16)]]],
    ['pairs of an odd number of hashes', [[1, 'mamba', null, new Uint8Array(8)]]],
  ])("a slot's groups that are %s are refused whole", (_case, value) => {
    const k = [[1, 0, 'tcp://127.0.0.1:5551', '41', [], null, value]];
    expect(() => decodeSnapshot(msgpackEncode({ r: 'a', i: 'i', s: 3, b: [], x: [], k }))).toThrow(MalformedSync);
  });
});
