/**
 * A reload that fails while it is applied is rolled back whole: `kvgate serve -c FILE` (in process, its fleet's
 * routers built by the default factory) in front of a `kvgate mocker` engine, over real sockets.
 *
 * The failure is a real one of the running gateway: model `b`'s router was built with a structural knob
 * (`router_ttl_secs`) other than the file's, as an embedder's router factory may build it, so the router refuses any
 * new knobs of `b` (KvScheduler: a structural knob cannot change on a running router). The file it refuses also
 * lowers `limits.max_messages` and changes model `a`'s `router_temperature`, both applied before `b`'s router is
 * reached. Before the fix both stayed applied (the HTTP edge refused a 3-message chat under the new limit, `a`'s
 * router routed with the new temperature) while the reloader kept the old file as the running configuration, and
 * `POST /admin/reload` answered the router's own error, not a reload's.
 */
import { writeFileSync } from 'node:fs';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serve, type ServeHandle } from '../../../src/cli/serve.js';
import { Fleet, modelRouter } from '../../../src/fleet/index.js';
import type { ModelRouter } from '../../../src/routing/index.js';
import { postChat, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const A = 'rollback-a';
const B = 'rollback-b';
/** `b`'s router is built with this TTL; the file says the default (120 s). */
const BUILT_TTL_SECS = 7;

function configText(url: string, o: { maxMessages: number; temperatureA: number; temperatureB: number }): string {
  const model = (name: string, id: number, temperature: number): string[] => [
    `  - name: ${name}`,
    '    tokenizer: demo',
    `    router: { use_kv_events: false, router_temperature: ${temperature} }`,
    `    workers: [{ id: ${id}, url: "${url}" }]`,
  ];
  return [
    'listen: { port: 0 }',
    'admin: { enabled: true }',
    'preprocess: { threads: 0 }',
    `limits: { max_messages: ${o.maxMessages} }`,
    'models:',
    ...model(A, 1, o.temperatureA),
    ...model(B, 2, o.temperatureB),
    '',
  ].join('\n');
}

describe('a reload that fails while it is applied', () => {
  let suite: MockerSuite;
  let file: string;
  let engineUrl: string;
  let h: ServeHandle;
  let url: string;
  const lines: Record<string, unknown>[] = [];

  beforeAll(async () => {
    suite = await startMockerSuite('reload-rollback', ['--model', A, '--tokenizer', 'demo'], 1);
    engineUrl = suite.engines[0]!.url;
    file = suite.write('kvgate.yaml', configText(engineUrl, { maxMessages: 16, temperatureA: 0, temperatureB: 0 }));
    const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
    h = (await serve(['-c', file], {
      env: {},
      logger,
      out: { write: () => undefined },
      routers: (config) => {
        const fleet = new Fleet(config, {
          factory: (model, parts) =>
            modelRouter(
              model.name === B ? { ...model, router: { ...model.router, routerTtlSecs: BUILT_TTL_SECS } } : model,
              parts,
            ),
        });
        return { createRouter: fleet.createRouter, status: fleet.status, close: () => fleet.close(), live: fleet };
      },
    }))!;
    url = `http://127.0.0.1:${h.gateway.addresses.public.port}`;
    await until(async () => (await chat(1)).status === 200, 'model a served');
  }, 60_000);

  afterAll(async () => {
    await h?.stop();
    await suite?.stop();
  });

  /** A chat of `n` messages to model `a`; its status (the body is read). */
  async function chat(n: number): Promise<{ status: number; code?: string }> {
    const messages = Array.from({ length: n }, (_, i) => ({ role: 'user', content: `message ${i}` }));
    const res = await postChat(url, { model: A, messages, max_tokens: 2 });
    const body = (await res.json()) as { error?: { code: string } };
    return { status: res.status, ...(body.error !== undefined ? { code: body.error.code } : {}) };
  }
  const temperatureOfA = (): number | undefined =>
    (h.gateway.routers.find((r) => r.model === A) as ModelRouter).decode.kvRouter?.config.routerTemperature;
  const maxMessages = async (): Promise<number> =>
    ((await (await fetch(`${url}/admin/config`)).json()) as { limits: { maxMessages: number } }).limits.maxMessages;
  const reload = async (): Promise<{ status: number; body: Record<string, unknown> }> => {
    const res = await fetch(`${url}/admin/reload`, { method: 'POST' });
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  };

  it('is rolled back whole, answered KVG_ERR_RELOAD_FAILED and counted; the next good reload applies cleanly', async () => {
    expect(await chat(3)).toEqual({ status: 200 });

    // Lowers the edge limit and a's temperature (applied first), and changes b's knobs, which b's router refuses.
    writeFileSync(file, configText(engineUrl, { maxMessages: 2, temperatureA: 0.7, temperatureB: 0.5 }));
    const failed = await reload();
    expect(failed.status).toBe(500);
    expect(failed.body).toMatchObject({ error: { code: 'KVG_ERR_RELOAD_FAILED' } });
    expect((failed.body['error'] as { message: string }).message).toMatch(
      /while applying models\[1\]\.router: routerTtlSecs cannot change on a running router.*rolled back/,
    );

    // The running gateway is the old configuration whole: the edge limit, a's router, the admin view.
    expect(await chat(3)).toEqual({ status: 200 });
    expect(temperatureOfA()).toBe(0);
    expect(await maxMessages()).toBe(16);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('kvgate_config_reloads_total{trigger="admin",outcome="failed"} 1');
    expect(lines).toContainEqual(
      expect.objectContaining({ level: 50, stage: 'models[1].router', msg: expect.stringMatching(/reload failed/) }),
    );

    // A file b's router can take (its knobs as they run): applied against the old configuration, every change named.
    writeFileSync(file, configText(engineUrl, { maxMessages: 2, temperatureA: 0.7, temperatureB: 0 }));
    const applied = await reload();
    expect(applied).toMatchObject({ status: 200, body: { status: 'reloaded' } });
    expect((applied.body['changes'] as { path: string }[]).map((c) => c.path)).toEqual([
      'limits.max_messages',
      'models[0].router.router_temperature',
    ]);
    expect(await chat(3)).toMatchObject({ status: 400 });
    expect(await chat(2)).toEqual({ status: 200 });
    expect(temperatureOfA()).toBe(0.7);
    expect(await maxMessages()).toBe(2);
    const after = await (await fetch(`${url}/metrics`)).text();
    expect(after).toContain('kvgate_config_reloads_total{trigger="admin",outcome="applied"} 1');
    expect(after).toContain('kvgate_config_reloads_total{trigger="admin",outcome="failed"} 1');
  }, 60_000);
});
