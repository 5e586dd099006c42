/**
 * Warm start of a replica started mid-traffic (issue 15, must-show 1, last
 * scenario): a real nats-server, real mocker engines publishing KV events with
 * a replay buffer of only 3 batches, and `kvgate serve` processes. Replica A
 * routes while the engines cache a long prompt; later, with traffic still
 * flowing, replica B starts with warm start on and replica C with it off.
 * B's very first `/v1/route` for the cached prompt reports the worker and
 * overlap A reports; C, which only has the engines' short replay buffers,
 * does not (so this test fails without the warm start).
 *
 * Through a second nats-server whose `max_payload` (2 KiB) is below the
 * default `snapshot_chunk_bytes` (256 KiB), the chunks must still fit: a
 * reply over the bound made the NATS client throw inside the serving
 * replica's subscription, which stopped its connection reading anything
 * until its pings went stale, and the newcomer started cold.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLogLines, startCli, startMockerCli, type CliProcess } from '../../helpers/cli-process.js';
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

/** The bound of the second nats-server. */
const MAX_PAYLOAD = 2048;
/** A prompt of a few thousand tokens: its prefix index (16 bytes a block) is several times MAX_PAYLOAD. */
const LONG = [
  { role: 'user', content: Array.from({ length: 1200 }, (_, i) => `item${i} of the inventory`).join(', ') },
];

/** `chunk`: the snapshot_chunk_bytes line (none: the default). */
function config(
  dir: string,
  id: string,
  nats: string,
  engines: readonly Engine[],
  warm: boolean,
  chunk: string,
): string {
  const file = join(dir, `${id}.yaml`);
  writeFileSync(
    file,
    [
      'listen: { port: 0 }',
      'preprocess: { threads: 0 }',
      // A generous timeout: on a loaded machine the peer's answer must not be mistaken for no answer
      // (which starts the replica cold).
      `replicas: { router_id: ${id}, nats: { servers: ["${nats}"] }, heartbeat_ms: 200, peer_timeout_ms: 2000, warm_start: ${warm}, warm_start_timeout_ms: 30000${chunk} }`,
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

async function route(url: string, messages = PROBE): Promise<{ worker: number; overlap: number; blocks: number }> {
  const res = await fetch(`${url}/v1/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages }),
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
  let small: NatsServer;
  let mocker: CliProcess;
  const procs: CliProcess[] = [];
  let engines: Engine[];
  let dir: string;
  let stop = false;
  let traffic: Promise<void> | undefined;
  let sent = 0;

  beforeAll(async () => {
    nats = await startNatsServer();
    small = await startNatsServer({ maxPayload: MAX_PAYLOAD });
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
    await Promise.allSettled([nats?.stop(), small?.stop()]);
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  // Small chunks by default: the index crosses in many of them.
  const serveOn = async (bus: NatsServer, id: string, warm: boolean, chunk: string): Promise<CliProcess> => {
    const p = startCli(['serve', '-c', config(dir, id, bus.url, engines, warm, chunk)]);
    procs.push(p);
    return p;
  };
  const urlOf = async (p: CliProcess): Promise<string> =>
    (await p.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'listening', 30_000))[1]!;
  const serve = async (id: string, warm: boolean): Promise<string> =>
    urlOf(await serveOn(nats, id, warm, ', snapshot_chunk_bytes: 2048'));

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

  it("through a nats-server with a smaller max_payload than snapshot_chunk_bytes: B's warm start takes A's index", async () => {
    const a = await serveOn(small, 'a2', true, '');
    const urlA = await urlOf(a);
    await chat(urlA, LONG, 1);
    await until(async () => (await route(urlA, LONG)).overlap > 200, 'A sees the long prompt cached', 20_000);
    const onA = await route(urlA, LONG);

    const urlB = await urlOf(await serveOn(small, 'b2', true, ''));
    expect(
      await metric(urlB, 'kvgate_replica_snapshot_transfers_total', { direction: 'warm_start', outcome: 'ok' }),
    ).toBe(1);
    expect(await metric(urlB, 'kvgate_replica_snapshot_bytes_total', { direction: 'received' })).toBeGreaterThan(
      3 * MAX_PAYLOAD,
    );
    expect(await route(urlB, LONG)).toEqual(onA);
    // A told the operator its chunks are smaller than configured, and still hears B (its connection reads on).
    // (One line: an op larger than the bus takes is reported on a line of its own, also with its maxPayload.)
    expect(
      jsonLogLines(a).filter((l) => l.maxPayload === MAX_PAYLOAD && l.configuredChunkBytes !== undefined).length,
    ).toBe(1);
    await until(async () => (await metric(urlA, 'kvgate_replica_peers')) === 1, 'A hears B', 10_000);
  }, 90_000);
});
