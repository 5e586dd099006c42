/**
 * A request still streaming from a worker whose health probe fails for a while counts in that worker's load when
 * it is up again, and is freed once when it ends, with real processes: `kvgate serve` over two scripted vLLM
 * engines (their /health answer switchable, their completion stream held open until the test releases it) and a
 * ZMQ publisher per engine. Before, marking the worker down dropped its bookings: back up, it showed no load while
 * its stream still ran, and the router over-sent to it.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import {
  answerEngineProbe,
  completionChunk,
  deferred,
  sseEvent,
  sseHead,
  startHttpEngine,
  type HttpEngine,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { TestKvPublisher } from '../../helpers/zmq-publisher.js';

const MODEL = 'flap-load-model';

describe('a worker whose health probe flaps with a request in flight', () => {
  const engines: HttpEngine[] = [];
  const pubs: TestKvPublisher[] = [];
  let proc: CliProcess | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-health-flap-load-'));

  afterAll(async () => {
    await proc?.stop();
    await Promise.allSettled([...engines.map((e) => e.close()), ...pubs.map((p) => p.close())]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('counts the request in its load when it is up again, and frees it once when it ends', async () => {
    const health = [{ code: 200 }, { code: 200 }];
    const release = deferred();
    /** The worker id (1-based) of each engine that got a completion. */
    const servedBy: number[] = [];
    for (const [i, h] of health.entries()) {
      engines.push(
        await startHttpEngine(async (req, res) => {
          if (req.method === 'GET' && req.url === '/health') return void res.writeHead(h.code).end();
          if (answerEngineProbe(req, res, MODEL)) return;
          servedBy.push(i + 1);
          sseHead(res);
          res.write(sseEvent(completionChunk('a')));
          await release.promise;
          res.end(sseEvent(completionChunk('b', 'length')) + sseEvent('[DONE]'));
        }),
      );
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
        '    block_size: 16',
        '    panic_threshold_percent: 0',
        '    workers:',
        ...[0, 1].map((i) => `      - { id: ${i + 1}, url: "${engines[i]!.url}", kv_events: "${pubs[i]!.endpoint}" }`),
        '',
      ].join('\n'),
    );
    const started = await startServeCli(config);
    proc = started.proc;
    const url = started.url;
    const active = (id: number): Promise<number> =>
      metric(url, 'kvgate_worker_active_requests', { model: MODEL, worker_id: String(id) });
    const blocks = (id: number): Promise<number> =>
      metric(url, 'kvgate_worker_active_decode_blocks', { model: MODEL, worker_id: String(id) });

    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, prompt: 'the quick brown fox '.repeat(20), max_tokens: 8, stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    expect(servedBy).toHaveLength(1);
    const id = servedBy[0]!;
    expect(await active(id)).toBe(1);
    const held = await blocks(id);
    expect(held).toBeGreaterThan(0);

    // Marked down with its stream running: not routed to, its load series gone while down.
    health[id - 1]!.code = 503;
    await until(async () => (await metric(url, 'kvgate_worker_up')) === 1, `worker ${id} marked down`, 10_000);
    // Up again: its load is what its still-running request holds.
    health[id - 1]!.code = 200;
    await until(async () => (await metric(url, 'kvgate_worker_up')) === 2, `worker ${id} up again`, 10_000);
    expect(await active(id)).toBe(1);
    expect(await blocks(id)).toBe(held);

    // The stream ends: freed once, nothing left on either worker.
    release.resolve();
    for (let r = await reader.read(); r.done !== true; r = await reader.read()) {
      /* drain */
    }
    await until(async () => (await active(id)) === 0, `worker ${id}'s request freed`);
    expect(await metric(url, 'kvgate_worker_active_requests', { model: MODEL })).toBe(0);
    expect(await metric(url, 'kvgate_worker_active_decode_blocks', { model: MODEL })).toBe(0);
  }, 60_000);
});
