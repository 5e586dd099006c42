/**
 * Hybrid attention over real sockets: `kvgate serve` subscribed to two engines' KV events on ZMQ, encoded as
 * vLLM encodes a sliding-window + full-attention model (positional arrays with `group_idx`,
 * `kv_cache_spec_kind`, `kv_cache_spec_sliding_window`; the sliding group's null blocks left out of
 * `block_hashes`). Worker 1 holds the whole prompt in its full-attention group, but the prompt's tail slid out
 * of its window; worker 2 holds less of the prompt, with its window intact. The request goes to worker 2, the
 * one that can reuse more, where a one-group router would pick worker 1. Engines' HTTP side: scripted vLLM
 * answers (/health, /v1/models, /metrics); the router's query endpoint decides without dispatching.
 */
import { encode } from '@msgpack/msgpack';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { sendJson, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { until } from '../../helpers/until.js';
import { TestKvPublisher } from '../../helpers/zmq-publisher.js';

const MODEL = 'hybrid-model';
const BS = 16;
/** 33 tokens of window: ceil(32 / 16) = 2 blocks before the hit point. */
const WINDOW = 33;
const PROMPT = Array.from({ length: 10 * BS + 3 }, (_, i) => 5000 + i);

function vllmEngine(): Promise<HttpEngine> {
  const gauge = `vllm:cache_config_info{block_size="${BS}",num_gpu_blocks="4096",kv_cache_groups="full,sliding:${WINDOW}"} 1.0\n`;
  return startHttpEngine((req, res) => {
    if (req.url === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(gauge);
    } else if (req.url === '/v1/models') sendJson(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model' }] });
    else {
      res.writeHead(200);
      res.end();
    }
  });
}

/** vLLM's BlockStored array of blocks [from, to) of the prompt, hashes for [from + nulls, to). */
function stored(worker: number, group: number, from: number, to: number, nulls = 0): unknown[] {
  const hash = (i: number): bigint => (BigInt(worker) << 40n) + BigInt(i + 1) * 0x9e3779b1n;
  const hashes = Array.from({ length: to - from - nulls }, (_, k) => hash(from + nulls + k));
  const parent = from === 0 ? null : hash(from - 1);
  const kind = group === 0 ? 'full_attention' : 'sliding_window';
  const window = group === 0 ? null : WINDOW;
  return [
    'BlockStored',
    hashes,
    parent,
    PROMPT.slice(from * BS, to * BS),
    BS,
    null,
    'GPU',
    null,
    null,
    group,
    kind,
    window,
  ];
}

function removed(worker: number, group: number, blocks: number[]): unknown[] {
  return ['BlockRemoved', blocks.map((i) => (BigInt(worker) << 40n) + BigInt(i + 1) * 0x9e3779b1n), 'GPU', group];
}

describe('hybrid-attention routing (sliding window + full)', () => {
  const procs: CliProcess[] = [];
  const engines: HttpEngine[] = [];
  const pubs: TestKvPublisher[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-hybrid-'));

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    await Promise.allSettled([...engines.map((e) => e.close()), ...pubs.map((p) => p.close())]);
    rmSync(dir, { recursive: true, force: true });
  });

  it('routes to the worker whose window still holds the prefix, not the one with the longest full-attention run', async () => {
    for (let i = 0; i < 2; i++) {
      engines.push(await vllmEngine());
      pubs.push(await TestKvPublisher.start());
    }
    const config = join(dir, 'kvgate.yaml');
    writeFileSync(
      config,
      [
        'listen: { port: 0 }',
        'admin: { enabled: true }',
        'preprocess: { threads: 0 }',
        'models:',
        `  - name: ${MODEL}`,
        '    tokenizer: demo',
        `    block_size: ${BS}`,
        '    workers:',
        ...[0, 1].map((i) => `      - { id: ${i + 1}, url: "${engines[i]!.url}", kv_events: "${pubs[i]!.endpoint}" }`),
        '',
      ].join('\n'),
    );
    const { proc, url } = await startServeCli(config);
    procs.push(proc);
    await Promise.all(pubs.map((p) => p.waitForSubscribers(1)));

    // Worker 1: the whole prompt (10 blocks) in full attention; its window group lost blocks 6..9.
    await pubs[0]!.publishPayload(
      encode([1.5, [stored(1, 0, 0, 10), stored(1, 1, 0, 10), removed(1, 1, [6, 7, 8, 9])], 0], { useBigInt64: true }),
    );
    // Worker 2: 8 blocks; its window group cached only the last 2 (the 6 before were null: vLLM leaves them out).
    await pubs[1]!.publishPayload(encode([1.5, [stored(2, 0, 0, 8), stored(2, 1, 0, 8, 6)], 0], { useBigInt64: true }));

    const route = async (pin?: number): Promise<{ worker: { worker_id: number }; overlap_blocks: number }> => {
      const res = await fetch(`${url}/v1/route`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: MODEL,
          prompt: PROMPT,
          max_tokens: 1,
          ...(pin === undefined ? {} : { nvext: { backend_instance_id: pin } }),
        }),
      });
      expect(res.status).toBe(200);
      return (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number };
    };
    await until(async () => (await route(2)).overlap_blocks === 8, "worker 2's groups indexed");
    // Worker 1 can reuse only up to block 6: the last point its window (blocks 4, 5) is whole.
    await until(async () => (await route(1)).overlap_blocks === 6, "worker 1's groups indexed");
    const best = await route();
    expect(best.worker.worker_id).toBe(2);
    expect(best.overlap_blocks).toBe(8);

    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toMatch(/kvgate_kv_cache_group_changes_total\{[^}]*group="1",kind="sliding:33"[^}]*\} 1/);
    expect(metrics).toMatch(/kvgate_worker_engine_checks_total\{[^}]*check="kv_groups",outcome="ok"\} 2/);
  }, 60_000);
});
