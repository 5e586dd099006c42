/**
 * A worker whose health probe fails for a while and passes again, with real processes: `kvgate serve` over two
 * scripted vLLM engines (their /health answer switchable) and a ZMQ publisher per engine, for each case's model
 * (one gateway serves the file's cases, each its own model).
 * - It keeps what kvgate knows of its KV cache. Worker 1 publishes the prompt's blocks once; its /health then
 *   answers 503 until it is marked down (not routed to), then 200 until it is up again. No KV event is sent after
 *   the first: the router's query endpoint must find worker 1's cached prefix at once, as an engine does not
 *   re-send the blocks it holds.
 * - A request still streaming from it counts in its load when it is up again, and is freed once when it ends
 *   (the engines' completion stream is held open until the test releases it), in KV mode with KV events, in
 *   approximate KV mode (`use_kv_events: false`) and in a load-only mode (`least-loaded`). Before, marking the
 *   worker down dropped its bookings (in the last two, whatever KV events the worker had): back up, it showed no
 *   load while its stream still ran, and the router over-sent to it.
 * - With `session_affinity: pin`, a session pinned to it goes back to it when it is up again, though the other
 *   worker holds the session's next prompt: the pin is held while it is down. Before, marking it down dropped its
 *   session pins, so after a flap its sessions were placed anew and their contexts prefilled again elsewhere.
 */
import type { ServerResponse } from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import {
  answerEngineProbe,
  completionChunk,
  deferred,
  sseEvent,
  sseHead,
  startHttpEngine,
  type HttpEngine,
} from '../../helpers/http-engine.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { encodeBatch, TestKvPublisher } from '../../helpers/zmq-publisher.js';

const BS = 16;
const BLOCKS = 6;
const PROMPT = Array.from({ length: BLOCKS * BS + 5 }, (_, i) => 5000 + ((i * 53) % 877));

/** What a model's two engine doubles answer besides the probes (`i`: the engine's index, 0 or 1). */
type Serve = (i: number, res: ServerResponse) => void | Promise<void>;

/** A case's model in the shared gateway: its two engines' /health answers, what they serve, and their publishers. */
interface FlapModel {
  readonly name: string;
  /** Its workers' ids, by engine index (worker ids are unique across a gateway). */
  readonly ids: readonly number[];
  readonly health: readonly { code: number }[];
  serve: Serve;
  readonly pubs: TestKvPublisher[];
}

/** The cases' models: each case has its own (workers, index, bookings, pins), with its config lines. */
const MODELS: Record<string, readonly string[]> = {
  'flap-model': [],
  'flap-load-kv-with-KV-events': [],
  'flap-load-approximate-kv': ['router: { use_kv_events: false }'],
  'flap-load-least-loaded': ['router_mode: least-loaded'],
  'flap-session-model': ['session_affinity: pin'],
};

describe('a worker whose health probe flaps', () => {
  const engines: HttpEngine[] = [];
  const pubs: TestKvPublisher[] = [];
  const procs: CliProcess[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-health-flap-'));
  const models = new Map<string, FlapModel>();
  let url = '';

  /**
   * One `kvgate serve` for every case: each case's model over two engine doubles of its own, engine i answering
   * /health with `health[i].code`, the probes as vLLM, and anything else with the model's `serve(i, res)`; a ZMQ
   * publisher each. The cases run one after another, and each reads its own model's series.
   */
  beforeAll(async () => {
    const lines: string[] = [];
    for (const [k, [name, modelLines]] of Object.entries(MODELS).entries()) {
      const ids = [2 * k + 1, 2 * k + 2];
      const m: FlapModel = { name, ids, health: [{ code: 200 }, { code: 200 }], serve: () => {}, pubs: [] };
      const own: HttpEngine[] = [];
      for (const [i, h] of m.health.entries()) {
        own.push(
          await startHttpEngine(async (req, res) => {
            if (req.method === 'GET' && req.url === '/health') return void res.writeHead(h.code).end();
            if (!answerEngineProbe(req, res, name)) await m.serve(i, res);
          }),
        );
        m.pubs.push(await TestKvPublisher.start());
      }
      engines.push(...own);
      pubs.push(...m.pubs);
      models.set(name, m);
      lines.push(
        `  - name: ${name}`,
        '    tokenizer: demo',
        `    block_size: ${BS}`,
        '    panic_threshold_percent: 0',
        ...modelLines.map((l) => `    ${l}`),
        '    workers:',
        ...own.map((e, i) => `      - { id: ${ids[i]}, url: "${e.url}", kv_events: "${m.pubs[i]!.endpoint}" }`),
      );
    }
    const config = join(dir, 'kvgate.yaml');
    writeFileSync(
      config,
      [
        'listen: { host: 127.0.0.1, port: 0 }',
        'preprocess: { threads: 0 }',
        'health: { interval_ms: 100, timeout_ms: 1000, unhealthy_after: 2 }',
        'models:',
        ...lines,
        '',
      ].join('\n'),
    );
    const started = await startServeCli(config);
    procs.push(started.proc);
    url = started.url;
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled(procs.map((p) => p.stop()));
    await Promise.allSettled([...engines.map((e) => e.close()), ...pubs.map((p) => p.close())]);
    rmSync(dir, { recursive: true, force: true });
  });

  /** The gateway's URL, and the case's model, its engines serving with `serve` (default: a 500). */
  function flapGateway(
    model: string,
    serve: Serve = (_i, res) => void res.writeHead(500).end(),
  ): FlapModel & { url: string } {
    const m = models.get(model)!;
    m.serve = serve;
    return { ...m, url };
  }

  it('is routed with its cached prefix as soon as it is healthy again, without a new KV event', async () => {
    const model = 'flap-model';
    const { url, health, pubs, ids } = flapGateway(model);
    const route = (): Promise<Routed> => routeQuery(url, model);

    await cachePrompt(pubs[0]!, url, model, ids[0]!);

    // Unhealthy: marked down, so not routed to (its cached prefix does not draw the request).
    await flap(url, model, health[0]!, ids[0]!, 'down');
    const whileDown = await route();
    expect(whileDown.worker.worker_id).toBe(ids[1]);
    expect(whileDown.overlap_blocks).toBe(0);

    // Healthy again: routed at once with what it cached, no KV event sent since.
    await flap(url, model, health[0]!, ids[0]!, 'up');
    const back = await route();
    expect(back).toMatchObject({ worker: { worker_id: ids[0] }, overlap_blocks: BLOCKS });
  }, 60_000);

  // `blocks`: the mode books KV blocks (the load-only modes count requests alone). Each mode's model is in MODELS.
  it.each([
    { mode: 'kv with KV events', blocks: true },
    { mode: 'approximate kv', blocks: true },
    { mode: 'least-loaded', blocks: false },
  ])(
    'counts a request in flight in its load when it is up again, and frees it once when it ends ($mode)',
    async (c) => {
      const model = `flap-load-${c.mode.replaceAll(' ', '-')}`;
      const release = deferred();
      /** The index of each engine that got a completion. */
      const servedBy: number[] = [];
      const serve = async (i: number, res: ServerResponse): Promise<void> => {
        servedBy.push(i);
        sseHead(res);
        res.write(sseEvent(completionChunk('a')));
        await release.promise;
        res.end(sseEvent(completionChunk('b', 'length')) + sseEvent('[DONE]'));
      };
      const { url, health, ids } = flapGateway(model, serve);
      const active = (id: number): Promise<number> =>
        metric(url, 'kvgate_worker_active_requests', { model, worker_id: String(id) });
      const blocks = (id: number): Promise<number> =>
        metric(url, 'kvgate_worker_active_decode_blocks', { model, worker_id: String(id) });

      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model, prompt: 'the quick brown fox '.repeat(20), max_tokens: 8, stream: true }),
      });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const first = await reader.read();
      expect(first.done).toBe(false);
      expect(servedBy).toHaveLength(1);
      const i = servedBy[0]!;
      const id = ids[i]!;
      expect(await active(id)).toBe(1);
      const held = c.blocks ? await blocks(id) : 0;
      if (c.blocks) expect(held).toBeGreaterThan(0);

      // Marked down with its stream running: not routed to, its load series gone while down.
      await flap(url, model, health[i]!, id, 'down');
      // Up again: its load is what its still-running request holds.
      await flap(url, model, health[i]!, id, 'up');
      expect(await active(id)).toBe(1);
      if (c.blocks) expect(await blocks(id)).toBe(held);

      // The stream ends: freed once, nothing left on either worker.
      release.resolve();
      for (let r = await reader.read(); r.done !== true; r = await reader.read()) {
        /* drain */
      }
      await until(async () => (await active(id)) === 0, `worker ${id}'s request freed`);
      expect(await metric(url, 'kvgate_worker_active_requests', { model })).toBe(0);
      if (c.blocks) expect(await metric(url, 'kvgate_worker_active_decode_blocks', { model })).toBe(0);
    },
    60_000,
  );

  it("sends a pinned session back to it when it is up again, against the other worker's cached prefix", async () => {
    const model = 'flap-session-model';
    /** The index of each engine that got a completion. */
    const servedBy: number[] = [];
    const { url, health, pubs, ids } = flapGateway(model, (i, res) => {
      servedBy.push(i);
      sseHead(res);
      res.end(sseEvent(completionChunk('a', 'length')) + sseEvent('[DONE]'));
    });
    const turn = async (prompt: readonly number[]): Promise<number> => {
      const res = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-session-id': 'agent-1' },
        body: JSON.stringify({ model, prompt, max_tokens: 1, stream: true }),
      });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
      return servedBy.at(-1)!;
    };

    // The session's first turn binds it to A; the other worker, B, then caches the prompt of its next turn
    // (the first turn's prompt shares nothing with it, so nothing draws that turn to A but the pin).
    const a = await turn(PROMPT.map((t) => t + 1000));
    const b = 1 - a;
    await cachePrompt(pubs[b]!, url, model, ids[b]!);

    await flap(url, model, health[a]!, ids[a]!, 'down');
    await flap(url, model, health[a]!, ids[a]!, 'up');
    expect(await turn(PROMPT)).toBe(a);
    const pins = (event: string): Promise<number> => metric(url, 'kvgate_router_session_pins_total', { model, event });
    expect(await pins('held')).toBe(1);
    expect(await pins('returned')).toBe(1);
    expect(await pins('dropped')).toBe(0);
  }, 60_000);
});

interface Routed {
  readonly worker: { readonly worker_id: number };
  readonly overlap_blocks: number;
}

/** Where the gateway at `url` would route PROMPT (query-only: books nothing). */
async function routeQuery(url: string, model: string): Promise<Routed> {
  const res = await fetch(`${url}/v1/route`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: PROMPT, max_tokens: 1 }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Routed;
}

/** Worker `id` publishes PROMPT's full blocks once; resolves when the router matches them all on it. */
async function cachePrompt(pub: TestKvPublisher, url: string, model: string, id: number): Promise<void> {
  await pub.waitForSubscribers(1);
  const tokens = PROMPT.slice(0, BLOCKS * BS);
  const hashes = Array.from({ length: BLOCKS }, (_, i) => BigInt(0xf1a900 + i));
  await pub.publishPayload(encodeBatch([{ type: 'stored', blockHashes: hashes, parent: null, tokens, blockSize: BS }]));
  await until(async () => {
    const r = await routeQuery(url, model);
    return r.overlap_blocks === BLOCKS && r.worker.worker_id === id;
  }, `worker ${id}'s blocks indexed and matched`);
}

/** `model`'s worker `id`'s /health answers 503 (`down`) or 200 (`up`); resolves when the gateway has marked it so. */
async function flap(
  url: string,
  model: string,
  health: { code: number },
  id: number,
  to: 'down' | 'up',
): Promise<void> {
  health.code = to === 'down' ? 503 : 200;
  const up = to === 'down' ? 1 : 2;
  await until(async () => (await metric(url, 'kvgate_worker_up', { model })) === up, `worker ${id} ${to}`, 10_000);
}
