/**
 * One run of the flood scenario of flood-lag.bench.ts, in a process of its
 * own: `node flood-scenario.js <dist root>` loads src/events from that
 * build and prints the outcome as one JSON line.
 */
import { createServer, type Server } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { pathToFileURL } from 'node:url';
import type { WorkerRank } from '../../src/common/index.js';
import { eventLoop } from './workload.js';

/** About 400,000 events in engine-step batches of 512 (a burst of large prefills). */
const EVENTS_PER_BATCH = 512;
const BATCHES = 782;
/** The one (worker, dp rank) the flood feeds. */
const SLOT: WorkerRank = { workerId: 1, dpRank: 0 };

/** Long enough for the publisher thread to send every batch (it reports its send time; checked below). */
const HOLD_MS = 4000;

/** The parts of src/events both builds share. */
interface EventsModule {
  KvEventApplier: new (o: { blockSize: number }) => { indexes: { dispose(): void } };
  KvEventManager: new (o: { applier: unknown }) => {
    add(s: WorkerRank & { endpoint: string; replayEndpoint?: string; topic?: string }): Promise<void>;
    /** A (worker, dp rank) pair; builds before `WorkerRank` took the worker id alone (rank 0). */
    subscriber(slot: WorkerRank | number): { stream: { cursor: bigint | null; recovering: boolean } } | undefined;
    counters: {
      snapshot(): {
        gaps: number;
        replays: Record<string, number>;
        resets: Record<string, number>;
        dropped?: Record<string, number>;
      };
    };
    close(): Promise<void>;
  };
}

export interface FloodOutcome {
  lagP99Ms: number;
  lagMaxMs: number;
  http: { p50: number; p99: number; max: number; n: number };
  ingestMs: number;
  notes: string;
}

function pct(sorted: number[], q: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

async function startFirehose(): Promise<{ worker: Worker; endpoint: string; replayEndpoint: string }> {
  const worker = new Worker(new URL('./firehose-worker.js', import.meta.url), {
    workerData: { batches: BATCHES, encoding: 'vllm-array', eventsPerBatch: EVENTS_PER_BATCH },
  });
  const ready = await new Promise<{ endpoint: string; replayEndpoint: string }>((resolve, reject) => {
    worker.once('message', resolve);
    worker.once('error', reject);
  });
  return { worker, ...ready };
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const addr = server.address() as { port: number };
  return `http://127.0.0.1:${addr.port}/health`;
}

async function scenario(mod: EventsModule): Promise<FloodOutcome> {
  const loop = eventLoop({ encoding: 'vllm-array', eventsPerBatch: EVENTS_PER_BATCH });
  let totalEvents = 0;
  for (let i = 0; i < BATCHES; i++) totalEvents += loop.eventCounts[i % loop.eventCounts.length]!;
  const fire = await startFirehose();
  const applier = new mod.KvEventApplier({ blockSize: loop.blockSize });
  const manager = new mod.KvEventManager({ applier });
  // The "routing" the server does per request: a read of the shared index (another worker's view).
  // Either build's lookup: this one takes the pair, a build before WorkerRank the worker id (each misses the other's form).
  const subscriber = (): ReturnType<typeof manager.subscriber> =>
    manager.subscriber(SLOT) ?? manager.subscriber(SLOT.workerId);
  const server = createServer((_req, res) => res.end(String(subscriber()?.stream.cursor ?? -1)));
  const url = await listen(server);
  const prober = new Worker(new URL('./http-prober.js', import.meta.url), { workerData: { url, intervalMs: 5 } });
  await manager.add({ ...SLOT, endpoint: fire.endpoint, replayEndpoint: fire.replayEndpoint, topic: 'kv-events' });
  const stream = subscriber()!.stream;
  const lag = monitorEventLoopDelay({ resolution: 1 });
  const done = new Promise<{ sendMs: number }>((resolve) => fire.worker.once('message', resolve));
  // The burst: the publisher sends everything while this thread is held, so all of it waits in the
  // SUB socket's queue (ZMQ's I/O thread keeps receiving) when ingestion starts, every run alike.
  fire.worker.postMessage('go');
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, HOLD_MS);
  prober.postMessage('start');
  lag.enable();
  const start = performance.now();
  const target = BigInt(BATCHES - 1);
  while (stream.cursor !== target || stream.recovering) await new Promise((r) => setTimeout(r, 1));
  const ingestMs = performance.now() - start;
  // A loop blocked for the whole flood records its delay only when the sampling timer runs again.
  await new Promise((r) => setTimeout(r, 50));
  lag.disable();
  const { sendMs } = await done;
  if (sendMs > HOLD_MS)
    throw new Error(
      `the publisher took ${sendMs.toFixed(0)} ms, longer than the ${HOLD_MS} ms hold: the burst was not fully queued`,
    );
  const latencies = await new Promise<number[]>((resolve) => {
    prober.once('message', resolve);
    prober.postMessage('stop');
  });
  const s = manager.counters.snapshot();
  fire.worker.postMessage('stop');
  await manager.close();
  applier.indexes.dispose();
  server.close();
  await new Promise((r) => fire.worker.once('exit', r));
  const sorted = latencies.sort((a, b) => a - b);
  return {
    lagP99Ms: lag.percentile(99) / 1e6,
    lagMaxMs: lag.max / 1e6,
    http: { p50: pct(sorted, 0.5), p99: pct(sorted, 0.99), max: sorted.at(-1) ?? 0, n: sorted.length },
    ingestMs,
    notes:
      `${totalEvents.toLocaleString('en-US')} events applied in ${ingestMs.toFixed(0)} ms; gaps ${s.gaps}, replays ${Object.values(s.replays).reduce((a, b) => a + b, 0)}, ` +
      `resets ${JSON.stringify(Object.fromEntries(Object.entries(s.resets).filter(([, v]) => v > 0)))}, queue drops ${s.dropped?.queue_full ?? 'n/a'}`,
  };
}

async function main(): Promise<void> {
  const distRoot = process.argv[2]!;
  const mod = (await import(pathToFileURL(`${distRoot}/src/events/index.js`).href)) as EventsModule;
  const outcome = await scenario(mod);
  process.stdout.write(`${JSON.stringify(outcome)}\n`);
  process.exit(0);
}

void main();
