/**
 * A worker a discovery source brings while `kvgate serve` is starting is served from the start: real processes
 * (`kvgate serve -c FILE`, a `kvgate mocker` engine) and the Kubernetes API double (test/helpers/kube-api-double.ts).
 *
 * The window: each model's discovery sources start with its router, while the gateway is still starting (its
 * first probe round, then the listeners). The Service's slice is listed before the gateway starts, and the
 * model's static worker holds its first health probe until the gateway has logged the discovered worker's
 * join, so the join lands inside the start-up, deterministically. Once the gateway answers, `/admin/models` and
 * a pin (`backend_instance_id`) must know the worker with no later membership change: before the fix, the
 * served config was the one computed before the sources started, and only the next change brought it up to date.
 */
import type { ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import {
  answerEngineProbe,
  deferred,
  startHttpEngine,
  type HttpEngine,
  type RecordedRequest,
} from '../../helpers/http-engine.js';
import { KubeApiDouble } from '../../helpers/kube-api-double.js';
import { postChat, serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'startup-model';
const SERVICE = 'engines';
/** The first worker id the Kubernetes source gives (the `id_base` set below). */
const KUBE_ID = 500;
const MESSAGES = [{ role: 'user', content: 'Name three rivers of Europe.' }];

describe('kvgate serve serves a worker discovered while it starts', () => {
  let suite: MockerSuite;
  let api: KubeApiDouble;
  let gate: HttpEngine;
  let gateway: CliProcess;
  let url: string;
  const firstProbe = deferred();

  beforeAll(async () => {
    api = await KubeApiDouble.start();
    suite = await startMockerSuite('startup-joins', ['--model', MODEL, '--tokenizer', 'demo', '--speedup', '100'], 1);
    const engine = new URL(suite.engines[0]!.url);
    // Listed before the gateway starts: the source's first list brings it.
    api.put({
      metadata: { name: `${SERVICE}-a`, labels: { 'kubernetes.io/service-name': SERVICE } },
      ports: [{ name: 'http', port: Number(engine.port) }],
      endpoints: [{ addresses: [engine.hostname], conditions: { ready: true }, targetRef: { name: 'pod-a' } }],
    });
    // The static worker: its health probes wait for `firstProbe`, which holds the gateway's start-up.
    gate = await startHttpEngine(async (req: RecordedRequest, res: ServerResponse) => {
      if (req.url === '/health') await firstProbe.promise;
      if (!answerEngineProbe(req, res, MODEL)) res.writeHead(404).end();
    });
    const token = suite.write('token', 'test-token');
    const config = suite.write(
      'kvgate.yaml',
      serveConfig(
        MODEL,
        [
          'router_mode: round-robin',
          `workers: [{ id: 1, url: "${gate.url}" }]`,
          `kubernetes: { api_server: "${api.url}", namespace: ns, service: ${SERVICE}, port_name: http, ` +
            `token_file: ${token}, id_base: ${KUBE_ID} }`,
        ],
        ['admin: { enabled: true }', 'preprocess: { threads: 0 }', 'health: { timeout_ms: 30000 }'],
      ),
    );
    gateway = startCli(['serve', '-c', config]);
    suite.procs.push(gateway);
    await gateway.waitFor(
      new RegExp(`worker ${KUBE_ID} joins model ${MODEL} \\(kubernetes\\)`),
      'the discovered worker joining during start-up',
    );
    expect(gateway.output()).not.toMatch(/kvgate gateway started/);
    firstProbe.resolve();
    url = (await gateway.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'the gateway listening'))[1]!;
  }, 60_000);

  afterAll(async () => {
    firstProbe.resolve();
    await suite?.stop();
    await gate?.close();
    await api?.close();
  });

  const adminWorkers = async (): Promise<[number, string, string][]> => {
    const body = (await (await fetch(`${url}/admin/models`)).json()) as {
      models: { workers: { id: number; source: string; state: string }[] }[];
    };
    return body.models[0]!.workers.map((w) => [w.id, w.source, w.state]);
  };

  it('lists it in /admin/models and routes a pin to it, with no later membership change', async () => {
    expect((await adminWorkers()).map(([id, source]) => [id, source])).toEqual([
      [1, 'static'],
      [KUBE_ID, 'kubernetes'],
    ]);
    // Ready is its first probe passing, not a membership change: the served config is not recomputed for it.
    await until(async () => (await adminWorkers())[1]?.[2] === 'ready', 'the discovered worker ready');
    const r = await postChat(url, {
      model: MODEL,
      messages: MESSAGES,
      max_tokens: 2,
      nvext: { backend_instance_id: KUBE_ID },
    });
    const text = await r.text();
    expect(r.status, text).toBe(200);
    expect(r.headers.get('x-kvgate-worker')).toBe(String(KUBE_ID));
    // One join in all (no other change happened to bring the served config up to date).
    expect(gateway.output().match(/ joins model /g)).toHaveLength(1);
  }, 30_000);
});
