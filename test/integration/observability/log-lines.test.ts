/**
 * Every line kvgate logs is JSON that a strict ingester takes: no member name
 * twice in one object (pino writes a child logger's bindings and a call's
 * fields side by side, so a field bound twice appears twice). Real processes:
 * two `kvgate serve` replicas over a real nats-server in front of two
 * `kvgate mocker` engines, driven through faults: traffic, an engine crash
 * and its return, a config reload, a replica joining. Every stdout line of
 * both gateways is then parsed with a duplicate-rejecting JSON parser.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { metric } from '../../helpers/metric-sum.js';
import { startNatsServer, type NatsServer } from '../../helpers/nats-server.js';
import { jsonLines, startMockerEngine, startServe, stopServed, type ServedProc } from '../../helpers/serve-process.js';
import { duplicateKeys } from '../../helpers/strict-json.js';
import { until } from '../../helpers/until.js';

type Engine = Record<string, unknown>;

function yaml(id: string, nats: string, engines: readonly Engine[], overlapWeight: number): string {
  return [
    'listen: { host: 127.0.0.1, port: 0 }',
    'admin: { enabled: true }',
    'preprocess: { threads: 0 }',
    'log: { level: debug }',
    'health: { interval_ms: 200, timeout_ms: 500, unhealthy_after: 2 }',
    `replicas: { router_id: ${id}, nats: { servers: ["${nats}"] }, heartbeat_ms: 200, peer_timeout_ms: 1500 }`,
    'models:',
    `  - name: ${String(engines[0]!.model)}`,
    '    block_size: 16',
    `    router: { overlap_score_weight: ${overlapWeight} }`,
    '    workers:',
    ...engines.map(
      (e, i) => `      - { id: ${i + 1}, url: "${String(e.url)}", kv_events: "${(e.kv_events as string[])[0]}" }`,
    ),
    '',
  ].join('\n');
}

describe('log lines', () => {
  const procs: ServedProc[] = [];
  let nats: NatsServer | undefined;
  let dir: string | undefined;

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => stopServed(p)));
    await nats?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it('no log line of a gateway run through faults names a field twice', async () => {
    nats = await startNatsServer();
    dir = mkdtempSync(join(tmpdir(), 'kvgate-log-lines-'));
    const a = await startMockerEngine(['--seed', '1']);
    const b = await startMockerEngine(['--seed', '2']);
    procs.push(a.proc, b.proc);
    const engines = [a.engine, b.engine];
    const model = String(a.engine.model);
    const fileA = join(dir, 'a.yaml');
    writeFileSync(fileA, yaml('a', nats.url, engines, 1));
    const gwA = await startServe(fileA);
    procs.push(gwA.proc);

    const chat = async (i: number, headers: Record<string, string> = {}): Promise<number> => {
      const res = await fetch(`${gwA.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify({
          model,
          max_tokens: 4,
          messages: [
            { role: 'user', content: `turn ${i}: ${'the storage cluster report and its timeline '.repeat(8)}` },
          ],
        }),
      });
      await res.arrayBuffer();
      return res.status;
    };
    for (let i = 0; i < 4; i++) expect(await chat(i)).toBe(200);
    // Routed traffic may all land on one engine, and a batch published before the gateway's
    // subscription connected is never seen: each check sends one request pinned to each engine.
    let pinned = 100;
    await until(
      async () => {
        for (const id of ['1', '2']) expect(await chat(pinned++, { 'x-worker-instance-id': id })).toBe(200);
        return (await metric(gwA.url, 'kvgate_worker_kv_events_live')) === 2;
      },
      'both event streams live',
      20_000,
    );

    // An engine crashes and comes back on the same ports.
    const crash = await fetch(`${String(b.engine.url)}/admin/crash`, { method: 'POST' });
    await crash.arrayBuffer();
    await until(async () => (await metric(gwA.url, 'kvgate_worker_up')) === 1, 'worker 2 down', 10_000);
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
    await until(async () => (await metric(gwA.url, 'kvgate_worker_up')) === 2, 'worker 2 up again', 15_000);
    expect(await chat(10, { 'x-worker-instance-id': '2' })).toBe(200);

    // A reload that changes something, then a replica joins.
    writeFileSync(fileA, yaml('a', nats.url, engines, 2));
    const reload = await fetch(`${gwA.url}/admin/reload`, { method: 'POST' });
    expect(reload.status).toBe(200);
    await reload.arrayBuffer();
    const fileB = join(dir, 'b.yaml');
    writeFileSync(fileB, yaml('b', nats.url, engines, 1));
    const gwB = await startServe(fileB);
    procs.push(gwB.proc);
    await until(async () => (await metric(gwA.url, 'kvgate_replica_peers')) === 1, 'A sees B', 15_000);
    for (let i = 20; i < 24; i++) expect(await chat(i)).toBe(200);

    for (const gw of [gwA.proc, gwB.proc]) {
      const lines = gw.lines.filter((l) => l.startsWith('{'));
      expect(lines.length).toBeGreaterThan(10);
      expect(jsonLines(gw).length).toBe(lines.length);
      const doubled = lines.flatMap((l) => duplicateKeys(l).map((k) => `${k} in ${l}`));
      expect(doubled).toEqual([]);
    }
    // The run went through the faults it claims to.
    const msgs = jsonLines(gwA.proc).map((o) => String(o.msg));
    expect(msgs.some((m) => /worker 2 is down/.test(m))).toBe(true);
    expect(msgs.some((m) => /reload/i.test(m))).toBe(true);
  }, 120_000);
});
