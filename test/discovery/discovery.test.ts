import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { healthServer as startHealthServer } from '../helpers/health-server.js';
import { HealthProber, WorkerRegistry, type WorkerInfo } from '../../src/discovery/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { captureWarnings } from '../helpers/capture-log.js';

function worker(id: number, url: string, extra: Partial<WorkerInfo> = {}): WorkerInfo {
  return { id, model: 'm', url, role: 'aggregated', dialect: 'vllm', dpStart: 0, dpSize: 1, ...extra };
}

const servers: Server[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))));
});

const healthServer = (status: { code: number }): Promise<string> => startHealthServer(status, servers);

describe('WorkerRegistry', () => {
  it('tracks availability per model and role and emits changes once', () => {
    const reg = new WorkerRegistry();
    const events: string[] = [];
    reg.on('added', (w) => events.push(`+${w.id}`));
    reg.on('removed', (w) => events.push(`-${w.id}`));
    reg.add(worker(1, 'http://a:1'));
    reg.add(worker(2, 'http://b:1', { role: 'prefill' }));
    reg.add(worker(3, 'http://c:1', { model: 'other' }), false);
    expect(
      reg
        .available('m')
        .map((w) => w.id)
        .sort(),
    ).toEqual([1, 2]);
    expect(reg.available('m', ['prefill']).map((w) => w.id)).toEqual([2]);
    reg.markDown(2);
    reg.markDown(2);
    reg.markUp(3);
    expect(events).toEqual(['+1', '+2', '-2', '+3']);
    expect(reg.models().sort()).toEqual(['m', 'other']);
  });

  it("says why a worker left routing: marked down ('unavailable') or removed ('unregistered', even when down)", () => {
    const reg = new WorkerRegistry();
    const events: string[] = [];
    reg.on('removed', (w, why) => events.push(`-${w.id} ${why}`));
    reg.add(worker(1, 'http://a:1'));
    reg.add(worker(2, 'http://b:1'));
    reg.markDown(1);
    reg.remove(1);
    reg.remove(2);
    reg.remove(3);
    expect(events).toEqual(['-1 unavailable', '-1 unregistered', '-2 unregistered']);
    expect(reg.get(1)).toBeUndefined();
  });

  it('rejects invalid and duplicate workers with the field named', () => {
    const reg = new WorkerRegistry();
    reg.add(worker(1, 'http://a:1'));
    expect(() => reg.add(worker(1, 'http://b:1'))).toThrow(/used twice/);
    expect(() => reg.add(worker(2, 'not a url'))).toThrow(/url is not a URL/);
    expect(() => reg.add(worker(3, 'http://c:1', { dpSize: 0 }))).toThrow(/dp_size/);
    expect(() => reg.add(worker(4, 'http://d:1', { role: 'prefill', dialect: 'sglang' }))).toThrow(
      /bootstrap is required/,
    );
  });
});

describe('HealthProber', () => {
  it('marks a worker down after consecutive failures and up after one success', async () => {
    const status = { code: 200 };
    const url = await healthServer(status);
    const reg = new WorkerRegistry();
    reg.add(worker(1, url));
    const prober = new HealthProber(reg, { unhealthyAfter: 2, timeoutMs: 500 });
    expect(await prober.probe(1)).toBe(true);
    status.code = 503;
    expect(await prober.probe(1)).toBe(false);
    expect(reg.isAvailable(1)).toBe(true); // one failure is not enough
    expect(await prober.probe(1)).toBe(false);
    expect(reg.isAvailable(1)).toBe(false);
    status.code = 200;
    await prober.probeAll();
    expect(reg.isAvailable(1)).toBe(true);
    prober.close();
  });

  it('a refused connection counts as a failure', async () => {
    const url = await healthServer({ code: 200 });
    await new Promise((r) => servers.pop()!.close(r));
    const reg = new WorkerRegistry();
    reg.add(worker(1, url));
    const prober = new HealthProber(reg, { unhealthyAfter: 1, timeoutMs: 500 });
    expect(await prober.probe(1)).toBe(false);
    expect(reg.isAvailable(1)).toBe(false);
    prober.close();
  });
});

/** An engine's /health (200) and /v1/models (vLLM's shape: the base model, then adapters with `parent`). */
async function modelsServer(listing: { base: string; adapters: string[] } | 'none'): Promise<string> {
  const s = createServer((req, res) => {
    if (req.url === '/health') return res.end();
    if (req.url !== '/v1/models' || listing === 'none') return void ((res.statusCode = 404), res.end());
    const entry = (id: string, parent: string | null) => ({ id, object: 'model', root: parent ?? id, parent });
    res.setHeader('content-type', 'application/json');
    res.end(
      JSON.stringify({
        object: 'list',
        data: [entry(listing.base, null), ...listing.adapters.map((a) => entry(a, listing.base))],
      }),
    );
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

describe("HealthProber: the engines' /v1/models", () => {
  // issue 12 item 8
  it('an engine that does not serve the served model name is down at once, and reported with both names', async () => {
    const listing = { base: 'meta-llama/Llama-3.1-8B-Instruct', adapters: [] as string[] };
    const reg = new WorkerRegistry();
    reg.add(worker(1, await modelsServer(listing)));
    let now = 0;
    const seen: unknown[] = [];
    const prober = new HealthProber(reg, {
      timeoutMs: 500,
      now: () => now,
      modelsRefreshMs: 1000,
      onModelCheck: (w, check) => seen.push([w.id, check]),
    });
    expect(await prober.probe(1)).toBe(false);
    expect(reg.isAvailable(1)).toBe(false);
    expect(seen).toEqual([[1, { kind: 'mismatch', expected: 'm', served: ['meta-llama/Llama-3.1-8B-Instruct'] }]]);
    // The engine is restarted under the expected name: the next probe checks again and brings it up.
    listing.base = 'm';
    now += 10;
    expect(await prober.probe(1)).toBe(true);
    expect(reg.isAvailable(1)).toBe(true);
    expect(seen.at(-1)).toEqual([1, { kind: 'ok', adapters: [] }]);
    prober.close();
  });

  // issue 12 items 7 and 8
  it('served_model_name is what is checked; adapters are learned on join and refreshed periodically', async () => {
    const listing = { base: 'hf/name', adapters: ['sql-adapter'] };
    const reg = new WorkerRegistry();
    reg.add(worker(1, await modelsServer(listing), { servedModelName: 'hf/name', loraAdapters: ['static-adapter'] }));
    reg.add(worker(2, await modelsServer('none')));
    let now = 0;
    const prober = new HealthProber(reg, { timeoutMs: 500, now: () => now, modelsRefreshMs: 1000 });
    await prober.probeAll();
    expect(reg.adapters('m')).toEqual(['sql-adapter', 'static-adapter']);
    expect([reg.servesAdapter(1, 'sql-adapter'), reg.servesAdapter(2, 'sql-adapter')]).toEqual([true, false]);
    // An engine without /v1/models keeps its health state.
    expect(reg.isAvailable(2)).toBe(true);
    listing.adapters = ['chat-adapter'];
    now += 500;
    await prober.probeAll();
    expect(reg.adapters('m')).toEqual(['sql-adapter', 'static-adapter']);
    now += 600;
    await prober.probeAll();
    expect(reg.adapters('m')).toEqual(['chat-adapter', 'static-adapter']);
  });
});

// issue 13 item 8b: under CPU saturation every engine was ejected at once; now at most a share of a model's workers.

describe('ejection limit (issue 13 item 8b)', () => {
  it('with every worker of a model failing, at most the share is ejected; the rest stay routable, logged and counted', async () => {
    const status = { code: 503 };
    const reg = new WorkerRegistry();
    for (let id = 1; id <= 4; id++) reg.add(worker(id, await healthServer(status)));
    reg.add(worker(9, await healthServer({ code: 200 }), { model: 'other' }));
    const metrics = new KvgateMetrics({ processMetrics: false });
    const w = { lines: [] as Record<string, unknown>[] };
    const prober = new HealthProber(reg, { unhealthyAfter: 2, timeoutMs: 1000, maxEjectedPercent: 50 });
    prober.watch('m', captureWarnings(w.lines), metrics);
    await prober.probeAll();
    expect(reg.available('m')).toHaveLength(4); // one failure each is not enough
    await prober.probeAll();
    await prober.probeAll();
    expect(reg.available('m')).toHaveLength(2);
    expect(reg.available('other')).toHaveLength(1);
    const text = await metrics.text();
    expect(
      text.match(/kvgate_worker_health_transitions_total\{model="m",worker_id="\d",transition="ejected"\} 1/g),
    ).toHaveLength(2);
    expect(
      text.match(/kvgate_worker_health_transitions_total\{model="m",worker_id="\d",transition="kept"\} 1/g),
    ).toHaveLength(2);
    expect(w.lines).toHaveLength(4); // each transition once, not once per probe
    for (const line of w.lines)
      expect(line).toMatchObject({
        workerId: expect.any(Number),
        url: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/),
      });

    // The engines recover: every worker is routable again, and the readmissions are logged.
    status.code = 200;
    await prober.probeAll();
    expect(reg.available('m')).toHaveLength(4);
    expect(w.lines.filter((l) => l.transition === 'readmitted')).toHaveLength(4);
    prober.close();
  });

  it('a single-worker model can still lose its one worker (at least one is always ejectable)', async () => {
    const reg = new WorkerRegistry();
    reg.add(worker(1, await healthServer({ code: 500 })));
    const prober = new HealthProber(reg, { unhealthyAfter: 1, timeoutMs: 1000, maxEjectedPercent: 50 });
    await prober.probeAll();
    expect(reg.isAvailable(1)).toBe(false);
    prober.close();
  });
});
