/**
 * KV-event batches for the events suites: a batch as the decoder makes it from the test events' wire bytes, and a
 * slot's batches applied through a `KvEventStream` as the gateway applies them (as objects, or handed over as an
 * ingestion thread packs them), every deferred turn run.
 */
import { expect } from 'vitest';
import { ManualClock, type WorkerRank } from '../../src/common/index.js';
import {
  decodeKvEventBatch,
  ingestContext,
  KvEventCounters,
  KvEventStream,
  type KvEventApplier,
  type KvEventBatch,
} from '../../src/events/index.js';
import { BatchPacker } from '../../src/events/batch-codec.js';
import { eachPackedBatch } from '../../src/events/packed-batch.js';
import { TurnScheduler } from '../../src/events/turn-scheduler.js';
import { encodeBatch, type EventEncoding, type TestEvent } from './zmq-publisher.js';

/** The decoded batch of `events` sent in `encoding`; throws what the decoder refuses. */
export function decodedBatch(events: TestEvent[], encoding: EventEncoding = 'vllm-array'): KvEventBatch {
  const r = decodeKvEventBatch(encodeBatch(events, { encoding }));
  if (!r.ok) throw new Error(r.error.message);
  return r.batch;
}

/** What an ingestion thread packs with a batch: each event's stored hashes (or none) and the salts it hashed with. */
export type ThreadHashes = (batch: KvEventBatch) => {
  readonly locals: readonly (BigUint64Array | undefined)[];
  readonly salts?: readonly (string | undefined)[];
};

/**
 * Applies `batches` (sequence numbers 0, 1, ...) to `applier` through the stream of `slot`: as objects, or, with
 * `handOver`, packed with the hashes it gives as an ingestion thread packs them and read back from the transferred
 * bytes. Checks that every batch was applied.
 */
export function applyThroughStream(
  applier: KvEventApplier,
  slot: WorkerRank,
  batches: readonly KvEventBatch[],
  handOver?: ThreadHashes,
): void {
  const clock = new ManualClock();
  const turns: (() => void)[] = [];
  const scheduler = new TurnScheduler({ clock, maxEventsPerTurn: 64, maxTurnMs: 1000, defer: (f) => turns.push(f) });
  const stream = new KvEventStream(slot, ingestContext({ applier, hooks: new KvEventCounters(), clock, scheduler }));
  if (handOver !== undefined) {
    const packer = new BatchPacker(1 << 16);
    batches.forEach((b, seq) => {
      const h = handOver(b);
      packer.add(1, BigInt(seq), b, h.locals, h.salts);
    });
    eachPackedBatch(structuredClone(packer.take()), (_id, s, b) => stream.onDecoded(s, b));
  } else batches.forEach((b, seq) => stream.onDecoded(BigInt(seq), b));
  for (let f = turns.shift(); f !== undefined; f = turns.shift()) f();
  expect(stream.appliedCursor).toBe(BigInt(batches.length - 1));
}
