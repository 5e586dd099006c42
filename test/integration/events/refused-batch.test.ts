/**
 * A batch holding an event that does not decode, over real sockets: `kvgate serve` subscribed to an engine's KV
 * events on ZMQ receives a batch whose good events are followed by one that does not decode. None of its stored
 * blocks is indexed (the router's query endpoint predicts no overlap for their prompt), the refusal is counted
 * (`kvgate_kv_event_dropped_total{reason="refused"}`), and the engine's next batch is applied as usual. Its
 * removals are applied: the blocks the engine evicted are no longer predicted
 * (`kvgate_kv_event_refused_removals_applied_total`). On the main thread and on an ingestion thread (the batch
 * handed over packed). An event naming a negative KV-cache group (`group_idx`, an index from 0 in every engine) is
 * such an event. An event of a kind kvgate does not know (a newer engine's) is not: it is skipped and counted
 * (`kvgate_kv_events_applied_total{event_type="unknown",status="skipped"}`), the rest of its batch applied.
 *
 * One gateway per ingest_threads setting serves every case: each case has a model of its own (its own prefix
 * index, worker and publisher), and reads the counters as they moved during it.
 */
import { decode, encode } from '@msgpack/msgpack';
import { beforeAll, describe, expect, it } from 'vitest';
import { countersFrom } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { encodeBatch, type TestEvent } from '../../helpers/zmq-publisher.js';
import { publishedModels, suiteProcesses, type PublishedGateway } from './procs.js';

const MODEL = 'refusal-model';
const BS = 16;
const BLOCKS = 4;
const prompt = (base: number): number[] => Array.from({ length: BLOCKS * BS + 1 }, (_, i) => base + i);
const REFUSED = prompt(1000);
const NEXT = prompt(5000);

/** The engine's BlockStored of a prompt's BLOCKS blocks, as two events (the second chained under the first). */
function storedEvents(tokens: number[], hashBase: number): TestEvent[] {
  const half = (BLOCKS / 2) * BS;
  const hashes = (from: number): bigint[] => [BigInt(hashBase + from), BigInt(hashBase + from + 1)];
  return [
    { type: 'stored', blockHashes: hashes(0), parent: null, tokens: tokens.slice(0, half), blockSize: BS },
    {
      type: 'stored',
      blockHashes: hashes(2),
      parent: BigInt(hashBase + 1),
      tokens: tokens.slice(half, 2 * half),
      blockSize: BS,
    },
  ];
}

/** `events` (by default the two of REFUSED's blocks), then `last`: by default a BlockStored whose hashes are no list. */
function refusedBatch(
  events: TestEvent[] = storedEvents(REFUSED, 100),
  last: unknown = ['BlockStored', 7, null, [1, 2], BS],
): Uint8Array {
  const [ts, evs, rank] = decode(encodeBatch(events), { useBigInt64: true }) as unknown[];
  return encode([ts, [...(evs as unknown[]), last], rank], { useBigInt64: true });
}

/** `ev` as its engine would send it in KV-cache group `groupIdx`. */
const inGroup = (ev: TestEvent, groupIdx: number): TestEvent => (ev.type === 'cleared' ? ev : { ...ev, groupIdx });

/** The cases, each with a model of its own in the shared gateway. */
const CASES = ['none-indexed', 'unknown-kind', 'removals', 'negative-group'] as const;

describe('a KV-event batch with a bad last event', () => {
  const gateways = publishedModels(
    suiteProcesses('kvgate-refused-'),
    CASES.map((c) => `${MODEL}-${c}`),
    BS,
  );

  describe.each([0, 1])('ingest_threads %i', (threads) => {
    let models: PublishedGateway[] = [];
    beforeAll(async () => {
      models = await gateways({ ingest_threads: threads });
    });
    /** The case's model in the gateway, and the counters from the case's start. */
    const gateway = async (c: (typeof CASES)[number]) => {
      const g = models[CASES.indexOf(c)]!;
      return { ...g, metric: await countersFrom(g.url) };
    };

    it('leaves none of its blocks in the index', async () => {
      const { pub, overlap, metric } = await gateway('none-indexed');
      await pub.publishPayload(refusedBatch());
      // The next batch is applied: once its blocks are matched, the one before was handled too.
      await pub.publish(storedEvents(NEXT, 900));
      await until(async () => (await overlap(NEXT)) === BLOCKS, "the next batch's blocks indexed");
      expect(await overlap(REFUSED)).toBe(0);
      expect(await metric('kvgate_kv_event_dropped_total', { reason: 'refused' })).toBe(1);
      expect(await metric('kvgate_kv_event_decode_errors_total', { kind: 'bad_event' })).toBe(1);
      expect(await metric('kvgate_kv_event_refused_removals_applied_total')).toBe(0);
    }, 60_000);

    it('has an event of a kind kvgate does not know skipped, its stores applied', async () => {
      const { pub, overlap, metric } = await gateway('unknown-kind');
      await pub.publishPayload(refusedBatch(storedEvents(REFUSED, 100), { type: 'BlockMoved', block_hashes: [7] }));
      await pub.publish(storedEvents(NEXT, 900));
      await until(async () => (await overlap(NEXT)) === BLOCKS, "the next batch's blocks indexed");
      expect(await overlap(REFUSED)).toBe(BLOCKS);
      expect(await metric('kvgate_kv_events_applied_total', { event_type: 'unknown', status: 'skipped' })).toBe(1);
      expect(await metric('kvgate_kv_event_dropped_total', { reason: 'refused' })).toBe(0);
      expect(await metric('kvgate_kv_event_decode_errors_total')).toBe(0);
    }, 60_000);

    it('still removes the blocks it evicts, its stores refused', async () => {
      const { pub, overlap, metric } = await gateway('removals');
      const kept = prompt(9000);
      await pub.publish(storedEvents(kept, 300));
      await until(async () => (await overlap(kept)) === BLOCKS, "the first batch's blocks indexed");
      // The engine evicts kept's last two blocks (its hashes 302, 303) and stores REFUSED's in the same step.
      await pub.publishPayload(
        refusedBatch([{ type: 'removed', blockHashes: [302n, 303n] }, ...storedEvents(REFUSED, 100)]),
      );
      await pub.publish(storedEvents(NEXT, 900));
      await until(async () => (await overlap(NEXT)) === BLOCKS, "the next batch's blocks indexed");
      expect(await overlap(kept)).toBe(BLOCKS / 2);
      expect(await overlap(REFUSED)).toBe(0);
      expect(await metric('kvgate_kv_event_dropped_total', { reason: 'refused' })).toBe(1);
      expect(await metric('kvgate_kv_event_refused_removals_applied_total')).toBe(1);
    }, 60_000);

    it('is refused when an event names a negative KV-cache group', async () => {
      const { pub, overlap, metric } = await gateway('negative-group');
      const [first, second] = storedEvents(REFUSED, 100);
      // vLLM's group_idx is an index from 0: -1 is no engine's group, and the batch is refused as a bad event.
      await pub.publish([first!, inGroup(second!, -1)]);
      await pub.publish(storedEvents(NEXT, 900));
      await until(async () => (await overlap(NEXT)) === BLOCKS, "the next batch's blocks indexed");
      expect(await overlap(REFUSED)).toBe(0);
      expect(await metric('kvgate_kv_event_dropped_total', { reason: 'refused' })).toBe(1);
      expect(await metric('kvgate_kv_event_decode_errors_total', { kind: 'bad_event' })).toBe(1);
    }, 60_000);
  });
});
