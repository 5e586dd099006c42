/**
 * KV-event ingestion throughput: (1) decode + apply in-process, per batch of
 * 8 events, for each wire encoding, against a decode-only baseline; (2) a ZMQ
 * firehose on loopback (publisher in a worker thread, vLLM framing) into a
 * real KvEventSubscriber, in events applied per second.
 * Run: npm run bench -- events
 */
import { Worker } from 'node:worker_threads';
import { decodeKvEventBatch, KvEventApplier, KvEventManager } from '../../src/events/index.js';
import { timeAll, type BenchRow, type BenchSection } from '../util.js';
import { eventLoop, type BenchEncoding, type EventLoop } from './workload.js';

/** The one (worker, dp rank) every bench stream feeds. */
const SLOT = { workerId: 1, dpRank: 0 };

export const title = 'KV-event ingestion: decode + apply, in-process and from a ZMQ firehose';

function meanEvents(loop: EventLoop): number {
  return loop.eventCounts.reduce((a, b) => a + b, 0) / loop.eventCounts.length;
}

/** Applies every batch once and checks the index is empty again (the loop is closed). */
function checkLoop(loop: EventLoop): void {
  const applier = new KvEventApplier({ blockSize: loop.blockSize });
  let applied = 0;
  let events = 0;
  for (const p of loop.payloads) {
    const r = decodeKvEventBatch(p);
    if (!r.ok || r.batch.errors.length > 0) throw new Error('bench workload does not decode');
    applied += applier.applyBatch(SLOT, r.batch);
    events += r.batch.events.length;
  }
  if (applied !== events || applier.indexes.device.size !== 0)
    throw new Error(`bench workload is not a closed loop (${applied}/${events}, ${applier.indexes.device.size} left)`);
  applier.indexes.dispose();
}

async function inProcess(): Promise<{ rows: BenchRow[]; notes: string[] }> {
  const encodings: BenchEncoding[] = ['vllm-array', 'vllm-map', 'sglang-map'];
  const fns: Record<string, () => unknown> = {};
  const perBatch = new Map<string, number>();
  const appliers: KvEventApplier[] = [];
  for (const encoding of encodings) {
    const loop = eventLoop({ encoding });
    checkLoop(loop);
    let i = 0;
    if (encoding === 'vllm-array') {
      let j = 0;
      fns['decode only, vllm-array (baseline)'] = () => decodeKvEventBatch(loop.payloads[j++ % loop.payloads.length]!);
      perBatch.set('decode only, vllm-array (baseline)', meanEvents(loop));
    }
    const applier = new KvEventApplier({ blockSize: loop.blockSize });
    appliers.push(applier);
    const name = `decode + apply, ${encoding}`;
    perBatch.set(name, meanEvents(loop));
    fns[name] = () => {
      const r = decodeKvEventBatch(loop.payloads[i % loop.payloads.length]!);
      i++;
      if (r.ok) applier.applyBatch(SLOT, r.batch);
    };
  }
  const rows = await timeAll(fns);
  for (const a of appliers) a.indexes.dispose();
  const base = rows[0]!;
  for (const r of rows) {
    const ev = perBatch.get(r.name)!;
    const share =
      r.name === 'decode + apply, vllm-array'
        ? `; decoding is ${((base.p50Us / r.p50Us) * 100).toFixed(0)}% of it`
        : '';
    r.note = `${Math.round(r.opsPerSec * ev).toLocaleString('en-US')} events/s (${ev.toFixed(1)} events/batch)${share}`;
  }
  return { rows, notes: [] };
}

async function firehose(batches: number, encoding: BenchEncoding): Promise<{ row: BenchRow; notes: string[] }> {
  const loop = eventLoop({ encoding });
  const eventsPerLoop = loop.eventCounts.reduce((a, b) => a + b, 0);
  const totalEvents =
    Math.floor(batches / loop.payloads.length) * eventsPerLoop +
    loop.eventCounts.slice(0, batches % loop.payloads.length).reduce((a, b) => a + b, 0);
  const worker = new Worker(new URL('./firehose-worker.js', import.meta.url), { workerData: { batches, encoding } });
  const ready = await new Promise<{ endpoint: string; replayEndpoint: string }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  const marks: number[] = [];
  let received = 0;
  const manager = new KvEventManager({
    applier: new KvEventApplier({ blockSize: loop.blockSize }),
    hooks: {
      onBatch: (_slot, origin) => {
        if (origin === 'live' && ++received % 1000 === 0) marks.push(performance.now());
      },
    },
  });
  await manager.add({
    workerId: 1,
    dpRank: 0,
    endpoint: ready.endpoint,
    replayEndpoint: ready.replayEndpoint,
    topic: 'kv-events',
  });
  const stream = manager.subscriber(SLOT)!.stream;
  // The worker waits for the subscription before it accepts 'go'.
  const done = new Promise<{ sendMs: number }>((resolve) => worker.once('message', resolve));
  worker.postMessage('go');
  const start = performance.now();
  const target = BigInt(batches - 1);
  while (stream.cursor !== target || stream.recovering) await new Promise((r) => setImmediate(r));
  const elapsedMs = performance.now() - start;
  const { sendMs } = await done;
  const s = manager.counters.snapshot();
  const applied = Object.values(s.events).reduce((n, byStatus) => n + byStatus.ok + byStatus.not_found, 0);
  worker.postMessage('stop');
  await manager.close();
  manager.indexes.dispose();
  await new Promise((r) => worker.once('exit', r));
  const perBatchUs = marks
    .slice(1)
    .map((t, i) => ((t - marks[i]!) * 1000) / 1000)
    .sort((a, b) => a - b);
  const pct = (q: number): number =>
    perBatchUs[Math.min(perBatchUs.length - 1, Math.floor(q * perBatchUs.length))] ?? 0;
  const eventsPerSec = (applied / elapsedMs) * 1000;
  return {
    row: {
      name: `ZMQ firehose, ${encoding}, ${batches.toLocaleString('en-US')} batches`,
      p50Us: pct(0.5),
      p99Us: pct(0.99),
      opsPerSec: eventsPerSec,
      note: `ops = events applied (${applied.toLocaleString('en-US')} of ${totalEvents.toLocaleString('en-US')}); ${Math.round((batches / elapsedMs) * 1000).toLocaleString('en-US')} batches/s; latency columns are µs per batch over windows of 1,000`,
    },
    notes: [
      `firehose ${encoding}: publisher sent in ${sendMs.toFixed(0)} ms, subscriber done after ${elapsedMs.toFixed(0)} ms; gaps ${s.gaps}, replays ${s.replays.recovered + s.replays.incomplete + s.replays.failed} (replayed batches ${s.replayedBatches}), resets ${Object.values(s.resets).reduce((a, b) => a + b, 0)}, decode errors ${Object.values(s.decodeErrors).reduce((a, b) => a + b, 0)}`,
    ],
  };
}

export async function run(): Promise<BenchSection> {
  const { rows } = await inProcess();
  const fa = await firehose(60_000, 'vllm-array');
  const fm = await firehose(60_000, 'vllm-map');
  return {
    title,
    rows: [...rows, fa.row, fm.row],
    notes: [
      'Workload: 256 interleaved chains of 8 blocks of 16 tokens, stored 2 blocks per event, evicted 1 block per event, 8 events per batch; a closed loop, so the index stays bounded.',
      'Apply = our own XXH3 block hashes of the event tokens (one WASM call) + the WASM prefix index update; stored events cost more than removals.',
      ...fa.notes,
      ...fm.notes,
    ],
  };
}
