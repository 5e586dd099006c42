/**
 * A worker whose health probe fails for a while and passes again keeps what kvgate knows of its KV cache, with
 * real processes: `kvgate serve` over two scripted vLLM engines (their /health answer switchable) and a ZMQ
 * publisher per engine. Worker 1 publishes the prompt's blocks once; its /health then answers 503 until it is
 * marked down (not routed to), then 200 until it is up again. No KV event is sent after the first: the router's
 * query endpoint must find worker 1's cached prefix at once, as an engine does not re-send the blocks it holds.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { answerEngineProbe, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { encodeBatch, TestKvPublisher } from '../../helpers/zmq-publisher.js';

const MODEL = 'flap-model';
const BS = 16;
const BLOCKS = 6;
const PROMPT = Array.from({ length: BLOCKS * BS + 5 }, (_, i) => 5000 + ((i * 53) % 877));

/** A vLLM engine double answering the probes, its /health with `health.code`. */
function engine(health: { code: number }): Promise<HttpEngine> {
  return startHttpEngine((req, res) => {
    if (req.method === 'GET' && req.url === '/health') res.writeHead(health.code).end();
    else if (!answerEngineProbe(req, res, MODEL)) res.writeHead(500).end();
  });
}

describe('a worker whose health probe flaps', () => {
  const engines: HttpEngine[] = [];
  const pubs: TestKvPublisher[] = [];
  let proc: CliProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-health-flap-'));

  afterAll(async () => {
    await proc?.stop();
    await Promise.allSettled([...engines.map((e) => e.close()), ...pubs.map((p) => p.close())]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('is routed with its cached prefix as soon as it is healthy again, without a new KV event', async () => {
    const health = [{ code: 200 }, { code: 200 }];
    for (const h of health) {
      engines.push(await engine(h));
      pubs.push(await TestKvPublisher.start());
    }
    const config = join(dir, 'kvgate.yaml');
    writeFileSync(
      config,
      [
        'listen: { host: 127.0.0.1, port: 0 }',
        'preprocess: { threads: 0 }',
        'health: { interval_ms: 100, timeout_ms: 1000, unhealthy_after: 2 }',
        'models:',
        `  - name: ${MODEL}`,
        '    tokenizer: demo',
        `    block_size: ${BS}`,
        '    panic_threshold_percent: 0',
        '    workers:',
        ...[0, 1].map((i) => `      - { id: ${i + 1}, url: "${engines[i]!.url}", kv_events: "${pubs[i]!.endpoint}" }`),
        '',
      ].join('\n'),
    );
    const started = await startServeCli(config);
    proc = started.proc;
    const url = started.url;
    const route = async (): Promise<{ worker: { worker_id: number }; overlap_blocks: number }> => {
      const res = await fetch(`${url}/v1/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, prompt: PROMPT, max_tokens: 1 }),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number };
    };

    await pubs[0]!.waitForSubscribers(1);
    const tokens = PROMPT.slice(0, BLOCKS * BS);
    const hashes = Array.from({ length: BLOCKS }, (_, i) => BigInt(0xf1a900 + i));
    await pubs[0]!.publishPayload(
      encodeBatch([{ type: 'stored', blockHashes: hashes, parent: null, tokens, blockSize: BS }]),
    );
    await until(async () => (await route()).overlap_blocks === BLOCKS, "worker 1's blocks indexed and matched");
    expect((await route()).worker.worker_id).toBe(1);

    // Unhealthy: marked down, so not routed to (its cached prefix does not draw the request).
    health[0]!.code = 503;
    await until(async () => (await metric(url, 'kvgate_worker_up')) === 1, 'worker 1 marked down', 10_000);
    const whileDown = await route();
    expect(whileDown.worker.worker_id).toBe(2);
    expect(whileDown.overlap_blocks).toBe(0);

    // Healthy again: routed at once with what it cached, no KV event sent since.
    health[0]!.code = 200;
    await until(async () => (await metric(url, 'kvgate_worker_up')) === 2, 'worker 1 up again', 10_000);
    const back = await route();
    expect(back).toMatchObject({ worker: { worker_id: 1 }, overlap_blocks: BLOCKS });
  }, 60_000);
});
