/**
 * Eagle hashing over real sockets: `kvgate serve` subscribed to an Eagle engine's KV events on ZMQ (vLLM's
 * positional BlockStored with `token_ids` as bigrams, each block hashed over its tokens plus the next one).
 * With the model's `eagle` on, the router hashes the prompt the same way and finds the worker's cached prefix;
 * with it off, the bigram events are refused as bad events (counted) and the prefix is missed. Engines' HTTP side:
 * scripted vLLM answers; the router's query endpoint decides without dispatching.
 */
import { encode } from '@msgpack/msgpack';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { sendJson, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { TestKvPublisher } from '../../helpers/zmq-publisher.js';

const MODEL = 'eagle-model';
const BS = 16;
const BLOCKS = 6;
/** Six Eagle blocks need the token after the sixth: 6 * 16 + 1 tokens, and a few more the worker never saw. */
const PROMPT = Array.from({ length: BLOCKS * BS + 5 }, (_, i) => 7000 + ((i * 37) % 991));

function vllmEngine(): Promise<HttpEngine> {
  return startHttpEngine((req, res) => {
    if (req.url === '/v1/models') sendJson(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model' }] });
    else {
      res.writeHead(200);
      res.end();
    }
  });
}

/** The Eagle engine's BlockStored of the prompt's first BLOCKS blocks: bigrams of tokens 0 .. BLOCKS * BS. */
function eagleStored(): unknown[] {
  const hashes = Array.from({ length: BLOCKS }, (_, i) => 0x5eed00 + i);
  const bigrams = Array.from({ length: BLOCKS * BS }, (_, i) => [PROMPT[i]!, PROMPT[i + 1]!]);
  return ['BlockStored', hashes, null, bigrams, BS, null, 'GPU', null, null];
}

describe('Eagle hashing per model (eagle)', () => {
  const procs: CliProcess[] = [];
  const engines: HttpEngine[] = [];
  const pubs: TestKvPublisher[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-eagle-'));

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    await Promise.allSettled([...engines.map((e) => e.close()), ...pubs.map((p) => p.close())]);
    rmSync(dir, { recursive: true, force: true });
  });

  /** A gateway over two engines, worker 1 publishing the Eagle events; its URL once they were received. */
  async function gateway(eagle: boolean): Promise<string> {
    const urls: string[] = [];
    const ends: string[] = [];
    for (let i = 0; i < 2; i++) {
      const e = await vllmEngine();
      const p = await TestKvPublisher.start();
      engines.push(e);
      pubs.push(p);
      urls.push(e.url);
      ends.push(p.endpoint);
    }
    const pub = pubs[pubs.length - 2]!;
    const config = join(dir, `kvgate-${eagle}.yaml`);
    writeFileSync(
      config,
      [
        'listen: { port: 0 }',
        'preprocess: { threads: 0 }',
        'models:',
        `  - name: ${MODEL}`,
        '    tokenizer: demo',
        `    block_size: ${BS}`,
        `    eagle: ${eagle}`,
        '    workers:',
        ...[0, 1].map((i) => `      - { id: ${i + 1}, url: "${urls[i]}", kv_events: "${ends[i]}" }`),
        '',
      ].join('\n'),
    );
    const { proc, url } = await startServeCli(config);
    procs.push(proc);
    await pub.waitForSubscribers(1);
    await pub.publishPayload(encode([1.5, [eagleStored()], 0]));
    return url;
  }

  async function route(url: string): Promise<{ worker: { worker_id: number }; overlap_blocks: number }> {
    const res = await fetch(`${url}/v1/route`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: PROMPT, max_tokens: 1 }),
    });
    expect(res.status).toBe(200);
    return (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number };
  }

  it("finds the Eagle worker's cached prefix with eagle on", async () => {
    const url = await gateway(true);
    await until(async () => (await route(url)).overlap_blocks === BLOCKS, 'the Eagle blocks indexed and matched');
    expect((await route(url)).worker.worker_id).toBe(1);
  }, 60_000);

  it('misses it with eagle off: the bigram events are refused as bad events', async () => {
    const url = await gateway(false);
    const errors = (): Promise<number> => metric(url, 'kvgate_kv_event_decode_errors_total', { kind: 'bad_event' });
    await until(async () => (await errors()) === 1, 'the bigram event counted as a bad event');
    expect((await route(url)).overlap_blocks).toBe(0);
  }, 60_000);
});
