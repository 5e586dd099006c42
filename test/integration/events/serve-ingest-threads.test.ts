/**
 * `kv_events.ingest_threads` through `kvgate serve` as an operator runs it: two mocker engines publish KV
 * events over ZMQ with replay buffers; the gateway receives and decodes them on two ingestion threads (its
 * startup log says so). The index follows both engines (both live, every prompt matched in full), and a
 * batch an engine drops on the wire is found as a gap and recovered from its replay buffer (counted in
 * `kvgate_kv_event_gaps_total` and `kvgate_kv_event_replays_total`), every prompt then matched again.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { json, promptTraffic, startEngine, startGateway, suiteProcesses, workerOf } from './procs.js';

const BLOCK = 16;
const PROMPT_BLOCKS = 4;
const ENGINE_ARGS = ['--kv-events-replay-port', '0', '--num-gpu-blocks', '200000'];

describe('KV events on ingestion threads through kvgate serve', () => {
  const procs = suiteProcesses('kvgate-ingest-threads-');

  it('follows both engines and recovers a dropped batch from the replay buffer', async () => {
    const engines = [
      await startEngine(procs, ['--seed', '7', ...ENGINE_ARGS]),
      await startEngine(procs, ['--seed', '8', ...ENGINE_ARGS]),
    ];
    const model = String(engines[0]!.model);
    const url = await startGateway(
      procs,
      { name: model, block_size: BLOCK, workers: engines.map((e, i) => workerOf(i + 1, e)) },
      { kv_events: { ingest_threads: 2 } },
    );
    const started = procs.gateway!.lines.map(json).find((o) => o?.msg === 'KV-event ingestion on 2 thread(s)');
    expect(started).toMatchObject({ threads: 2 });

    const { prompts, complete, overlap } = promptTraffic(url, model, {
      blocks: PROMPT_BLOCKS,
      blockSize: BLOCK,
      rng: seededRng(28),
    });
    const allMatched = async (): Promise<boolean> => {
      for (const p of prompts) if ((await overlap(p)) !== PROMPT_BLOCKS) return false;
      return true;
    };
    const live = async (): Promise<boolean> =>
      (await metric(url, 'kvgate_worker_kv_events_live', { worker_id: '1' })) === 1 &&
      (await metric(url, 'kvgate_worker_kv_events_live', { worker_id: '2' })) === 1;
    // Both subscriptions may join late (ZMQ slow joiner; a missed first batch is replayed).
    await until(
      async () => {
        await complete();
        return (await allMatched()) && (await live());
      },
      'the index follows both engines',
      20_000,
    );

    const recoveredBefore = await metric(url, 'kvgate_kv_event_replays_total', { outcome: 'recovered' });

    // The engines drop their next batch on the wire (repeated, as a drop can fall between two requests
    // of the other engine); a later batch reveals the gap, and replay fills it.
    const dropNext = async (): Promise<void> => {
      for (const e of engines) {
        const res = await fetch(`${String(e.url)}/admin/faults`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ drop_next_event_batches: 1 }),
        });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
    };
    await until(
      async () => {
        await dropNext();
        await complete();
        await complete();
        return (await metric(url, 'kvgate_kv_event_gaps_total')) > 0;
      },
      'a gap in the KV events of an engine',
      30_000,
    );
    await until(
      async () => {
        await complete();
        const recovered = await metric(url, 'kvgate_kv_event_replays_total', { outcome: 'recovered' });
        return recovered > recoveredBefore && (await allMatched());
      },
      'the gap recovered from the replay buffer, every prompt matched',
      30_000,
    );
    expect(await live()).toBe(true);
  }, 90_000);
});
