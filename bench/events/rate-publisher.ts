/**
 * The engine side of the end-to-end ingestion bench (e2e.bench.ts), one worker thread simulating
 * `engines` engines: each binds a PUB (an XPUB, to learn when the subscription is live) and a replay
 * ROUTER on loopback. After 'go' it sends the seeded workload's batches round robin over its engines at
 * `eventsPerSec` (in vLLM's framing, each engine its own sequence from 0) for `seconds`, keeping every
 * batch sent for replay, and posts what it sent. Batches are paced by the clock, so a slow subscriber
 * meets the rate an engine fleet would offer rather than a publisher that waits for it.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Router, XPublisher } from 'zeromq';
import { eventLoop, type BenchEncoding } from './workload.js';

export interface RatePublisherConfig {
  engines: number;
  eventsPerSec: number;
  seconds: number;
  encoding: BenchEncoding;
  eventsPerBatch: number;
}

interface Engine {
  readonly pub: XPublisher;
  readonly router: Router;
  /** Every batch sent, by seq (the replay buffer); payloads are shared with the workload. */
  readonly sent: { seq: Buffer; payload: Uint8Array }[];
}

const cfg = workerData as RatePublisherConfig;
const port = parentPort!;
const loop = eventLoop({ encoding: cfg.encoding, eventsPerBatch: cfg.eventsPerBatch });
const EMPTY = Buffer.alloc(0);
const END = Buffer.alloc(8, 0xff);

function seqFrame(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(seq));
  return b;
}

async function replayLoop(e: Engine): Promise<void> {
  try {
    for await (const [id, , start] of e.router) {
      for (let s = Number(start!.readBigUInt64BE(0)); s < e.sent.length; s++)
        await e.router.send([id!, EMPTY, e.sent[s]!.seq, e.sent[s]!.payload]);
      await e.router.send([id!, EMPTY, END, EMPTY]);
    }
  } catch {
    // closed
  }
}

async function main(): Promise<void> {
  const engines: Engine[] = [];
  for (let i = 0; i < cfg.engines; i++) {
    const e: Engine = {
      pub: new XPublisher({ linger: 0, sendHighWaterMark: 1_000_000 }),
      router: new Router({ linger: 0, sendHighWaterMark: 1_000_000 }),
      sent: [],
    };
    await e.pub.bind('tcp://127.0.0.1:*');
    await e.router.bind('tcp://127.0.0.1:*');
    engines.push(e);
  }
  const replays = engines.map(replayLoop);
  port.postMessage({ endpoints: engines.map((e) => ({ pub: e.pub.lastEndpoint, replay: e.router.lastEndpoint })) });
  await Promise.all(engines.map((e) => e.pub.receive())); // every subscription is live
  await new Promise<void>((resolve) => port.once('message', () => resolve()));
  const meanEvents = loop.eventCounts.reduce((a, b) => a + b, 0) / loop.eventCounts.length;
  const batchesPerMs = cfg.eventsPerSec / meanEvents / 1000;
  const started = performance.now();
  const endAt = started + cfg.seconds * 1000;
  let sent = 0;
  let events = 0;
  for (let now = started; now < endAt; now = performance.now()) {
    const due = Math.floor((now - started) * batchesPerMs);
    for (let n = 0; sent < due && n < 4096; n++, sent++) {
      const e = engines[sent % engines.length]!;
      const seq = e.sent.length;
      const i = seq % loop.payloads.length;
      const item = { seq: seqFrame(seq), payload: loop.payloads[i]! };
      e.sent.push(item);
      events += loop.eventCounts[i]!;
      await e.pub.send(['kv-events', item.seq, item.payload]);
    }
    // Replay requests are served between bursts, as an engine's publisher thread does between steps.
    await new Promise((r) => setTimeout(r, sent < due ? 0 : 1));
  }
  const sendMs = performance.now() - started;
  port.postMessage({ sent: engines.map((e) => e.sent.length), events, sendMs });
  await new Promise<void>((resolve) => port.once('message', () => resolve()));
  for (const e of engines) {
    e.pub.close();
    e.router.close();
  }
  await Promise.all(replays);
  port.close();
}

void main();
