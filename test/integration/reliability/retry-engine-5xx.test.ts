/**
 * Retry before the first byte on an engine's 5xx (issue 14 item 3; the 500 in
 * issue 23, section 2), with real processes: one mocker answers 503 to every
 * request (`--fault-error-rate 1 --fault-error-status 503`, vLLM shutting
 * down), then 500, one is healthy. Every client request succeeds (the 5xx is
 * retried on the other worker, counted by reason).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import { lineOf, MOCKER_OS_PORTS, start, stop, type Proc } from '../../helpers/process.js';

describe('retry before the first byte on engine 500/502/503', () => {
  let dir: string;
  let procs: Proc[] = [];
  let url: string;
  let failing: string;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-retry-5xx-'));
    const faults = ['--fault-error-rate', '1', '--fault-error-status', '503'];
    const bad = start(['mocker', ...MOCKER_OS_PORTS, '--speedup', '50', ...faults]);
    const good = start(['mocker', ...MOCKER_OS_PORTS, '--speedup', '50']);
    procs = [bad, good];
    const [b, g] = await Promise.all([
      lineOf(bad, 'ports', (o) => typeof o.url === 'string'),
      lineOf(good, 'ports', (o) => typeof o.url === 'string'),
    ]);
    failing = String(b.url);
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        preprocess: { threads: 0 },
        log: { level: 'info' },
        // The always-failing worker would be ejected for its consecutive 5xx (outlier-ejection.test.ts); here it stays routed.
        health: { outlier_detection: { consecutive_errors: 0 } },
        models: [
          {
            name: b.model,
            block_size: 16,
            router_mode: 'round-robin',
            workers: [
              { id: 1, url: b.url },
              { id: 2, url: g.url },
            ],
          },
        ],
      }),
    );
    const gw = start(['serve', '--config', config]);
    procs.push(gw);
    url = String((await lineOf(gw, "the gateway's startup line", (o) => o.msg === 'kvgate gateway started')).listen);
  }, 60_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => stop(p)));
    rmSync(dir, { recursive: true, force: true });
  });

  async function complete(stream: boolean): Promise<number> {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'mock-model', prompt: 'retry me', max_tokens: 4, stream }),
    });
    await res.arrayBuffer();
    return res.status;
  }

  it('every request succeeds: the 503s are retried on the healthy worker and counted', async () => {
    const statuses = [];
    for (let i = 0; i < 8; i++) statuses.push(await complete(i % 2 === 0));
    expect(statuses.every((s) => s === 200)).toBe(true);
    const text = await (await fetch(`${url}/metrics`)).text();
    const line = text
      .split('\n')
      .find((l) => l.startsWith('kvgate_router_retries_total{') && l.includes('reason="engine_503"'));
    expect(Number(line?.split(' ').pop())).toBeGreaterThan(0);
  }, 30_000);

  // A retry used to advance the rotation of first attempts as well: with two workers, every request's first attempt then
  // landed on the failing one (each request moved the rotation twice). Of 8 requests in a row, round robin sends the
  // failing worker exactly 4 first attempts, whatever the rotation's phase (its injected errors), each retried once.
  it("a retry leaves round robin's first attempts alternating: the failing worker gets every other request", async () => {
    const injected = (): Promise<number> => metric(failing, 'kvgate_mocker_injected_errors_total');
    const [errors, retries] = [await injected(), await metric(url, 'kvgate_router_retries_total')];
    const statuses = [];
    for (let i = 0; i < 8; i++) statuses.push(await complete(false));
    expect(statuses).toEqual(Array.from({ length: 8 }, () => 200));
    expect((await injected()) - errors).toBe(4);
    expect((await metric(url, 'kvgate_router_retries_total')) - retries).toBe(4);
  }, 30_000);

  async function retried(reason: string): Promise<number> {
    const text = await (await fetch(`${url}/metrics`)).text();
    const line = text
      .split('\n')
      .find((l) => l.startsWith('kvgate_router_retries_total{') && l.includes(`reason="${reason}"`));
    return Number(line?.split(' ').pop() ?? 0);
  }

  // Issue 23, section 2: before the fix a 500 was not retried and the client got 502 KVG_ERR_ENGINE_FAILED.
  it('an engine 500 before the first byte is retried like a 503: every request succeeds, counted as engine_500', async () => {
    await fetch(`${failing}/admin/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ error_status: 500 }),
    });
    const statuses = [];
    for (let i = 0; i < 8; i++) statuses.push(await complete(i % 2 === 0));
    expect(statuses).toEqual(Array.from({ length: 8 }, () => 200));
    expect(await retried('engine_500')).toBeGreaterThan(0);
  }, 30_000);
});
