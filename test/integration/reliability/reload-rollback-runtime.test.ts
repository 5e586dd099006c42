/**
 * A reload never puts a worker back cold: `kvgate serve -c FILE` (in process, its router built by `modelRouter` with
 * a structural knob other than the file's) in front of three `kvgate mocker` engines with KV events.
 *
 * A worker that leaves loses, with its router, its prefix index (what its engine's KV events said it caches), the
 * bookings of the requests in flight on it, its health and its session pins; put back, it joins afresh. So a reload
 * that fails leaves every worker as it was only if no worker left before the failure. Two ways a stage can fail:
 * - a router refusing its knobs (as in reload-rollback.test.ts): that stage runs before any worker leaves, so the worker the file
 *   removes keeps its index and its in-flight booking, and is routed to at once (this held before the fix too);
 * - a leave that throws (an embedder's listener on the registry refuses worker 2's removal, after worker 1 left).
 *   Before the fix that rolled the reload back: worker 1 was put back and came back `joining`, with an empty index
 *   and its in-flight stream not counted (checked), and worker 2 stayed down until its next probe. Now the leaves
 *   are the reload's commit: worker 1 leaves as the file says (draining: its stream finishes), worker 2 is named
 *   (`partial`, `not_left`) and stays configured, so the next reload of the same file removes it.
 */
import { writeFileSync } from 'node:fs';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serve, type ServeHandle } from '../../../src/cli/serve.js';
import { Fleet, modelRouter } from '../../../src/fleet/index.js';
import type { MockerLine } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import {
  distinctWords,
  postChat,
  serveConfig,
  startMockerSuite,
  workerEntry,
  type MockerSuite,
} from '../../helpers/serve-suite.js';
import { openStream } from '../../helpers/drained-stream.js';
import { until } from '../../helpers/until.js';

const MODEL = 'rollback-runtime';
const MESSAGES = [{ role: 'user', content: distinctWords('warm', 400) }];

/** The router is built with this TTL; the file says the default (120 s), so new knobs are refused. */
const BUILT_TTL_SECS = 7;

const configText = (engines: readonly MockerLine[], ids: readonly number[], temperature = 0): string =>
  serveConfig(MODEL, [
    `router: { router_temperature: ${temperature} }`,
    'workers:',
    ...ids.map((id) => `  - ${workerEntry(id, engines[id - 1]!)}`),
  ]);

describe('a reload never puts a worker back cold', () => {
  let suite: MockerSuite;
  let file: string;
  let h: ServeHandle;
  let url: string;
  /** Worker 2's removal is refused while set (the embedder's listener throws). */
  let refuse = false;

  beforeAll(async () => {
    suite = await startMockerSuite('reload-rollback-runtime', ['--model', MODEL, '--tokenizer', 'demo'], 3);
    file = suite.write('kvgate.yaml', configText(suite.engines, [1, 2, 3]));
    h = (await serve(['-c', file], {
      env: {},
      logger: pino({ level: 'silent' }),
      out: { write: () => undefined },
      routers: (config) => {
        const fleet = new Fleet(config, {
          factory: (model, parts) => {
            const router = modelRouter({ ...model, router: { ...model.router, routerTtlSecs: BUILT_TTL_SECS } }, parts);
            parts.registry.on('removed', (w) => {
              if (refuse && w.id === 2) throw new Error('an embedder listener refused worker 2 leaving');
            });
            return router;
          },
        });
        return { createRouter: fleet.createRouter, status: fleet.status, close: () => fleet.close(), live: fleet };
      },
    }))!;
    url = `http://127.0.0.1:${h.gateway.addresses.public.port}`;
    await until(
      async () => Object.values(await workerStates()).join() === 'ready,ready,ready',
      'workers 1..3 ready',
      30_000,
    );
  }, 60_000);

  afterAll(async () => {
    await h?.stop();
    await suite?.stop();
  });

  /** Each worker's state, by id (draining workers included). */
  const workerStates = async (): Promise<Record<number, string>> => {
    const body = (await (await fetch(`${url}/admin/models`)).json()) as {
      models: { workers: { id: number; state: string }[] }[];
    };
    return Object.fromEntries(body.models[0]!.workers.map((w) => [w.id, w.state]));
  };
  const worker1 = (name: string): Promise<number> => metric(url, name, { model: MODEL, worker_id: '1' });
  /** Where `/v1/route` would send the prompt, and how many of its blocks that worker caches. */
  const route = async (): Promise<{ worker: number; overlap: number }> => {
    const res = await postChat(url, { model: MODEL, messages: MESSAGES, return_token_ids: false }, '/v1/route');
    const body = (await res.json()) as { worker: { worker_id: number }; overlap_blocks: number };
    return { worker: body.worker.worker_id, overlap: body.overlap_blocks };
  };

  const reload = async (): Promise<{ status: number; body: Record<string, unknown> }> => {
    const res = await fetch(`${url}/admin/reload`, { method: 'POST' });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };
  const configured = async (): Promise<number[]> =>
    (
      (await (await fetch(`${url}/admin/config`)).json()) as { models: { workers: { id: number }[] }[] }
    ).models[0]!.workers.map((w) => w.id);

  it('a reload that fails keeps the worker it removes as it was: its index and in-flight booking, routed at once', async () => {
    // A long stream on worker 1: its prompt's blocks reach the index through worker 1's KV events.
    const res = await postChat(url, {
      model: MODEL,
      messages: MESSAGES,
      stream: true,
      max_tokens: 4000,
      nvext: { backend_instance_id: 1 },
    });
    expect(res.headers.get('x-kvgate-worker')).toBe('1');
    const reader = res.body!.getReader();
    await reader.read();
    await until(async () => (await worker1('kvgate_worker_index_blocks')) > 0, "worker 1's KV events indexed");
    const indexed = await worker1('kvgate_worker_index_blocks');
    expect(await worker1('kvgate_worker_active_requests')).toBe(1);
    const before = await route();
    expect(before.worker).toBe(1);
    expect(before.overlap).toBeGreaterThan(0);

    // Removes worker 1 and changes the knobs the router refuses.
    writeFileSync(file, configText(suite.engines, [2, 3], 0.5));
    const failed = await reload();
    expect(failed.status).toBe(500);
    expect(failed.body).toMatchObject({
      error: { code: 'KVG_ERR_RELOAD_FAILED', message: expect.stringMatching(/models\[0\]\.router.*rolled back/) },
    });

    // At once, no new KV event needed: worker 1 is routed to with what its engine caches and its stream still booked.
    expect(await workerStates()).toEqual({ 1: 'ready', 2: 'ready', 3: 'ready' });
    // Its stream's output blocks may have been indexed meanwhile.
    expect(await worker1('kvgate_worker_index_blocks')).toBeGreaterThanOrEqual(indexed);
    expect(await worker1('kvgate_worker_active_requests')).toBe(1);
    expect(await route()).toEqual(before);
    await reader.cancel();
  }, 60_000);

  it('a leave that throws rolls nothing back: the workers that left stay gone, the one still there is named', async () => {
    const res = await postChat(url, {
      model: MODEL,
      messages: MESSAGES,
      stream: true,
      max_tokens: 800,
      nvext: { backend_instance_id: 1 },
    });
    expect(res.headers.get('x-kvgate-worker')).toBe('1');
    const stream = await openStream(res);

    // Removes workers 1 and 2; worker 2's removal is refused after worker 1 left.
    refuse = true;
    writeFileSync(file, configText(suite.engines, [3]));
    const partial = await reload();
    refuse = false;
    expect(partial).toMatchObject({
      status: 200,
      body: { status: 'partial', not_left: [{ worker_id: 2, model: MODEL, reason: expect.stringMatching(/refused/) }] },
    });
    expect(partial.body['not_joined']).toBeUndefined();
    // Worker 1 is not put back (joining, cold): it drains, its stream finishes. Worker 2 stays configured.
    expect((await workerStates())[1]).toBe('draining');
    await stream.finish();
    expect(await configured()).toEqual([3, 2]);
    expect(await metric(url, 'kvgate_config_reloads_total', { outcome: 'partial' })).toBe(1);

    // The same file again removes worker 2.
    const applied = await reload();
    expect(applied).toMatchObject({ status: 200, body: { status: 'reloaded' } });
    expect(await configured()).toEqual([3]);
  }, 60_000);
});
