/**
 * A crashed engine is loud (real processes: `kvgate serve` over two mocker
 * engine processes publishing KV events): within a few seconds of
 * `POST /admin/crash` the gateway writes a warn line naming the worker and
 * its URL, `kvgate_worker_up` and `kvgate_worker_kv_events_live` of the
 * worker read 0, `/admin/models` shows it down with its last error, and a
 * request pinned to it answers 503 KVG_ERR_WORKER_DOWN naming it. When an
 * engine comes back on the same ports, the reverse.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLines, startMockerEngine, startServe, stopServed, type ServedProc } from '../../helpers/serve-process.js';
import { until } from '../../helpers/until.js';

const WARN = 40;

/** The value of one series in Prometheus text, or undefined when absent. */
function series(text: string, name: string, workerId: number): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${name}{`) && l.includes(`worker_id="${workerId}"`));
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

/** The `state` label of the worker's `kvgate_worker_state` series at 1: its health in the metric's vocabulary. */
function healthGauge(text: string, workerId: number): string | undefined {
  const line = text
    .split('\n')
    .find((l) => l.startsWith('kvgate_worker_state{') && l.includes(`worker_id="${workerId}"`) && l.endsWith(' 1'));
  return line === undefined ? undefined : /state="([^"]*)"/.exec(line)?.[1];
}

describe('a crashed engine is loud', () => {
  let dir: string;
  const procs: ServedProc[] = [];

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-crash-'));
  });

  afterAll(async () => {
    await Promise.all(procs.map((p) => stopServed(p)));
    rmSync(dir, { recursive: true, force: true });
  });

  // issue 17, what it must show, item 1
  it('down within seconds: warn line, up gauge 0, kv_events_live 0, /admin/models down, pinned 503; back: the reverse', async () => {
    const a = await startMockerEngine(['--seed', '1']);
    const b = await startMockerEngine(['--seed', '2']);
    procs.push(a.proc, b.proc);
    const model = String(a.engine.model);
    const config = join(dir, 'kvgate.json');
    writeFileSync(
      config,
      JSON.stringify({
        listen: { host: '127.0.0.1', port: 0 },
        admin: { enabled: true },
        preprocess: { threads: 0 },
        log: { level: 'info' },
        health: { interval_ms: 200, timeout_ms: 500, unhealthy_after: 2 },
        models: [
          {
            name: model,
            block_size: 16,
            workers: [1, 2].map((id) => ({
              id,
              url: (id === 1 ? a : b).engine.url,
              kv_events: ((id === 1 ? a : b).engine.kv_events as string[])[0],
            })),
          },
        ],
      }),
    );
    const served = await startServe(config);
    const gateway = served.proc;
    procs.push(gateway);
    const url = served.url;
    const metrics = async (): Promise<string> => (await fetch(`${url}/metrics`)).text();
    const worker2 = async (): Promise<Record<string, unknown>> => {
      const body = (await (await fetch(`${url}/admin/models`)).json()) as {
        models: { workers: Record<string, unknown>[] }[];
      };
      return body.models[0]!.workers.find((w) => w.id === 2)!;
    };
    let n = 0;
    const pinned = async (): Promise<Response> => {
      const words = Array.from({ length: 64 }, (_, i) => `p${n}w${i}`).join(' ');
      n++;
      return fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-worker-instance-id': '2' },
        body: JSON.stringify({ model, prompt: words, max_tokens: 1 }),
      });
    };
    const eventsLive = async (): Promise<boolean> => {
      const res = await pinned();
      await res.arrayBuffer();
      return series(await metrics(), 'kvgate_worker_kv_events_live', 2) === 1;
    };
    // Before: worker 2 up, its events live.
    await until(eventsLive, "worker 2's KV events live", 20_000);
    expect(series(await metrics(), 'kvgate_worker_up', 2)).toBe(1);
    expect(await worker2()).toMatchObject({ state: 'ready', health: 'up', kvEventsState: 'live' });
    expect(typeof (await worker2()).lastEventAt).toBe('string');

    const crash = await fetch(`${String(b.engine.url)}/admin/crash`, { method: 'POST' });
    expect(crash.status).toBe(202);
    await crash.arrayBuffer();
    const crashedAt = Date.now();
    await until(async () => series(await metrics(), 'kvgate_worker_up', 2) === 0, "worker 2's up gauge at 0", 5_000);
    await until(
      () => jsonLines(gateway).some((o) => o.level === WARN && o.workerId === 2 && o.url === b.engine.url),
      'a warn line naming worker 2',
      5_000,
    );
    const m = await metrics();
    expect(series(m, 'kvgate_worker_kv_events_live', 2)).toBe(0);
    expect(series(m, 'kvgate_worker_up', 1)).toBe(1);
    expect(Date.now() - crashedAt).toBeLessThan(5_000);
    const down = await worker2();
    expect(down).toMatchObject({ state: 'down', health: 'down', kvEventsState: 'down' });
    expect(String(down.lastError)).toMatch(/GET \/health/);
    // One health vocabulary: /admin/models' `health`, the state gauge's label and the down line's `health` agree.
    await until(async () => healthGauge(await metrics(), 2) === down.health, 'kvgate_worker_state at down', 5_000);
    const downLine = jsonLines(gateway).find((o) => o.workerId === 2 && /is down/.test(String(o.msg)));
    expect(downLine).toMatchObject({ health: 'down' });
    expect(downLine).not.toHaveProperty('state');
    const refused = await pinned();
    expect(refused.status).toBe(503);
    const err = ((await refused.json()) as { error: { code: string; message: string } }).error;
    expect(err.code).toBe('KVG_ERR_WORKER_DOWN');
    expect(err.message).toMatch(/worker 2 is down/);

    // Back on the same ports: up again, readmitted, its events live once it serves.
    await stopServed(b.proc);
    const port = (u: unknown): string => String(new URL(String(u).replace('tcp://', 'http://')).port);
    const again = await startMockerEngine([
      '--seed',
      '2',
      '--port',
      port(b.engine.url),
      '--kv-events-port',
      port((b.engine.kv_events as string[])[0]),
    ]);
    procs.push(again.proc);
    await until(
      async () => series(await metrics(), 'kvgate_worker_up', 2) === 1,
      "worker 2's up gauge back at 1",
      10_000,
    );
    await until(
      () => jsonLines(gateway).some((o) => o.workerId === 2 && o.url === b.engine.url && /is up/.test(String(o.msg))),
      'a line saying worker 2 is up',
      5_000,
    );
    await until(eventsLive, "worker 2's KV events live again", 20_000);
    expect(await worker2()).toMatchObject({ state: 'ready', health: 'up', kvEventsState: 'live' });
    // Its KV-event publisher went with the process: the lost connection was a warn line naming the rank. The
    // worker came back as a new subscription, connected to the publisher on the same port.
    const lost = jsonLines(gateway).find(
      (o) => o.workerId === 2 && /KV event publisher disconnected/.test(String(o.msg)),
    );
    expect(lost).toMatchObject({ level: WARN, dpRank: 0, endpoint: (b.engine.kv_events as string[])[0] });
    expect((await worker2()).kvEventRanksConnected).toBe(1);
    await until(async () => healthGauge(await metrics(), 2) === 'up', 'kvgate_worker_state back at up', 5_000);
  }, 90_000);
});
