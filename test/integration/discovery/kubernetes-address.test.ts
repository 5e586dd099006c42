/**
 * `kvgate serve`'s Kubernetes source when two listed pods share an address: a pod's IP reused by its replacement
 * while the old pod is still listed. Real processes: `kvgate mocker` as the engine at that address, `kvgate serve -c
 * FILE` whose model has a `kubernetes` section; the API server is the protocol double (test/helpers/kube-api-double.ts:
 * no Kubernetes API server can run here). One engine answers on one `ip:port`, so it is one worker, the newer pod's
 * (its load and KV events counted once); the handover is a warn line and a count; the old pod's leaving the list
 * takes nothing from the worker the new pod serves.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { KubeApiDouble, type Slice } from '../../helpers/kube-api-double.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { postChat, serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'k8s-model';
const SERVICE = 'engines';

describe('kvgate serve: two pods listed on one address by the Kubernetes source', () => {
  let suite: MockerSuite;
  let kube: KubeApiDouble;
  let gateway: CliProcess;
  let url: string;
  let engine: MockerLine;
  let host: string;
  let port: number;

  /** One slice of the Service listing `pods` (all Ready) on the engine's address. */
  const slice = (name: string, pods: string[]): Slice => ({
    metadata: {
      name,
      labels: { 'kubernetes.io/service-name': SERVICE },
      annotations: { 'kvgate.io/kv-events-port': new URL(engine.kv_events[0]!).port },
    },
    ports: [{ name: 'http', port }],
    endpoints: pods.map((pod) => ({ addresses: [host], conditions: { ready: true }, targetRef: { name: pod } })),
  });
  /** The workers `/admin/models` shows that are not draining: id, url and state. */
  const workers = async (): Promise<[number, string, string][]> => {
    const body = (await (await fetch(`${url}/admin/models`)).json()) as {
      models: { workers: { id: number; url: string; state: string }[] }[];
    };
    return body.models[0]!.workers.filter((w) => w.state !== 'draining').map((w) => [w.id, w.url, w.state]);
  };
  const membership = async (change: string): Promise<number> =>
    sampleSum(await (await fetch(`${url}/metrics`)).text(), 'kvgate_worker_membership_changes_total', {
      source: 'kubernetes',
      change,
    });
  /** The worker sets the source applied or found unchanged: one more per list or watch event it has read. */
  const updates = async (): Promise<number> =>
    sampleSum(await (await fetch(`${url}/metrics`)).text(), 'kvgate_discovery_updates_total', { source: 'kubernetes' });
  const served = async (): Promise<string | null> => {
    const r = await postChat(url, { model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 2 });
    await r.arrayBuffer();
    return r.status === 200 ? r.headers.get('x-kvgate-worker') : null;
  };

  beforeAll(async () => {
    kube = await KubeApiDouble.start();
    suite = await startMockerSuite('k8s-address', ['--model', MODEL, '--tokenizer', 'demo', '--speedup', '100'], 1);
    engine = suite.engines[0]!;
    host = new URL(engine.url).hostname;
    port = Number(new URL(engine.url).port);
    const token = suite.write('token', 'test-token');
    const config = suite.write(
      'kvgate.yaml',
      serveConfig(MODEL, [
        `kubernetes: { api_server: "${kube.url}", namespace: ns, service: ${SERVICE}, port_name: http, ` +
          `token_file: ${token} }`,
      ]),
    );
    ({ proc: gateway, url } = await startServeCli(config));
    suite.procs.push(gateway);
    // Listed once the gateway is up: a worker that joins while it starts shows in /admin/models only at the next change.
    kube.put(slice('engines-a', ['vllm-old']));
    await until(async () => (await workers()).some(([, , state]) => state === 'ready'), "the old pod's worker ready");
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
    await kube?.close();
  });

  it('two pods listed on one address give one worker, the newer pod taking it over (a warn line and a count)', async () => {
    const [[oldId]] = (await workers()) as [[number, string, string]];
    const read = await updates();
    kube.put(slice('engines-b', ['vllm-new']));
    await until(async () => (await updates()) > read, 'the new slice read');
    await until(async () => (await workers()).every(([, , state]) => state !== 'joining'), 'the joins probed');
    const now = await workers();
    expect(now).toEqual([[expect.any(Number), `http://${host}:${port}`, 'ready']]);
    expect(now[0]![0]).not.toBe(oldId);
    expect(gateway.output()).toMatch(/"level":40[^\n]*handed over from pod vllm-old to pod vllm-new: both are listed/);
    expect(await membership('handed_over')).toBe(1);
    expect(await membership('shadowed')).toBe(1); // vllm-old: listed, not routed
    expect(await served()).toBe(String(now[0]![0]));
  }, 30_000);

  it("the old pod's leaving the list keeps the worker the new pod serves", async () => {
    const before = await workers();
    const left = await membership('left');
    const read = await updates();
    kube.delete('engines-a');
    await until(async () => (await updates()) > read, 'the deletion read');
    expect(await membership('left')).toBe(left);
    expect(await workers()).toEqual(before);
    expect(gateway.output()).toMatch(
      /vllm-old \(not routed: a newer pod owns its endpoint [^)]*\) is no longer listed/,
    );
    expect(await served()).toBe(String(before[0]![0]));
  }, 30_000);
});
