/**
 * Warm start of a replica started mid-traffic (issue 15, must-show 1, last
 * scenario): a real nats-server, real mocker engines publishing KV events with
 * a replay buffer of only 3 batches, and `kvgate serve` processes. Replica A
 * routes while the engines cache a long prompt; later, with traffic still
 * flowing, replica B starts with warm start on and replica C with it off.
 * B's very first `/v1/route` for the cached prompt reports the worker and
 * overlap A reports; C, which only has the engines' short replay buffers,
 * does not (so this test fails without the warm start).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, startMockerCli, type CliProcess } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { startNatsServer, type NatsServer } from '../../helpers/nats-server.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const PROBE = [
  {
    role: 'user',
    content:
      'Compare the replication protocols of the three storage systems, with their failure modes and recovery times. '.repeat(
        6,
      ),
  },
];

interface Engine {
  readonly url: string;
  readonly kv_events: readonly string[];
  readonly kv_events_replay: readonly string[];
}

function config(dir: string, id: string, nats: string, engines: readonly Engine[], warm: boolean): string {
  const file = join(dir, `${id}.yaml`);
  writeFileSync(
    file,
    [
      'listen: { port: 0 }',
      'preprocess: { threads: 0 }',
      // Small chunks: the index crosses in many of them. A generous timeout: on a loaded machine the
      // peer's answer must not be mistaken for no answer (which starts the replica cold).
      `replicas: { router_id: ${id}, nats: { servers: ["${nats}"] }, heartbeat_ms: 200, peer_timeout_ms: 2000, warm_start: ${warm}, warm_start_timeout_ms: 30000, snapshot_chunk_bytes: 2048 }`,
      'models:',
      `  - name: ${MODEL}`,
      '    tokenizer: demo',
      '    workers:',
      ...engines.map(
        (e, i) =>
          `      - { id: ${i + 1}, url: "${e.url}", kv_events: { endpoint: "${e.kv_events[0]}", replay: "${e.kv_events_replay[0]}" } }`,
      ),
      '',
    ].join('\n'),
  );
  return file;
}

async function route(url: string): Promise<{ worker: number; overlap: number; blocks: number }> {
  const res = await fetch(`${url}/v1/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages: PROBE }),
  });
  expect(res.status).toBe(200);
  const j = (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number; prompt_blocks: number };
  return { worker: j.worker.worker_id, overlap: j.overlap_blocks, blocks: j.prompt_blocks };
}

async function chat(url: string, messages: unknown, worker: number): Promise<void> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-worker-instance-id': String(worker) },
    body: JSON.stringify({ model: MODEL, max_tokens: 2, messages }),
  });
  await res.arrayBuffer();
  expect(res.status).toBe(200);
}

describe('a replica started mid-traffic (warm start over NATS)', () => {
  let nats: NatsServer;
  let mocker: CliProcess;
  const procs: CliProcess[] = [];
  let engines: Engine[];
  let dir: string;
  let stop = false;
  let traffic: Promise<void> | undefined;
  let sent = 0;

  beforeAll(async () => {
    nats = await startNatsServer();
    // Replay buffers of 3 batches: the engines alone cannot tell a late subscriber what they cached a while ago.
    const m = await startMockerCli(
      [
        '--model',
        MODEL,
        '--tokenizer',
        'demo',
        '--speedup',
        '50',
        '--kv-events-replay-port',
        '0',
        '--kv-events-buffer-steps',
        '3',
      ],
      2,
    );
    mocker = m.proc;
    engines = m.engines as unknown as Engine[];
    dir = mkdtempSync(join(tmpdir(), 'kvgate-warm-'));
  }, 60_000);

  afterAll(async () => {
    stop = true;
    await traffic?.catch(() => {});
    await Promise.allSettled([...procs.map((p) => p.stop()), mocker?.stop()]);
    await nats?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  const serve = async (id: string, warm: boolean): Promise<string> => {
    const p = startCli(['serve', '-c', config(dir, id, nats.url, engines, warm)]);
    procs.push(p);
    return (await p.waitFor(/"listen":"(http:\/\/[^"]+)"/, `${id} listening`, 30_000))[1]!;
  };

  // issue 15 item 1 (warm start): the new replica's first /v1/route has the old one's overlap
  it("B's first /v1/route reports the overlap and worker A reports; C without warm start does not", async () => {
    const urlA = await serve('a', true);
    await chat(urlA, PROBE, 1);
    await until(async () => (await route(urlA)).overlap > 2, 'A sees the prompt cached on worker 1', 10_000);
    const onA = await route(urlA);
    expect(onA.worker).toBe(1);

    // Traffic through A on both workers, other prompts, from now until the end: the engines'
    // short buffers roll far past the batches that cached the probe.
    traffic = (async () => {
      for (let i = 0; !stop; i++) {
        await chat(
          urlA,
          [{ role: 'user', content: `request ${i}: tell me about topic number ${i} in a few words` }],
          1 + (i % 2),
        );
        sent++;
      }
    })();
    await until(() => sent >= 12, 'traffic flowing', 20_000);

    const [urlB, urlC] = await Promise.all([serve('b', true), serve('c', false)]);
    const [first, cold] = await Promise.all([route(urlB), route(urlC)]);
    const now = await route(urlA);
    expect(sent).toBeGreaterThan(12); // still mid-traffic
    // The transfer first: a failed one explains a wrong route below.
    expect(
      await metric(urlB, 'kvgate_replica_snapshot_transfers_total', { direction: 'warm_start', outcome: 'ok' }),
    ).toBe(1);
    expect(now).toEqual(onA);
    expect(first).toEqual(onA);
    expect(cold.overlap).toBeLessThan(onA.overlap);

    expect(await metric(urlB, 'kvgate_replica_snapshot_blocks_received_total')).toBeGreaterThanOrEqual(onA.overlap);
    expect(await metric(urlB, 'kvgate_replica_snapshot_bytes_total', { direction: 'received' })).toBeGreaterThan(2048);
    expect(
      await metric(urlA, 'kvgate_replica_snapshot_transfers_total', { direction: 'served', outcome: 'ok' }),
    ).toBeGreaterThanOrEqual(1);
    // A started first: nobody to ask, so it started cold at once.
    expect(
      await metric(urlA, 'kvgate_replica_snapshot_transfers_total', { direction: 'warm_start', outcome: 'no_peer' }),
    ).toBe(1);
    expect(await metric(urlC, 'kvgate_replica_snapshot_transfers_total', { direction: 'warm_start' })).toBe(0);
    stop = true;
    await traffic;
  }, 90_000);
});
