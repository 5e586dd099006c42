/**
 * One valid KV-event batch too large to decode within an event-loop turn, over real sockets: `kvgate serve`
 * subscribed to a ZMQ publisher that sends a BlockRemoved of 30M one-byte hashes (30 MiB, under the 64 MiB
 * message limit; decoding it held the event loop for 1.3 s). The gateway refuses it before decoding it, counts it
 * (`kvgate_kv_event_decode_errors_total{kind="too_large"}`), keeps the worker's blocks and follows its next batches,
 * on the main thread and with ingestion threads. Engines' HTTP side: scripted vLLM answers; the router's query
 * endpoint decides without dispatching.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { sendJson, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { hugeRemoval, TestKvPublisher } from '../../helpers/zmq-publisher.js';

const MODEL = 'huge-batch-model';
const BS = 16;
const BLOCKS = 4;
const PROMPT = Array.from({ length: BLOCKS * BS + 1 }, (_, i) => 3000 + i);
const LATER = Array.from({ length: BLOCKS * BS + 1 }, (_, i) => 9000 + i);

describe('a valid KV-event batch too large to decode in one turn', () => {
  const procs: CliProcess[] = [];
  const engines: HttpEngine[] = [];
  const pubs: TestKvPublisher[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-huge-batch-'));

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    await Promise.allSettled([...engines.map((e) => e.close()), ...pubs.map((p) => p.close())]);
    rmSync(dir, { recursive: true, force: true });
  });

  async function route(url: string, prompt: number[]): Promise<number> {
    const res = await fetch(`${url}/v1/route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt, max_tokens: 1 }),
    });
    expect(res.status).toBe(200);
    return ((await res.json()) as { overlap_blocks: number }).overlap_blocks;
  }

  /** A store of `prompt`'s blocks under engine hashes `first`, `first + 1`, ... (one byte each: below 128). */
  const stored = (prompt: number[], first: number) => ({
    type: 'stored' as const,
    blockHashes: Array.from({ length: BLOCKS }, (_, i) => BigInt(first + i)),
    parent: null,
    tokens: prompt.slice(0, BLOCKS * BS),
    blockSize: BS,
  });

  for (const threads of [0, 2]) {
    it(`is refused unread, counted, and the worker's blocks kept (ingestion threads: ${threads})`, async () => {
      const engine = await startHttpEngine((req, res) => {
        if (req.url === '/v1/models') sendJson(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model' }] });
        else res.writeHead(200).end();
      });
      const pub = await TestKvPublisher.start({ replay: false });
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
      await pub.publish([stored(PROMPT, 1)]);
      await until(async () => (await route(url, PROMPT)) === BLOCKS, 'the first batch indexed');

      // Every block hash 1: applied, it would remove the prompt's first block.
      await pub.publishPayload(hugeRemoval(30_000_000, 1));
      await pub.publish([stored(LATER, 64)]);
      await until(async () => (await route(url, LATER)) === BLOCKS, 'the batch after it indexed', 30_000);
      expect(await metric(url, 'kvgate_kv_event_decode_errors_total', { kind: 'too_large' })).toBe(1);
      expect(await route(url, PROMPT)).toBe(BLOCKS);
    }, 90_000);
  }
});
