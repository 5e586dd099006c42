/**
 * `kv_events` bounds reach ingestion. `max_batch_elements`, on the main thread and on an ingestion thread (which
 * decodes with the same bound): a batch of more msgpack elements than it allows is refused unread (`too_large`,
 * none of its blocks indexed), one within it is applied. The default bound (1,048,576) takes both.
 * `max_kv_groups`: an engine naming more KV-cache groups than it allows has those groups refused, counted.
 */
import { encode } from '@msgpack/msgpack';
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

describe('kv_events bounds in a gateway', () => {
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

  it('max_kv_groups: groups past it are refused, counted, and get no index', async () => {
    const { url, pub } = await gateway({ max_kv_groups: 2 });
    // A sliding-window group's BlockStored of one block (vLLM's positional form, through kv_cache_spec_*).
    const groupEvent = (g: number): unknown[] => {
      const tokens = Array.from({ length: BS }, (_, i) => 100 * g + i);
      return ['BlockStored', [7000 + g], null, tokens, BS, null, 'GPU', null, null, g, 'sliding_window', 64];
    };
    await pub.publishPayload(encode([1.5, [1, 2, 3].map(groupEvent), 0]));
    const refusals = (): Promise<number> => metric(url, 'kvgate_kv_cache_group_refusals_total', { model: MODEL });
    await until(async () => (await refusals()) === 2, 'the events of groups 2 and 3 refused');
    expect(await metric(url, 'kvgate_kv_cache_group_changes_total', { group: '1' })).toBe(1);
    expect(await metric(url, 'kvgate_kv_cache_group_changes_total', { group: '2' })).toBe(0);
    expect(await metric(url, 'kvgate_kv_cache_group_changes_total', { group: '3' })).toBe(0);
  }, 60_000);
});
