/**
 * Issue 12 item 1 (with item 2), over real sockets: `kvgate serve` in front of
 * a mocker process at a realistic speed (`--speedup 1`: 200 tokens take about a
 * second). During one long non-streaming request, the worker's booked prompt
 * tokens leave it at the first token while the request is still in flight
 * (the engine leg streams; /metrics reads the bookkeeping at scrape), and the
 * router's TTFT is a small fraction of the end-to-end time.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, startMockerCli, type CliProcess } from '../../helpers/cli-process.js';

const WORKER_ID = 3;
const BLOCK = 16;

/** One sample's value from the Prometheus text, for the series whose labels include all of `labels`. */
function sample(text: string, name: string, labels: Record<string, string>): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    const close = line.indexOf('}');
    const body = line.slice(name.length + 1, close);
    if (Object.entries(labels).every(([k, v]) => body.includes(`${k}="${v}"`)))
      return Number(line.slice(close + 1).trim());
  }
  return undefined;
}

describe('a non-streaming request is accounted for as it streams from the engine', () => {
  let dir: string;
  const procs: CliProcess[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-accounting-'));
  });

  afterAll(async () => {
    await Promise.all(procs.map((p) => p.stop()));
    rmSync(dir, { recursive: true, force: true });
  });

  /** A mocker process at `--speedup 1` and `kvgate serve` in front of it (worker WORKER_ID, its KV events). */
  async function serveOverMocker(): Promise<{ model: string; url: string }> {
    const {
      proc: mocker,
      engines: [engine],
    } = await startMockerCli(['--speedup', '1', '--seed', '3']);
    procs.push(mocker);
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        preprocess: { threads: 0 },
        models: [
          {
            name: engine!.model,
            block_size: BLOCK,
            workers: [{ id: WORKER_ID, url: engine!.url, kv_events: engine!.kv_events[0] }],
          },
        ],
      }),
    );
    const gateway = startCli(['serve', '--config', config]);
    procs.push(gateway);
    const [, url] = await gateway.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'the gateway listening');
    return { model: engine!.model, url: url! };
  }

  it('prefill tokens leave the worker at the first token, mid-request; TTFT is a small part of the end-to-end time', async () => {
    const { model, url } = await serveOverMocker();
    const worker = { worker_id: String(WORKER_ID), dp_rank: '0' };
    const scrape = async (): Promise<string> => (await fetch(`${url}/metrics`)).text();

    // Registered at zero before any request (item 2).
    const before = await scrape();
    expect(sample(before, 'kvgate_worker_active_prefill_tokens', worker)).toBe(0);
    expect(
      sample(before, 'kvgate_router_time_to_first_token_seconds_count', {
        worker_type: 'aggregated',
        worker_id: String(WORKER_ID),
      }),
    ).toBe(0);

    const prompt = Array.from({ length: 512 }, (_, i) => 1000 + i);
    const t0 = performance.now();
    let done = false;
    const request = fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt, max_tokens: 200, stream: false }),
    }).then(async (res) => {
      const body = (await res.json()) as { usage: { completion_tokens: number } };
      done = true;
      return { status: res.status, body, ms: performance.now() - t0 };
    });

    // Scrape while the request runs: in flight (one active request) with no prompt tokens booked any more.
    const samples: { requests: number | undefined; prefill: number | undefined }[] = [];
    let decodingSeen = false;
    while (!done && !decodingSeen) {
      const text = await scrape();
      if (done) break;
      const s = {
        requests: sample(text, 'kvgate_worker_active_requests', worker),
        prefill: sample(text, 'kvgate_worker_active_prefill_tokens', worker),
      };
      samples.push(s);
      decodingSeen = s.requests === 1 && s.prefill === 0;
      if (!decodingSeen) await new Promise((r) => setTimeout(r, 20));
    }
    const answer = await request;
    expect(answer.status).toBe(200);
    expect(answer.body.usage.completion_tokens).toBe(200);
    expect(
      samples.some((s) => s.requests === 1),
      `no scrape saw the request in flight: ${JSON.stringify(samples)}`,
    ).toBe(true);
    expect(decodingSeen, `prompt tokens stayed booked while decoding: ${JSON.stringify(samples)}`).toBe(true);
    expect(answer.ms).toBeGreaterThan(500);

    const after = await scrape();
    expect(sample(after, 'kvgate_worker_active_requests', worker)).toBe(0);
    expect(
      sample(after, 'kvgate_router_time_to_first_token_seconds_count', {
        worker_type: 'aggregated',
        worker_id: String(WORKER_ID),
      }),
    ).toBe(1);
    const ttftSeconds = sample(after, 'kvgate_router_time_to_first_token_seconds_sum', {
      worker_type: 'aggregated',
      worker_id: String(WORKER_ID),
    })!;
    expect(ttftSeconds * 1000).toBeLessThan(answer.ms * 0.25);
  });
});
