/**
 * A salted chain continued on a replica that warm-started: a real nats-server, a real mocker engine imitating
 * vLLM (a request's cache_salt only in block 0's extra_keys of the event that starts at the root), and
 * `kvgate serve` processes. Replica A sees a salted prompt's root event; replica B then warm-starts from A's
 * snapshot, whose cursor is past that event, so B never sees it. The follow-up turn of the same salted
 * conversation is stored by the engine under a parent of the first turn's chain, without the salt: B must take
 * the parent's salt from A's snapshot and match the salted follow-up as deep as A does. Without the salts in the
 * snapshot, B hashed the follow-up's blocks unsalted and matched only the first turn's.
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
const SALT = 'tenant-7';
const QUESTION =
  'Compare the replication protocols of the three storage systems, with their failure modes and recovery times. '.repeat(
    6,
  );
const FIRST = [{ role: 'user', content: QUESTION }];
const FOLLOW = [
  ...FIRST,
  { role: 'assistant', content: 'The first uses a quorum, the second a primary with followers, the third a log.' },
  {
    role: 'user',
    content: 'Now list, for each of them, what an operator must watch during a rolling upgrade. '.repeat(4),
  },
];

interface Engine {
  readonly url: string;
  readonly kv_events: readonly string[];
  readonly kv_events_replay: readonly string[];
}

interface Route {
  readonly worker: number;
  readonly overlap: number;
  readonly blocks: number;
}

function config(dir: string, id: string, nats: string, engine: Engine): string {
  const file = join(dir, `${id}.yaml`);
  writeFileSync(
    file,
    [
      'listen: { port: 0 }',
      'preprocess: { threads: 0 }',
      `replicas: { router_id: ${id}, nats: { servers: ["${nats}"] }, heartbeat_ms: 200, peer_timeout_ms: 2000, warm_start: true, warm_start_timeout_ms: 30000 }`,
      'models:',
      `  - name: ${MODEL}`,
      '    tokenizer: demo',
      '    workers:',
      `      - { id: 1, url: "${engine.url}", kv_events: { endpoint: "${engine.kv_events[0]}", replay: "${engine.kv_events_replay[0]}" } }`,
      '',
    ].join('\n'),
  );
  return file;
}

async function route(url: string, messages: unknown): Promise<Route> {
  const res = await fetch(`${url}/v1/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, messages, cache_salt: SALT }),
  });
  expect(res.status).toBe(200);
  const j = (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number; prompt_blocks: number };
  return { worker: j.worker.worker_id, overlap: j.overlap_blocks, blocks: j.prompt_blocks };
}

async function chat(url: string, messages: unknown): Promise<void> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 2, messages, cache_salt: SALT }),
  });
  await res.arrayBuffer();
  expect(res.status).toBe(200);
}

describe('a salted chain continued after a warm start', () => {
  let nats: NatsServer;
  let mocker: CliProcess;
  let engine: Engine;
  let dir: string;
  const procs: CliProcess[] = [];

  beforeAll(async () => {
    nats = await startNatsServer();
    const m = await startMockerCli([
      '--model',
      MODEL,
      '--tokenizer',
      'demo',
      '--speedup',
      '50',
      '--kv-events-replay-port',
      '0',
    ]);
    mocker = m.proc;
    engine = m.engines[0] as unknown as Engine;
    dir = mkdtempSync(join(tmpdir(), 'kvgate-warm-salt-'));
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled([...procs.map((p) => p.stop()), mocker?.stop()]);
    await nats?.stop();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  const serve = async (id: string): Promise<{ proc: CliProcess; url: string }> => {
    const proc = startCli(['serve', '-c', config(dir, id, nats.url, engine)]);
    procs.push(proc);
    return { proc, url: (await proc.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'listening', 30_000))[1]! };
  };

  it("B, warm-started after the chain's root event, matches the salted follow-up as deep as A", async () => {
    const a = await serve('a');
    await chat(a.url, FIRST);
    await until(async () => (await route(a.url, FIRST)).overlap > 2, 'A sees the salted first turn cached', 10_000);
    const firstOnA = await route(a.url, FIRST);

    // B's snapshot from A is taken past the first turn's root event: B never sees that event.
    const b = await serve('b');
    expect(
      await metric(b.url, 'kvgate_replica_snapshot_transfers_total', { direction: 'warm_start', outcome: 'ok' }),
    ).toBe(1);
    expect(await route(b.url, FIRST)).toEqual(firstOnA);

    // The follow-up's blocks: an event whose parent is a block of the first turn, its salt unsaid.
    await chat(a.url, FOLLOW);
    await until(
      async () => (await route(a.url, FOLLOW)).overlap > firstOnA.overlap + 2,
      'A sees the salted follow-up cached',
      10_000,
    );
    const followOnA = await route(a.url, FOLLOW);
    let last: Route | undefined;
    await until(
      async () => (last = await route(b.url, FOLLOW)).overlap >= followOnA.overlap,
      `B matching the follow-up as deep as A (${followOnA.overlap} blocks)`,
      10_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; B matched ${last?.overlap} block(s)`);
    });
    expect(last).toEqual(followOnA);
    // The seeding told how many salted blocks it took.
    const seeded = jsonLogLines(b.proc).find((l) => typeof l.saltedBlocks === 'number');
    expect(seeded?.saltedBlocks).toBeGreaterThanOrEqual(firstOnA.overlap);
  }, 90_000);
});
