/**
 * A gateway in front of a large fleet subscribes to one publisher per (worker, dp rank). ZMQ's context holds
 * 1,023 sockets by default, one table for the whole process (its threads share it): the 1,024th subscription
 * was refused with "Too many open file descriptors", and that slot, and every one after it, never saw an
 * event. Here 1,100 slots subscribe over real TCP, on the main thread and on ingestion threads, all to one
 * test publisher (so each of its batches reaches every slot), and the last slot's index follows it.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { blockHashes } from '../../src/wasm/index.js';
import { ManualClock } from '../../src/common/index.js';
import { KvEventApplier, KvEventManager } from '../../src/events/index.js';
import { TestKvPublisher } from '../helpers/zmq-publisher.js';
import { until } from '../helpers/until.js';

const BS = 4;
const SLOTS = 1_100;
const TOKENS = [1, 2, 3, 4, 5, 6, 7, 8];

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length > 0) await cleanups.pop()!();
});

describe('subscriptions past ZMQ default socket table', () => {
  for (const ingestThreads of [0, 2]) {
    it(`${SLOTS} slots subscribe and each follows its publisher (ingestion threads: ${ingestThreads})`, async () => {
      const pub = await TestKvPublisher.start({ topic: '' });
      const manager = new KvEventManager({
        applier: new KvEventApplier({ blockSize: BS }),
        clock: new ManualClock(),
        staleAfterMs: 1000,
        ingestThreads,
      });
      cleanups.push(async () => {
        await manager.close();
        await pub.close();
        manager.indexes.dispose();
      });
      // Worker ids 1..SLOTS, every one on the same publisher: a refused subscription throws here.
      for (let id = 1; id <= SLOTS; id++) await manager.add({ workerId: id, dpRank: 0, endpoint: pub.endpoint });
      expect(manager.sources()).toHaveLength(SLOTS);

      const ix = manager.indexes.device;
      const holders = (): number => ix.findMatches(blockHashes(TOKENS, BS)).count;
      // ZMQ's slow joiner: publish until the last slot to connect has a batch, then every slot holds the prompt.
      const hashes = [1n << 62n, (1n << 62n) + 1n];
      for (let i = 0; holders() < SLOTS; i++) {
        if (i > 100) throw new Error(`only ${holders()} of ${SLOTS} slots hold the prompt`);
        await pub.publish([{ type: 'stored', blockHashes: hashes, parent: null, tokens: TOKENS, blockSize: BS }]);
        await until(() => holders() === SLOTS, 'every slot', 200).catch(() => undefined);
      }
      const last = ix.findSlot(SLOTS, 0);
      const m = ix.findMatches(blockHashes(TOKENS, BS));
      expect([...m.slots.subarray(0, m.count)]).toContain(last);
      expect(manager.eventStatus(SLOTS)).toBe('live');
    }, 120_000);
  }
});
