/**
 * The engine check on join reads the KV-cache layout an engine states in its `/metrics` cache config
 * (vLLM's `sliding_window` and `attention_chunk_size` labels of `vllm:cache_config_info`): a layout kvgate has a
 * reuse rule for (a sliding window) is accepted and shown, one it does not understand (chunked local
 * attention) is logged, counted and shown as `mismatched` in /admin/models, and that worker is routed without
 * KV overlap instead of as if the model were full attention.
 * Engines: scripted HTTP engines answering vLLM's /health, /v1/models and /metrics (the check reads nothing else).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { jsonLogLines, startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { sendJson, startHttpEngine, type HttpEngine } from '../../helpers/http-engine.js';
import { until } from '../../helpers/until.js';

const MODEL = 'hybrid-model';
const WARN = 40;

type Row = { id: number; state: string; mismatch?: string; capacity: { kvCacheGroups?: string[] | null } };

/** A vLLM-like engine whose cache config gauge carries `labels` besides its block size. */
function vllmEngine(labels: Record<string, string>): Promise<HttpEngine> {
  const all = { block_size: '16', num_gpu_blocks: '4096', enable_prefix_caching: 'True', ...labels };
  const text =
    '# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n# TYPE vllm:cache_config_info gauge\n' +
    `vllm:cache_config_info{${Object.entries(all)
      .map(([k, v]) => `${k}="${v}"`)
      .join(',')}} 1.0\n`;
  return startHttpEngine((req, res) => {
    if (req.url === '/metrics') {
      res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' });
      res.end(text);
    } else if (req.url === '/v1/models') {
      sendJson(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model', max_model_len: 8192 }] });
    } else {
      res.writeHead(200);
      res.end();
    }
  });
}

describe('the KV-cache layout an engine states on join', () => {
  const engines: HttpEngine[] = [];
  const procs: CliProcess[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-kv-groups-'));

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    await Promise.allSettled(engines.map((e) => e.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('accepts a sliding window and flags chunked local attention instead of routing it as full attention', async () => {
    const sliding = await vllmEngine({ sliding_window: '4096' });
    const chunked = await vllmEngine({ attention_chunk_size: '8192' });
    const plain = await vllmEngine({ sliding_window: 'None' });
    engines.push(sliding, chunked, plain);
    const config = join(dir, 'kvgate.yaml');
    writeFileSync(
      config,
      [
        'listen: { port: 0 }',
        'admin: { enabled: true }',
        'preprocess: { threads: 0 }',
        'log: { level: info }',
        'models:',
        `  - name: ${MODEL}`,
        '    tokenizer: demo',
        '    block_size: 16',
        '    router: { use_kv_events: false }',
        '    workers:',
        `      - { id: 1, url: "${sliding.url}" }`,
        `      - { id: 2, url: "${chunked.url}" }`,
        `      - { id: 3, url: "${plain.url}" }`,
        '',
      ].join('\n'),
    );
    const { proc, url } = await startServeCli(config);
    procs.push(proc);
    const rows = async (): Promise<Row[]> =>
      ((await (await fetch(`${url}/admin/models`)).json()) as { models: { workers: Row[] }[] }).models[0]!.workers;
    await until(async () => (await rows()).find((w) => w.id === 2)?.state === 'mismatched', 'worker 2 mismatched');

    const byId = new Map((await rows()).map((w) => [w.id, w]));
    expect(byId.get(1)).toMatchObject({ state: 'ready', capacity: { kvCacheGroups: ['sliding:4096'] } });
    expect(byId.get(2)).toMatchObject({
      state: 'mismatched',
      mismatch: expect.stringMatching(/no reuse rule for \(chunked_local_attention:8192\)/),
      capacity: { kvCacheGroups: ['chunked_local_attention:8192'] },
    });
    // An engine that states no layout (vLLM writes None for an unset window) is a one-group model: nothing shown.
    expect(byId.get(3)).toMatchObject({ state: 'ready', capacity: { kvCacheGroups: null } });

    const warned = (): Record<string, unknown> | undefined =>
      jsonLogLines(proc).find((o) => o.level === WARN && o.workerId === 2 && Array.isArray(o.unknownGroups));
    await until(() => warned() !== undefined, 'the layout warn line');
    expect(String(warned()!.msg)).toMatch(/routed without KV overlap rather than as if the model were full attention/);
    const text = await (await fetch(`${url}/metrics`)).text();
    expect(text).toContain(`kvgate_worker_engine_checks_total{model="${MODEL}",check="kv_groups",outcome="unknown"} 1`);
    expect(text).toContain(`kvgate_worker_engine_checks_total{model="${MODEL}",check="kv_groups",outcome="ok"} 1`);
  }, 60_000);
});
