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
 * Run: node --expose-gc dist/bench/run.js events/handover
 */
import { systemClock } from '../../src/common/index.js';
import {
  BatchPacker,
  decodeKvEventBatch,
  eachPackedBatch,
  EventLiveness,
  ingestContext,
  KvEventApplier,
  KvEventCounters,
  KvEventStream,
  storedLocalHashes,
  TurnScheduler,
} from '../../src/events/index.js';
import type { BenchSection } from '../util.js';
import { eventLoop } from './workload.js';

export const title = "KV events handed over by an ingestion thread: the main thread's work per event";

const env = (name: string, fallback: number): number => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`${name} must be a positive integer`);
  return v;
};

/** Batches queued over all streams before the bench waits a turn (the streams' queues never overflow). */
const MAX_QUEUED = 512;

function setup(engines: number) {
  const loop = eventLoop({ encoding: 'vllm-array' });
  const batches = loop.payloads.map((p) => {
    const r = decodeKvEventBatch(p);
    if (!r.ok) throw new Error('bench workload does not decode');
    const locals = r.batch.events.map((ev) =>
      ev.type === 'stored' && ev.blockHashes.length > 0 ? storedLocalHashes(ev, ev.blockSize) : undefined,
    );
    return { batch: r.batch, locals };
  });
  const applier = new KvEventApplier({ blockSize: loop.blockSize });
  const counters = new KvEventCounters();
  const liveness = new EventLiveness({ clock: systemClock, staleAfterMs: 30_000 });
  const scheduler = new TurnScheduler({ clock: systemClock, maxEventsPerTurn: 2000, maxTurnMs: 4 });
  const ctx = ingestContext({ applier, hooks: counters, liveness, scheduler });
  const streams = Array.from({ length: engines }, (_, i) => {
    const slot = { workerId: i + 1, dpRank: 0 };
    liveness.register(slot);
    return new KvEventStream(slot, ctx);
  });
  // Per engine: its next seq and its place in the workload (a closed loop: the index stays bounded).
  const seqs = new Array<number>(engines).fill(0);
  const at = new Array<number>(engines).fill(0);
  const packer = new BatchPacker();
  let turn = 0;
  /** One buffer as a thread posts it: batches round robin over the engines until it is full; its events. */
  const pack = (): { packed: ReturnType<BatchPacker['take']>; events: number } => {
    let events = 0;
    for (;;) {
      const e = turn % engines;
      const b = batches[at[e]!]!;
      if (!packer.add(e, BigInt(seqs[e]!), b.batch, b.locals)) break;
      turn++;
      seqs[e]!++;
      at[e] = (at[e]! + 1) % batches.length;
      events += b.batch.events.length;
    }
    return { packed: packer.take(), events };
  };
  return { applier, counters, streams, pack };
}

type Setup = ReturnType<typeof setup>;

const nextTurn = (): Promise<void> => new Promise((r) => setImmediate(r));

async function handOver(s: Setup, events: number): Promise<{ ms: number; cpuMs: number; events: number }> {
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
  for (const p of posts) {
    while (queued() > MAX_QUEUED) await nextTurn();
    eachPackedBatch(p.packed, (id, seq, batch) => s.streams[id]!.onDecoded(seq, batch));
    await nextTurn();
  }
  while (queued() > 0 || s.streams.some((st) => st.appliedCursor !== st.cursor)) await nextTurn();
  const cpu = process.cpuUsage(cpu0);
  return { ms: performance.now() - t0, cpuMs: (cpu.user + cpu.system) / 1000, events: packed };
}

export async function run(): Promise<BenchSection> {
  const engines = env('KVGATE_BENCH_HANDOVER_ENGINES', 8);
  const events = env('KVGATE_BENCH_HANDOVER_EVENTS', 2_000_000);
  const s = setup(engines);
  await handOver(s, Math.ceil(events / 10));
  (globalThis as { gc?: () => void }).gc?.();
  const before = s.counters.snapshot();
  const r = await handOver(s, events);
  const after = s.counters.snapshot();
  const drops = Object.values(after.dropped).reduce((a, b) => a + b, 0);
  const gaps = after.gaps - before.gaps;
  s.applier.indexes.dispose();
  return {
    title,
    rows: [
      {
        name: `${engines} engines, ${r.events.toLocaleString('en-US')} events handed over`,
        p50Us: 0,
        p99Us: 0,
        opsPerSec: (r.events / r.ms) * 1000,
        note:
          `ops = events applied per second of wall time; ${((r.cpuMs * 1e6) / r.events).toFixed(0)} ns of ` +
          `process CPU per event; gaps ${gaps}, drops ${drops}`,
      },
    ],
    notes: [
      'Workload: the events/ingest loop (2 blocks stored per event, 1 removed per event, 8 events per batch), ' +
        'packed as an ingestion thread packs it (64 KiB buffers), handed to the streams one buffer per turn.',
    ],
  };
}
