/**
 * Issue 23, section 2: a flood of random frames on the KV-event paths of every
 * engine. Four `kvgate mocker` engines (one process, replay ROUTERs on, a
 * replay buffer shorter than their history, as on any engine that has served
 * a while) behind a real `kvgate serve`; the gateway subscribes to each engine
 * through a relay (test/helpers/zmq-relay.ts) that pushes seeded random
 * frames into the stream while the engine's own batches keep flowing, and
 * replays from the engine itself.
 *
 * Required: garbage is dropped and counted, no slot is reset, and once the
 * flood stops every worker's index holds exactly what its engine holds (the
 * `kvgate_worker_index_blocks` gauge against the engine's cached blocks, and
 * the overlap of the oldest prompts, long gone from the replay buffer); and
 * events published right after the flood are applied within seconds.
 *
 * Runs the compiled CLI (bin/kvgate.js -> dist/), as `npm test` builds it first.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRng } from '../../../src/common/index.js';
import { startServeCli } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';
import { KvEventRelay } from '../../helpers/zmq-relay.js';

const MODEL = 'mock-model';
const BLOCK = 16;
const ENGINES = 4;
/** Batches each engine keeps for replay: fewer than it publishes before the flood. */
const BUFFER_STEPS = 16;
/** Random messages per relay, per flood. */
const FLOOD = 40_000;

interface EngineLine {
  url: string;
  kv_events: string[];
  kv_events_replay: string[];
}

async function post(url: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe("a random-frame flood on every engine's KV-event path (issue 23)", () => {
  let suite: MockerSuite;
  let engines: EngineLine[];
  let relays: KvEventRelay[];
  let url: string;
  const rng = seededRng(23);
  /** Prompts sent to each worker (index = worker id - 1), oldest first. */
  const sent: number[][][] = Array.from({ length: ENGINES }, () => []);

  beforeAll(async () => {
    suite = await startMockerSuite(
      'kv-event-flood',
      [
        '--kv-events-replay-port',
        '0',
        '--kv-events-buffer-steps',
        String(BUFFER_STEPS),
        '--speedup',
        '100',
        '--tokenizer',
        'demo',
        '--seed',
        '23',
      ],
      ENGINES,
    );
    engines = suite.engines as unknown as EngineLine[];
    relays = await Promise.all(engines.map((e) => KvEventRelay.start(e.kv_events[0]!)));
    const workers = engines.map(
      (e, i) =>
        `  - { id: ${i + 1}, url: "${e.url}", kv_events: { endpoint: "${relays[i]!.endpoint}", replay: "${e.kv_events_replay[0]}" } }`,
    );
    const file = suite.write(
      'gateway.yaml',
      serveConfig(
        MODEL,
        [`block_size: ${BLOCK}`, 'workers:', ...workers],
        ['admin: { enabled: true }', 'preprocess: { threads: 0 }', 'kv_events: { inconsistent_after_ms: 2000 }'],
      ),
    );
    const started = await startServeCli(file);
    suite.procs.push(started.proc);
    url = started.url;
    await Promise.all(relays.map((r) => r.waitForSubscriber()));
  }, 60_000);
  afterAll(async () => {
    await Promise.all((relays ?? []).map((r) => r.close()));
    await suite?.stop();
  });

  /** A fresh prompt of three full blocks and one token, served by worker `id`: the engine stores three blocks and publishes one batch. */
  const complete = async (id: number): Promise<number[]> => {
    const prompt = Array.from({ length: 3 * BLOCK + 1 }, () => 1000 + Math.floor(rng() * 50_000));
    const r = await post(`${url}/v1/completions`, {
      model: MODEL,
      prompt,
      max_tokens: 1,
      nvext: { backend_instance_id: id },
    });
    expect(r.status).toBe(200);
    sent[id - 1]!.push(prompt);
    return prompt;
  };
  /** Blocks of `prompt` the gateway believes worker `id` holds. */
  const overlap = async (id: number, prompt: number[]): Promise<number> => {
    const r = await post(`${url}/v1/route`, { model: MODEL, prompt, nvext: { backend_instance_id: id } });
    expect(r.status).toBe(200);
    return r.json.overlap_blocks as number;
  };
  const engineBlocks = async (e: EngineLine): Promise<number> =>
    ((await (await fetch(`${e.url}/admin/state`)).json()) as { ranks: { cachedBlocks: number }[] }).ranks[0]!
      .cachedBlocks;
  const indexBlocks = (id: number): Promise<number> =>
    metric(url, 'kvgate_worker_index_blocks', { worker_id: String(id) });
  /** Every worker's index holds as many blocks as its engine caches, and every prompt sent to it in full. */
  const agrees = async (): Promise<boolean> => {
    for (const [i, e] of engines.entries()) {
      const held = await engineBlocks(e);
      if (held === 0 || (await indexBlocks(i + 1)) !== held) return false;
      for (const p of sent[i]!) if ((await overlap(i + 1, p)) !== 3) return false;
    }
    return true;
  };
  /** Floods every relay at once while each engine serves `during` more requests. */
  const floodAll = async (during: number): Promise<void> => {
    const flooding = relays.map((r) => r.flood(FLOOD, rng));
    for (let k = 0; k < during; k++) await Promise.all(engines.map((_, i) => complete(i + 1)));
    await Promise.all(flooding);
  };

  /** Until every worker's index follows its engine (the subscriptions are live: ZMQ joins late). */
  const warm = (): Promise<void> =>
    until(
      async () => {
        await Promise.all(engines.map((_, i) => complete(i + 1)));
        return agrees();
      },
      "every worker's events followed",
      30_000,
    );

  it("every worker's index again holds what its engine holds once the flood stops, with no slot reset", async () => {
    await warm();
    // History longer than the replay buffer: a slot cleared now could not be rebuilt from the engine.
    for (let k = 0; k < BUFFER_STEPS + 8; k++) await Promise.all(engines.map((_, i) => complete(i + 1)));
    await until(agrees, 'the history applied', 20_000);

    await floodAll(10);
    const ended = performance.now();
    await until(agrees, 'every index equal to its engine after the flood', 20_000);
    const healedMs = performance.now() - ended;

    expect(await metric(url, 'kvgate_kv_event_resets_total')).toBe(0);
    expect(await metric(url, 'kvgate_kv_event_publisher_restarts_total')).toBe(0);
    for (let id = 1; id <= ENGINES; id++) {
      expect(await metric(url, 'kvgate_kv_event_decode_errors_total', { worker_id: String(id) })).toBeGreaterThan(0);
      expect(
        await metric(url, 'kvgate_kv_event_dropped_total', { worker_id: String(id), reason: 'garbage' }),
      ).toBeGreaterThan(0);
    }
    expect(healedMs).toBeLessThan(10_000);
  }, 180_000);

  it('events published right after a flood are applied within seconds', async () => {
    await warm();
    await floodAll(0);
    const after = await Promise.all(engines.map((_, i) => complete(i + 1)));
    const published = performance.now();
    await until(
      async () => {
        for (const [i, p] of after.entries()) if ((await overlap(i + 1, p)) !== 3) return false;
        return true;
      },
      'the batches published after the flood applied',
      20_000,
    );
    expect(performance.now() - published).toBeLessThan(5000);
    await until(agrees, 'every index equal to its engine', 20_000);
    expect(await metric(url, 'kvgate_kv_event_resets_total')).toBe(0);
  }, 120_000);
});
