/**
 * Configuration mistakes that routing survives but that ruin its cache-hit
 * predictions are loud (real processes): an engine whose KV events carry a
 * block size other than the model's gets a warn line naming the worker and
 * its URL and `kvgate_worker_block_size_mismatch` 1; a KV-routed model
 * without a tokenizer gets a warn line and `kvgate_model_tokenizer_missing` 1.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLines, startMockerEngine, startServe, stopServed, type ServedProc } from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

const WARN = 40;
const WORKER_ID = 3;

describe('block size mismatch and a missing tokenizer are loud', () => {
  let dir: string;
  const procs: ServedProc[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-mismatch-'));
  });

  afterAll(async () => {
    await Promise.all(procs.map((p) => stopServed(p)));
    rmSync(dir, { recursive: true, force: true });
  });

  // issue 17, failures must be loud: block size mismatch and kv mode without a tokenizer (log lines and metrics)
  it('warn lines and gauges for an engine with another block size and a model without a tokenizer', async () => {
    const m = await startMockerEngine(['--block-size', '32']);
    procs.push(m.proc);
    const model = String(m.engine.model);
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        preprocess: { threads: 0 },
        log: { level: 'info' },
        models: [
          {
            name: model,
            block_size: 16,
            workers: [{ id: WORKER_ID, url: m.engine.url, kv_events: (m.engine.kv_events as string[])[0] }],
          },
        ],
      }),
    );
    const served = await startServe(config);
    procs.push(served.proc);
    const lines = (): Record<string, unknown>[] => jsonLines(served.proc);
    expect(lines().some((o) => o.level === WARN && o.model === model && o.tokenizer === 'none')).toBe(true);

    let n = 0;
    await until(
      async () => {
        const words = Array.from({ length: 96 }, (_, i) => `m${n}w${i}`).join(' ');
        n++;
        const res = await fetch(`${served.url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, prompt: words, max_tokens: 1 }),
        });
        await res.arrayBuffer();
        return lines().some(
          (o) =>
            o.level === WARN && o.workerId === WORKER_ID && o.url === m.engine.url && /block size/.test(String(o.msg)),
        );
      },
      "a warn line about worker 3's block size",
      20_000,
    );
    const text = await (await fetch(`${served.url}/metrics`)).text();
    expect(text).toContain(`kvgate_worker_block_size_mismatch{model="${model}",worker_id="${WORKER_ID}"} 1`);
    expect(text).toContain(`kvgate_model_tokenizer_missing{model="${model}"} 1`);
  }, 60_000);
});
