/**
 * A hybrid-attention model after a warm start: a real nats-server, two real mocker engines with a sliding-window
 * group beside full attention (`--kv-groups full,sliding:64`, their KV events published per group as vLLM's hybrid
 * KV-cache manager does) and two `kvgate serve` processes. Replica A saw every event; replica B warm-starts from
 * A's snapshot, whose cursor is past them all, so B never sees those events: whatever B knows of the engines'
 * window groups before its start comes from the snapshot.
 *
 * The scene is the one of test/integration/gateway/hybrid-mocker.test.ts: engine 1 served a 40-block document
 * then a 48-block unrelated prompt, so it still holds the document's first 15 blocks in full attention but not the
 * window before any of them (it can reuse none); engine 2 served the document's first 8 blocks and holds them
 * whole. B must route as A does, at once and after new traffic has shown it the window group. Without the groups
 * in the snapshot, B took the model for full attention until an event of the window group came (the request on
 * the document went to engine 1 on 15 blocks it cannot reuse), and then credited nothing the snapshot held (the
 * 48-block prompt engine 1 holds in every group matched 0 blocks there).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonLogLines, startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { startNatsServer, type NatsServer } from '../../helpers/nats-server.js';
import { mulberry32 } from '../../helpers/rng.js';
import { serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';
const BS = 16;

interface Engine {
  readonly url: string;
  readonly kv_events: readonly string[];
  readonly kv_events_replay: readonly string[];
}

interface Route {
  readonly worker: number;
  readonly overlap: number;
}

async function postJson(url: string, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const json = (await res.json()) as Record<string, unknown>;
  if (res.status !== 200) throw new Error(`${path} answered ${res.status}: ${JSON.stringify(json)}`);
  return json;
}

/** The decision of the replica at `url` for `prompt` (optionally pinned to `worker`), without dispatching. */
async function route(url: string, prompt: readonly number[], worker?: number): Promise<Route> {
  const nvext = worker === undefined ? {} : { nvext: { backend_instance_id: worker } };
  const a = await postJson(url, '/v1/route', { model: MODEL, prompt, max_tokens: 1, ...nvext });
  return { worker: (a.worker as { worker_id: number }).worker_id, overlap: a.overlap_blocks as number };
}

/** Serves `prompt` on `worker` through the replica at `url`, and waits until that replica indexed it whole. */
async function serve(url: string, prompt: readonly number[], worker: number): Promise<void> {
  await postJson(url, '/v1/completions', {
    model: MODEL,
    prompt,
    max_tokens: 1,
    nvext: { backend_instance_id: worker },
  });
  const full = Math.floor(prompt.length / BS);
  await until(async () => (await route(url, prompt, worker)).overlap === full, `the prompt indexed on ${worker}`);
}

function tokens(rng: () => number, n: number): number[] {
  return Array.from({ length: n }, () => 1000 + Math.floor(rng() * 30_000));
}

describe('a hybrid-attention model after a warm start', () => {
  let nats: NatsServer;
  let suite: MockerSuite;
  let engines: readonly Engine[];

  beforeAll(async () => {
    nats = await startNatsServer();
    suite = await startMockerSuite(
      'warm-hybrid',
      [
        ...['--speedup', '1000', '--block-size', String(BS), '--num-gpu-blocks', '64', '--tokenizer', 'demo'],
        ...['--kv-groups', 'full,sliding:64', '--kv-events-replay-port', '0'],
      ],
      2,
    );
    engines = suite.engines as unknown as Engine[];
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
    await nats?.stop();
  });

  const replica = async (id: string): Promise<{ proc: CliProcess; url: string }> => {
    const file = suite.write(
      `${id}.yaml`,
      serveConfig(
        MODEL,
        [
          `block_size: ${BS}`,
          'workers:',
          ...engines.map(
            (e, i) =>
              `  - { id: ${i + 1}, url: "${e.url}", kv_events: { endpoint: "${e.kv_events[0]}", replay: "${e.kv_events_replay[0]}" } }`,
          ),
        ],
        [
          'preprocess: { threads: 0 }',
          `replicas: { router_id: ${id}, nats: { servers: ["${nats.url}"] }, heartbeat_ms: 200, peer_timeout_ms: 2000, warm_start: true, warm_start_timeout_ms: 30000 }`,
        ],
      ),
    );
    const gw = await startServeCli(file);
    suite.procs.push(gw.proc);
    return gw;
  };

  it('B, warm-started after every event, routes as A at once and after new traffic', async () => {
    const rng = mulberry32(7);
    const doc = tokens(rng, 40 * BS + 3);
    const other = tokens(rng, 48 * BS + 5);
    const request = [...doc.slice(0, 16 * BS), ...tokens(rng, 4 * BS + 3)];
    const fresh = tokens(rng, 4 * BS + 1);

    const a = await replica('a');
    await serve(a.url, doc, 1);
    await serve(a.url, other, 1);
    await serve(a.url, doc.slice(0, 8 * BS), 2);
    const onA = { request: await route(a.url, request), other: await route(a.url, other) };
    // The scene holds on A: engine 1 cannot reuse the document (its window slid out), engine 2 can reuse 8 blocks;
    // the 48-block prompt is held in every group of engine 1.
    expect(onA).toEqual({ request: { worker: 2, overlap: 8 }, other: { worker: 1, overlap: 48 } });

    const b = await replica('b');
    expect(
      await metric(b.url, 'kvgate_replica_snapshot_transfers_total', { direction: 'warm_start', outcome: 'ok' }),
    ).toBe(1);
    const atStart = { request: await route(b.url, request), other: await route(b.url, other) };

    // New traffic on engine 2 publishes window-group events that B does see (its first, without the snapshot's
    // groups); waited for until B knows the window group and holds the new prompt in it.
    await serve(b.url, fresh, 2);
    const learned = (): boolean => jsonLogLines(b.proc).some((l) => l.msg === 'KV-cache group learned');
    await until(learned, 'B knowing the window group');
    await until(async () => (await route(b.url, fresh, 2)).overlap === 4, 'the new prompt in every group on B');
    const afterTraffic = { request: await route(b.url, request), other: await route(b.url, other) };

    expect({ atStart, afterTraffic }).toEqual({ atStart: onA, afterTraffic: onA });
    // The seeding said how many window-group blocks it took from the snapshot.
    const seeded = jsonLogLines(b.proc).filter((l) => typeof l.groupBlocks === 'number');
    expect(seeded.reduce((n, l) => n + (l.groupBlocks as number), 0)).toBeGreaterThanOrEqual(48 + 8);
  }, 120_000);
});
