/**
 * Outlier ejection with real processes (issue 14, what it must show, item 4):
 * three mocker engines behind `kvgate serve` (round robin), one answering 503
 * to half its requests (`--fault-error-rate 0.5 --fault-error-status 503`).
 * After `consecutive_errors` 503s in a row it is ejected: no new request
 * reaches it (its own counters stand still) while its health probe keeps
 * passing; after `base_ejection_ms` it is readmitted and gets traffic again.
 * When every engine fails, no more than `max_ejected_percent` of the fleet is
 * ejected: the others keep receiving requests.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLines, startMockerEngine, startServe, stopServed, type ServedProc } from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

const BASE_EJECTION_MS = 6000;

/** Sum of the series of `name` in Prometheus text. */
function total(text: string, name: string): number {
  let sum = 0;
  for (const l of text.split('\n'))
    if (l.startsWith(`${name}{`) || l.startsWith(`${name} `)) sum += Number(l.slice(l.lastIndexOf(' ') + 1));
  return sum;
}

describe('outlier ejection (real mocker processes)', () => {
  let dir: string;
  const procs: ServedProc[] = [];
  let engines: string[] = [];
  let url = '';
  let gateway: ServedProc;
  let sent = 0;

  /** What reached an engine: requests it failed on purpose plus tokens it generated (each answered request adds some). */
  async function reached(engine: string): Promise<number> {
    const text = await (await fetch(`${engine}/metrics`)).text();
    return total(text, 'kvgate_mocker_injected_errors_total') + total(text, 'vllm:generation_tokens_total');
  }

  async function complete(): Promise<number> {
    const res = await fetch(`${url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'mock-model',
        prompt: `request number ${sent++} of the ejection test`,
        max_tokens: 4,
      }),
    });
    await res.arrayBuffer();
    return res.status;
  }

  async function ejections(): Promise<Map<string, number>> {
    const text = await (await fetch(`${url}/metrics`)).text();
    const out = new Map<string, number>();
    for (const l of text.split('\n')) {
      const m = /^kvgate_worker_ejections_total\{.*worker_id="(\d+)".*reason="consecutive_errors".*\} (\d+)/.exec(l);
      if (m !== null) out.set(m[1]!, Number(m[2]));
    }
    return out;
  }

  const logOf = (pick: (o: Record<string, unknown>) => boolean): Record<string, unknown>[] =>
    jsonLines(gateway).filter(pick);

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-outlier-'));
    const started = await Promise.all([
      startMockerEngine(['--seed', '7', '--fault-error-rate', '0.5', '--fault-error-status', '503']),
      startMockerEngine(['--seed', '8']),
      startMockerEngine(['--seed', '9']),
    ]);
    procs.push(...started.map((s) => s.proc));
    engines = started.map((s) => String(s.engine.url));
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        preprocess: { threads: 0 },
        log: { level: 'info' },
        health: {
          interval_ms: 200,
          max_ejected_percent: 50,
          outlier_detection: { consecutive_errors: 3, base_ejection_ms: BASE_EJECTION_MS },
        },
        models: [
          {
            name: 'mock-model',
            block_size: 16,
            router_mode: 'round-robin',
            workers: engines.map((u, i) => ({ id: i + 1, url: u })),
          },
        ],
      }),
    );
    const served = await startServe(config);
    gateway = served.proc;
    procs.push(gateway);
    url = served.url;
  }, 60_000);

  afterAll(async () => {
    await Promise.all(procs.map((p) => stopServed(p)));
    rmSync(dir, { recursive: true, force: true });
  });

  it('a worker answering 503 to half its requests is ejected (no request reaches it), then readmitted', async () => {
    // Until its 503s come three in a row; every client request still succeeds (a 503 is retried elsewhere).
    for (let i = 0; i < 400 && (await ejections()).get('1') === undefined; i++) expect(await complete()).toBe(200);
    expect((await ejections()).get('1')).toBe(1);
    const ejectedLine = logOf((o) => o.workerId === 1 && String(o.msg).includes('ejected for'));
    expect(ejectedLine[0]).toMatchObject({ level: 40, url: engines[0], ejectionMs: BASE_EJECTION_MS });

    // During the ejection no new request reaches it, though its health probe passes every 200 ms.
    const before = await reached(engines[0]!);
    const others = await Promise.all([reached(engines[1]!), reached(engines[2]!)]);
    for (let i = 0; i < 20; i++) expect(await complete()).toBe(200);
    expect(logOf((o) => o.workerId === 1 && String(o.msg).includes('readmitted'))).toHaveLength(0); // still inside the ejection
    expect(await reached(engines[0]!)).toBe(before);
    expect(await reached(engines[1]!)).toBeGreaterThan(others[0]!);
    expect(await reached(engines[2]!)).toBeGreaterThan(others[1]!);

    // After base_ejection_ms it is readmitted, logged, and gets requests again.
    await until(
      () => logOf((o) => o.workerId === 1 && String(o.msg).includes('readmitted')).length > 0,
      'worker 1 readmitted',
      BASE_EJECTION_MS + 5000,
    );
    const back = await reached(engines[0]!);
    for (let i = 0; i < 30 && (await reached(engines[0]!)) === back; i++) await complete();
    expect(await reached(engines[0]!)).toBeGreaterThan(back);
  }, 60_000);

  it('a fleet where every worker fails ejects no more than max_ejected_percent: the others keep getting requests', async () => {
    await Promise.all(
      engines.map((e) =>
        fetch(`${e}/admin/faults`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ error_rate: 1, error_status: 503 }),
        }),
      ),
    );
    const start = await ejections();
    for (let i = 0; i < 30; i++) await complete();
    const kept = new Set(logOf((o) => String(o.msg).includes('kept routable')).map((o) => o.workerId));
    expect(kept.size).toBeGreaterThanOrEqual(2);
    // Three workers, 50 %: one at most is out at once; the other two keep receiving requests.
    const counts = await Promise.all(engines.map((e) => reached(e)));
    for (let i = 0; i < 10; i++) await complete();
    const after = await Promise.all(engines.map((e) => reached(e)));
    expect(after.filter((n, i) => n > counts[i]!).length).toBeGreaterThanOrEqual(2);
    const now = await ejections();
    const fresh = [...now].filter(([id, n]) => n > (start.get(id) ?? 0)).length;
    expect(fresh).toBeLessThanOrEqual(1);
  }, 60_000);
});
