/**
 * The main thread's share of threaded ingestion, alone: what an ingestion thread posts (the seeded
 * workload's batches, decoded, hashed and packed into 64 KiB buffers round robin over the engines) is
 * handed to each engine's `KvEventStream` as the pool does (`eachPackedBatch`, `onDecoded`) and applied
 * by the manager's `TurnScheduler` (2,000 events / 4 ms a turn), with counters and liveness as in a
 * manager. The packing is done before the clock starts, so the figures are the main thread's work per
 * event: judging, the hand-over, the turn scheduler, the counters and the prefix index's apply. No
 * sockets, no threads: on a machine where the ingestion threads are the cap (fewer cores than threads
 * need), this shows what the main thread could take.
 *
 * Sizes (environment): KVGATE_BENCH_HANDOVER_ENGINES (8), KVGATE_BENCH_HANDOVER_EVENTS (2,000,000 timed,
 * after a warm-up of a tenth of them).
 * Salted traffic: KVGATE_BENCH_HANDOVER_SALTED=<percent> adds a row where that share of the workload's chains
 * carry a tenant's `cache_salt` as vLLM reports it (in block 0's `extra_keys` of the chain's root event only,
 * the later events inheriting it: src/events/salt-memory.ts), the same tokens and hashes otherwise, hashed as
 * the layer's ingestion thread hashes them (its `BatchHasher`, inferring the salts; a layer without one,
 * unsalted). Every event must apply `ok`, and since a salted chain hashed without its salt would still apply,
 * a salted row first hands the loop's stores over to one stream and checks every chain matches under its salt.
 * Per event: the main thread's CPU (Linux; the process's elsewhere) and the process's (V8's helper threads too).
 * Base: with `KVG_BENCH_BASE` naming another built checkout, its dist/ events layer runs the same rows in the
 * same process, before this tree's.
 * Run: [KVG_BENCH_BASE=<built checkout>] [KVGATE_BENCH_HANDOVER_SALTED=80] node --expose-gc dist/bench/run.js
 * events/handover
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { systemClock } from '../../src/common/index.js';
import * as thisTree from '../../src/events/index.js';
import type { KvEventBatch, StoredBlocksEvent } from '../../src/events/index.js';
import { blockHashes } from '../../src/wasm/index.js';
import type { BenchRow, BenchSection } from '../util.js';
import { eventLoop, type EventLoop } from './workload.js';

export const title = "KV events handed over by an ingestion thread: the main thread's work per event";

/** The events layer a row runs: this tree's, or a base checkout's dist/ (the same public names). */
type EventsLayer = typeof thisTree;

const env = (name: string, fallback: number): number => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`${name} must be a positive integer`);
  return v;
};

/** Batches queued over all streams before the bench waits a turn (the streams' queues never overflow). */
const MAX_QUEUED = 512;

/**
 * The workload decoded, with the hashes an ingestion thread of the layer computes: its `BatchHasher` (with the
 * salts it infers) where it has one, else unsalted hashes (a layer before it). One stream's batches in order:
 * the thread's inference follows the chains as the loop stores and removes them.
 */
function threadBatches(ev: EventsLayer, loop: EventLoop) {
  const hasher = (ev as Partial<EventsLayer>).BatchHasher === undefined ? undefined : new ev.BatchHasher();
  return loop.payloads.map((p) => {
    const r = ev.decodeKvEventBatch(p);
    if (!r.ok) throw new Error('bench workload does not decode');
    if (hasher !== undefined) return { batch: r.batch, ...hasher.hash(0, r.batch) };
    const locals = r.batch.events.map((e) =>
      e.type === 'stored' && e.blockHashes.length > 0 ? ev.storedLocalHashes(e, e.blockSize) : undefined,
    );
    return { batch: r.batch, locals, salts: [] };
  });
}

function setup(ev: EventsLayer, loop: EventLoop, engines: number) {
  const batches = threadBatches(ev, loop);
  const applier = new ev.KvEventApplier({ blockSize: loop.blockSize });
  const counters = new ev.KvEventCounters();
  const liveness = new ev.EventLiveness({ clock: systemClock, staleAfterMs: 30_000 });
  const scheduler = new ev.TurnScheduler({ clock: systemClock, maxEventsPerTurn: 2000, maxTurnMs: 4 });
  const ctx = ev.ingestContext({ applier, hooks: counters, liveness, scheduler });
  const streams = Array.from({ length: engines }, (_, i) => {
    const slot = { workerId: i + 1, dpRank: 0 };
    liveness.register(slot);
    return new ev.KvEventStream(slot, ctx);
  });
  // Per engine: its next seq and its place in the workload (a closed loop: the index stays bounded).
  const seqs = new Array<number>(engines).fill(0);
  const at = new Array<number>(engines).fill(0);
  const packer = new ev.BatchPacker();
  let turn = 0;
  /** One buffer as a thread posts it: batches round robin over the engines until it is full; its events. */
  const pack = (): { packed: ReturnType<thisTree.BatchPacker['take']>; events: number } => {
    let events = 0;
    for (;;) {
      const e = turn % engines;
      const b = batches[at[e]!]!;
      if (!packer.add(e, BigInt(seqs[e]!), b.batch, b.locals, b.salts)) break;
      turn++;
      seqs[e]!++;
      at[e] = (at[e]! + 1) % batches.length;
      events += b.batch.events.length;
    }
    return { packed: packer.take(), events };
  };
  return { ev, applier, counters, streams, pack };
}

type Setup = ReturnType<typeof setup>;

const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

/**
 * CPU time of the main thread alone, ms (Linux: its /proc task's utime + stime, 10 ms ticks): the process's
 * also counts V8's helper threads (concurrent marking, parallel scavenges). Undefined elsewhere.
 */
function mainThreadCpuMs(): number | undefined {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / 100; // fields 14 and 15, in USER_HZ (100)
  } catch {
    return undefined;
  }
}

interface HandOver {
  ms: number;
  cpuMs: number;
  mainCpuMs: number | undefined;
  events: number;
}

async function handOver(s: Setup, events: number): Promise<HandOver> {
  const posts: ReturnType<Setup['pack']>[] = [];
  let packed = 0;
  while (packed < events) {
    const p = s.pack();
    posts.push(p);
    packed += p.events;
  }
  const queued = (): number => s.streams.reduce((n, st) => n + st.pendingCount, 0);
  const t0 = performance.now();
  const cpu0 = process.cpuUsage();
  const main0 = mainThreadCpuMs();
  for (const p of posts) {
    while (queued() > MAX_QUEUED) await nextTurn();
    s.ev.eachPackedBatch(p.packed, (id, seq, batch) => s.streams[id]!.onDecoded(seq, batch));
    await nextTurn();
  }
  while (queued() > 0 || s.streams.some((st) => st.appliedCursor !== st.cursor)) await nextTurn();
  const cpu = process.cpuUsage(cpu0);
  const main1 = mainThreadCpuMs();
  const mainCpuMs = main0 === undefined || main1 === undefined ? undefined : main1 - main0;
  return { ms: performance.now() - t0, cpuMs: (cpu.user + cpu.system) / 1000, mainCpuMs, events: packed };
}

/**
 * The loop's stores (its first half) handed over to one stream; then every chain must match its full length
 * under its own salt, and a salted one none unsalted: the layer indexed the salted chains as vLLM stored them.
 */
async function checkSalts(ev: EventsLayer, loop: EventLoop): Promise<void> {
  const applier = new ev.KvEventApplier({ blockSize: loop.blockSize });
  const stream = new ev.KvEventStream({ workerId: 1, dpRank: 0 }, ev.ingestContext({ applier }));
  const all = threadBatches(ev, loop);
  const stores = all.slice(
    0,
    all.findIndex((b) => b.batch.events.some((e) => e.type === 'removed')),
  );
  const packer = new ev.BatchPacker();
  const post = (): void => ev.eachPackedBatch(packer.take(), (_id, seq, batch) => stream.onDecoded(seq, batch));
  stores.forEach((b, seq) => {
    if (packer.add(0, BigInt(seq), b.batch, b.locals, b.salts)) return;
    post();
    packer.add(0, BigInt(seq), b.batch, b.locals, b.salts);
  });
  post();
  while (stream.appliedCursor !== BigInt(stores.length - 1)) await nextTurn();
  for (const c of chainsOf(stores.map((b) => b.batch))) {
    const depth = (salt?: string): number => {
      const m = applier.indexes.device.findMatches(blockHashes(c.tokens, loop.blockSize, { cacheSalt: salt }));
      return m.count === 0 ? 0 : m.depths[0]!;
    };
    const blocks = c.tokens.length / loop.blockSize;
    if (depth(c.salt) !== blocks || (c.salt !== undefined && depth() !== 0))
      throw new Error(`a ${c.salt === undefined ? 'plain' : 'salted'} chain is not indexed under its salt`);
  }
  applier.indexes.dispose();
}

/** Each chain of the stores: its tokens in order and its root event's salt (the only extra key string). */
function chainsOf(batches: readonly KvEventBatch[]): { tokens: number[]; salt: string | undefined }[] {
  const byLast = new Map<bigint, { tokens: number[]; salt: string | undefined }>();
  const all: { tokens: number[]; salt: string | undefined }[] = [];
  for (const b of batches)
    for (const e of b.events) {
      if (e.type !== 'stored') continue;
      const st: StoredBlocksEvent = e;
      let c = st.parentHash === null ? undefined : byLast.get(st.parentHash);
      if (c === undefined) all.push((c = { tokens: [], salt: st.extraKeyStrings?.[0] }));
      else byLast.delete(st.parentHash!);
      c.tokens.push(...st.tokenIds);
      byLast.set(st.blockHashes[st.blockHashes.length - 1]!, c);
    }
  return all;
}

interface Row extends HandOver {
  layer: string;
  salted: number;
  /** Events not applied `ok`, dropped batches and gaps: 0, or the bench (or the layer) is broken. */
  bad: number;
}

async function measure(ev: EventsLayer, layer: string, salted: number, engines: number, events: number) {
  const loop = eventLoop({ encoding: 'vllm-array', saltedShare: salted / 100 });
  if (salted > 0) await checkSalts(ev, loop);
  const s = setup(ev, loop, engines);
  await handOver(s, Math.ceil(events / 10));
  (globalThis as { gc?: () => void }).gc?.();
  const before = s.counters.snapshot();
  const r = await handOver(s, events);
  const after = s.counters.snapshot();
  let bad = after.gaps - before.gaps;
  for (const n of Object.values(after.dropped)) bad += n;
  for (const byStatus of Object.values(after.events))
    for (const [status, n] of Object.entries(byStatus)) if (status !== 'ok') bad += n;
  s.applier.indexes.dispose();
  return { ...r, layer, salted, bad } satisfies Row;
}

/** The main thread's CPU per event, ns (the process's where the main thread's cannot be read). */
const mainNs = (r: Row): number => ((r.mainCpuMs ?? r.cpuMs) * 1e6) / r.events;

function toRow(r: Row, engines: number, unsalted: Row | undefined): BenchRow {
  const vs = unsalted === undefined ? '' : ` (${(mainNs(r) / mainNs(unsalted)).toFixed(2)}x the unsalted row's)`;
  const main = r.mainCpuMs === undefined ? 'process' : 'main-thread';
  return {
    name:
      `${r.layer}: ${engines} engines, ${r.events.toLocaleString('en-US')} events handed over, ` +
      (r.salted === 0 ? 'unsalted' : `${r.salted}% of chains salted`),
    p50Us: 0,
    p99Us: 0,
    opsPerSec: (r.events / r.ms) * 1000,
    note:
      `ops = events applied per second of wall time; ${mainNs(r).toFixed(0)} ns of ${main} CPU per event${vs}, ` +
      `${((r.cpuMs * 1e6) / r.events).toFixed(0)} of process CPU; ${r.bad} not ok`,
  };
}

export async function run(): Promise<BenchSection> {
  const engines = env('KVGATE_BENCH_HANDOVER_ENGINES', 8);
  const events = env('KVGATE_BENCH_HANDOVER_EVENTS', 2_000_000);
  const salted = process.env.KVGATE_BENCH_HANDOVER_SALTED === undefined ? 0 : env('KVGATE_BENCH_HANDOVER_SALTED', 0);
  if (salted > 100) throw new Error('KVGATE_BENCH_HANDOVER_SALTED is a percent');
  const baseDir = process.env.KVG_BENCH_BASE;
  const layers: [string, EventsLayer][] = [];
  if (baseDir !== undefined && baseDir !== '')
    layers.push(['base', (await import(resolve(baseDir, 'dist/src/events/index.js'))) as EventsLayer]);
  layers.push(['this tree', thisTree]);
  const rows: BenchRow[] = [];
  for (const [name, ev] of layers) {
    const plain = await measure(ev, name, 0, engines, events);
    rows.push(toRow(plain, engines, undefined));
    if (salted > 0) rows.push(toRow(await measure(ev, name, salted, engines, events), engines, plain));
  }
  if (rows.some((r) => !r.note!.endsWith('; 0 not ok'))) throw new Error('some events were not applied ok');
  return {
    title,
    rows,
    notes: [
      'Workload: the events/ingest loop (2 blocks stored per event, 1 removed per event, 8 events per batch), ' +
        'packed as an ingestion thread packs it (64 KiB buffers), handed to the streams one buffer per turn.',
    ],
  };
}
