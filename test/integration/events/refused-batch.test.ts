/**
 * A batch is applied whole or not at all, over real sockets: `kvgate serve` subscribed to an engine's KV events
 * on ZMQ receives a batch whose good stored events are followed by one that does not decode. None of its blocks
 * is indexed (the router's query endpoint predicts no overlap for their prompt), the refusal is counted
 * (`kvgate_kv_event_dropped_total{reason="refused"}`), and the engine's next batch is applied as usual. On the
 * main thread and on an ingestion thread (the batch handed over packed). Engines' HTTP side: scripted vLLM answers.
 */
import { decode, encode } from '@msgpack/msgpack';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { answerEngineProbe, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { encodeBatch, TestKvPublisher } from '../../helpers/zmq-publisher.js';

const MODEL = 'refusal-model';
const BS = 16;
const BLOCKS = 4;
const prompt = (base: number): number[] => Array.from({ length: BLOCKS * BS + 1 }, (_, i) => base + i);
const REFUSED = prompt(1000);
const NEXT = prompt(5000);

/** The engine's BlockStored of a prompt's BLOCKS blocks, as two events (the second chained under the first). */
function storedEvents(tokens: number[], hashBase: number): Parameters<typeof encodeBatch>[0] {
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

/** The two good events of REFUSED's blocks, then one with a tag no engine sends. */
function refusedBatch(): Uint8Array {
  const [ts, evs, rank] = decode(encodeBatch(storedEvents(REFUSED, 100)), { useBigInt64: true }) as unknown[];
  return encode([ts, [...(evs as unknown[]), ['BlockMoved', [7], null, [1, 2], BS]], rank], { useBigInt64: true });
}

describe('a KV-event batch with a bad last event', () => {
  const procs: CliProcess[] = [];
  const engines: HttpEngine[] = [];
  const pubs: TestKvPublisher[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-refused-'));

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    await Promise.allSettled([...engines.map((e) => e.close()), ...pubs.map((p) => p.close())]);
    rmSync(dir, { recursive: true, force: true });
  });

  async function route(url: string, tokens: number[]): Promise<number> {
    const res = await fetch(`${url}/v1/route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: tokens, max_tokens: 1 }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { overlap_blocks: number }).overlap_blocks;
  }

  for (const threads of [0, 1]) {
    it(`leaves none of its blocks in the index (ingest_threads ${threads})`, async () => {
      const engine = await startHttpEngine((req, res) => {
        if (!answerEngineProbe(req, res, MODEL)) res.writeHead(200).end();
      });
      const pub = await TestKvPublisher.start();
      engines.push(engine);
      pubs.push(pub);
      const config = join(dir, `kvgate-${threads}.yaml`);
      writeFileSync(
        config,
        [
          'listen: { port: 0 }',
          'preprocess: { threads: 0 }',
          `kv_events: { ingest_threads: ${threads} }`,
          'models:',
          `  - name: ${MODEL}`,
          '    tokenizer: demo',
          `    block_size: ${BS}`,
          `    workers: [{ id: 1, url: "${engine.url}", kv_events: "${pub.endpoint}" }]`,
          '',
        ].join('\n'),
      );
      const { proc, url } = await startServeCli(config);
      procs.push(proc);
      await pub.waitForSubscribers(1);
      await pub.publishPayload(refusedBatch());
      // The next batch is applied: once its blocks are matched, the one before was handled too.
      await pub.publish(storedEvents(NEXT, 900));
      await until(async () => (await route(url, NEXT)) === BLOCKS, "the next batch's blocks indexed");
      expect(await route(url, REFUSED)).toBe(0);
      expect(await metric(url, 'kvgate_kv_event_dropped_total', { reason: 'refused' })).toBe(1);
      expect(await metric(url, 'kvgate_kv_event_decode_errors_total', { kind: 'unknown_tag' })).toBe(1);
    }, 60_000);
  }
});
