/**
 * The publisher side of the ZMQ firehose bench, run in a worker thread so it
 * does not share the event loop with the subscriber being measured. Binds a
 * PUB (an XPUB, to learn when the subscription is live) and a replay ROUTER on
 * loopback, posts their endpoints, waits for 'go', sends `batches` messages
 * in vLLM's framing as fast as the socket takes them, and posts 'done'.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { Router, XPublisher } from 'zeromq';
import { eventLoop, type BenchEncoding } from './workload.js';

interface FirehoseConfig {
  batches: number;
  encoding: BenchEncoding;
  /** Events per batch (the workload's default, 8, when absent). */
  eventsPerBatch?: number;
}

const cfg = workerData as FirehoseConfig;
const port = parentPort!;
const loop = eventLoop({ encoding: cfg.encoding, eventsPerBatch: cfg.eventsPerBatch });
const pub = new XPublisher({ linger: 0, sendHighWaterMark: 1_000_000 });
// A replay reply larger than the default HWM (1,000) would be cut short by ROUTER's drop-when-full.
const router = new Router({ linger: 0, sendHighWaterMark: 1_000_000 });
const EMPTY = Buffer.alloc(0);
const END = Buffer.alloc(8, 0xff);
const buffer: { seq: Buffer; payload: Uint8Array }[] = [];

function seqFrame(seq: number): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigUInt64BE(BigInt(seq));
  return b;
}

async function replayLoop(): Promise<void> {
  try {
    for await (const [id, , start] of router) {
      const from = Number(start!.readBigUInt64BE(0));
      for (let s = from; s < buffer.length; s++) await router.send([id!, EMPTY, buffer[s]!.seq, buffer[s]!.payload]);
      await router.send([id!, EMPTY, END, EMPTY]);
    }
  } catch {
    // closed
  }
}

async function main(): Promise<void> {
  await pub.bind('tcp://127.0.0.1:*');
  await router.bind('tcp://127.0.0.1:*');
  const replaying = replayLoop();
  port.postMessage({ type: 'ready', endpoint: pub.lastEndpoint, replayEndpoint: router.lastEndpoint });
  await pub.receive(); // the subscription
  await new Promise<void>((resolve) => port.once('message', () => resolve()));
  const started = performance.now();
  for (let i = 0; i < cfg.batches; i++) {
    const payload = loop.payloads[i % loop.payloads.length]!;
    const seq = seqFrame(i);
    buffer.push({ seq, payload });
    await pub.send(['kv-events', seq, payload]);
    // Sends resolve at once while the socket takes them: yield now and then so replay requests are served
    // during the burst, as an engine's publisher thread does between batches.
    if (i % 512 === 511) await new Promise((r) => setImmediate(r));
  }
  port.postMessage({ type: 'done', sendMs: performance.now() - started });
  await new Promise<void>((resolve) => port.once('message', () => resolve()));
  pub.close();
  router.close();
  await replaying;
  port.close();
}

void main();
