/**
 * `kv_events.max_batch_elements` reaches ingestion, on the main thread and on an ingestion thread (which decodes
 * with the same bound): a batch of more msgpack elements than it allows is refused unread (`too_large`, none of
 * its blocks indexed), one within it is applied. The default bound (1,048,576) takes both.
 */
import { describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import type { TestEvent } from '../../helpers/zmq-publisher.js';
import { publishedGateways, suiteProcesses } from './procs.js';

const MODEL = 'bounds-model';
const BS = 16;
/** 64 blocks: 1,024 tokens and 64 hashes, more elements than a bound of 1,024. */
const LARGE = Array.from({ length: 64 * BS + 1 }, (_, i) => 1000 + i);
/** 4 blocks: well within it. */
const SMALL = Array.from({ length: 4 * BS + 1 }, (_, i) => 9000 + i);

function stored(tokens: number[], hashBase: number): TestEvent {
  const blocks = Math.floor(tokens.length / BS);
  const blockHashes = Array.from({ length: blocks }, (_, i) => BigInt(hashBase + i));
  return { type: 'stored', blockHashes, parent: null, tokens: tokens.slice(0, blocks * BS), blockSize: BS };
}

describe('kv_events.max_batch_elements', () => {
  const gateway = publishedGateways(suiteProcesses('kvgate-kv-bounds-'), MODEL, BS);

  for (const threads of [0, 1]) {
    it(`refuses a batch past it unread, and applies one within it (ingest_threads ${threads})`, async () => {
      const { url, pub, overlap } = await gateway({ ingest_threads: threads, max_batch_elements: 1024 });
      await pub.publish([stored(LARGE, 100)]);
      await pub.publish([stored(SMALL, 900)]);
      await until(async () => (await overlap(SMALL)) === 4, "the small batch's blocks indexed");
      expect(await overlap(LARGE)).toBe(0);
      expect(await metric(url, 'kvgate_kv_event_decode_errors_total', { kind: 'too_large' })).toBe(1);
    }, 60_000);
  }
});
