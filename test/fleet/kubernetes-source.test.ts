/**
 * Kubernetes discovery (issue 16, must-show 2) against a PROTOCOL DOUBLE of
 * the API server (test/helpers/kube-api-double.ts: a node:http server speaking
 * the EndpointSlice list + watch protocol, resourceVersion, ADDED / MODIFIED /
 * DELETED, 410 Gone), since no Kubernetes API server can run here. Each case
 * asserts the worker set `FleetMembers` (and the registry behind it) converges to.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { FleetMembers } from '../../src/fleet/membership.js';
import { KubernetesWorkersSource } from '../../src/fleet/kubernetes-source.js';
import { loadGatewayConfig, type ModelConfig } from '../../src/config/index.js';
import { HealthProber, WorkerRegistry } from '../../src/discovery/index.js';
import { EngineClient } from '../../src/engines/index.js';
import { KvgateMetrics } from '../../src/metrics/index.js';
import { KubeApiDouble, type Slice } from '../helpers/kube-api-double.js';
import { sampleSum } from '../helpers/metric-sum.js';
import { until } from '../helpers/until.js';

const SERVICE = 'engines';

/** The worker sets the source applied or found unchanged: one per list or watch event read. */
const updates = async (metrics: KvgateMetrics): Promise<number> =>
  sampleSum(await metrics.text(), 'kvgate_discovery_updates_total', { source: 'kubernetes' });

function slice(name: string, endpoints: [string, boolean][], labels: Record<string, string> = {}): Slice {
  return {
    metadata: { name, labels: { 'kubernetes.io/service-name': SERVICE, ...labels } },
    ports: [{ name: 'http', port: 8000 }],
    endpoints: endpoints.map(([address, ready]) => ({
      addresses: [address],
      conditions: { ready },
      targetRef: { name: `pod-${address}` },
    })),
  };
}

describe('Kubernetes discovery against an API-server protocol double', () => {
  let api: KubeApiDouble | undefined;
  let source: KubernetesWorkersSource | undefined;
  let prober: HealthProber | undefined;
  let engine: EngineClient | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await source?.close();
    prober?.close();
    await engine?.close();
    await api?.close();
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  async function start(): Promise<{
    api: KubeApiDouble;
    members: FleetMembers;
    registry: WorkerRegistry;
    metrics: KvgateMetrics;
    urls: () => string[];
  }> {
    api = await KubeApiDouble.start();
    dir = mkdtempSync(join(tmpdir(), 'kvgate-k8s-'));
    const file = join(dir, 'kvgate.yaml');
    writeFileSync(
      file,
      `models:\n  - name: m\n    router_mode: round-robin\n    kubernetes: { api_server: "${api.url}", namespace: ns, service: ${SERVICE}, port_name: http, token_file: ${join(dir, 'token')} }\n`,
    );
    const model: ModelConfig = loadGatewayConfig({ file, env: {} }).models[0]!;
    const registry = new WorkerRegistry();
    engine = new EngineClient({ connectTimeoutMs: 200 });
    prober = new HealthProber(registry, { checkModels: false });
    const members = new FleetMembers(registry, engine, prober);
    const metrics = new KvgateMetrics({ processMetrics: false });
    source = new KubernetesWorkersSource(model, registry, members);
    const urls = (): string[] => members.discovered('m').map((w) => `${w.role} ${w.url}`);
    return { api, members, registry, metrics, urls };
  }

  it('add, modify (not Ready -> Ready) and delete converge; slice labels give the role', async () => {
    const { api, registry, metrics, urls } = await start();
    api.put(
      slice(
        'engines-a',
        [
          ['10.0.0.1', true],
          ['10.0.0.2', false],
        ],
        { 'kvgate.io/role': 'aggregated' },
      ),
    );
    source!.start(pino({ level: 'silent' }), metrics);
    await until(() => urls().length === 1, 'listed');
    expect(urls()).toEqual(['aggregated http://10.0.0.1:8000']);
    // ADDED
    api.put(slice('engines-b', [['10.0.0.3', true]]));
    await until(() => urls().length === 2, 'added');
    // MODIFIED: 10.0.0.2 becomes Ready
    api.put(
      slice('engines-a', [
        ['10.0.0.1', true],
        ['10.0.0.2', true],
      ]),
    );
    await until(() => urls().length === 3, 'ready');
    expect(urls().sort()).toEqual([
      'aggregated http://10.0.0.1:8000',
      'aggregated http://10.0.0.2:8000',
      'aggregated http://10.0.0.3:8000',
    ]);
    // DELETED
    api.delete('engines-a');
    await until(() => urls().length === 1, 'deleted');
    expect(urls()).toEqual(['aggregated http://10.0.0.3:8000']);
    expect(registry.all().map((w) => w.url)).toEqual(['http://10.0.0.3:8000']);
    expect(api.requests.filter((r) => r === 'list')).toHaveLength(1);
    expect(await metrics.text()).toContain(
      'kvgate_discovery_updates_total{model="m",source="kubernetes",outcome="applied"}',
    );
  });

  it('410 Gone is followed by a relist that applies a change the watch never saw', async () => {
    const { api, urls, metrics } = await start();
    api.put(slice('engines-a', [['10.0.0.1', true]]));
    const lines: Record<string, unknown>[] = [];
    source!.start(pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) }), metrics);
    await until(() => urls().length === 1 && api.requests.some((r) => r.startsWith('watch')), 'watching');
    api.put(slice('engines-a', [['10.0.0.5', true]]), true);
    api.compact();
    await until(() => urls().join() === 'aggregated http://10.0.0.5:8000', 'relisted');
    expect(api.requests.filter((r) => r === 'list')).toHaveLength(2);
    // The relist is a warn line naming the Service and a transition; the watch was never down.
    expect(lines.filter((l) => / listing again$/.test(String(l['msg'])))).toEqual([
      expect.objectContaining({
        level: 40,
        service: SERVICE,
        msg: `kubernetes watch of service ns/${SERVICE}: too old resource version; listing again`,
      }),
    ]);
    const text = await metrics.text();
    expect(text).toContain(
      'kvgate_discovery_watch_transitions_total{model="m",source="kubernetes",transition="relisted"} 1',
    );
    expect(text).not.toContain('transition="lost"');
  });

  it('a dropped watch connection resumes from the last resourceVersion and replays what it missed', async () => {
    const { api, urls } = await start();
    api.put(slice('engines-a', [['10.0.0.1', true]]));
    source!.start(pino({ level: 'silent' }), new KvgateMetrics({ processMetrics: false }));
    await until(() => urls().length === 1 && api.requests.some((r) => r.startsWith('watch')), 'watching');
    const firstWatch = api.requests.find((r) => r.startsWith('watch'))!;
    api.holdWatches = true;
    api.dropWatches();
    await until(() => api.heldWatches === 1, 'rewatch requested');
    api.put(slice('engines-b', [['10.0.0.2', true]]));
    api.releaseWatches();
    await until(() => urls().length === 2, 'replayed');
    expect(api.requests.filter((r) => r === 'list')).toHaveLength(1);
    expect(api.requests.filter((r) => r.startsWith('watch'))).toEqual([firstWatch, firstWatch]);
  });

  it('a watch lost to a failing API server is counted and logged, and counted again when it resumes', async () => {
    const { api, urls, metrics } = await start();
    api.put(slice('engines-a', [['10.0.0.1', true]]));
    const lines: Record<string, unknown>[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => void lines.push(JSON.parse(l)) });
    source!.start(logger, metrics);
    const watch = (name: string, labels = ''): Promise<number> =>
      metrics
        .text()
        .then((t) => Number(new RegExp(`^${name}\\{model="m"${labels}[^}]*\\} (\\d+)`, 'm').exec(t)?.[1] ?? NaN));
    await until(() => urls().length === 1 && api.requests.some((r) => r.startsWith('watch')), 'watching');
    expect(await watch('kvgate_discovery_watch_up', ',source="kubernetes"')).toBe(1);
    // The watch connection drops, and the first attempt to watch again is answered 503.
    api.failRequests = 1;
    api.dropWatches();
    await until(async () => (await watch('kvgate_discovery_watch_retries_total')) === 2, 'two failed attempts');
    await until(
      async () =>
        (await watch('kvgate_discovery_watch_transitions_total', ',source="kubernetes",transition="resumed"')) === 1,
      'resumed',
    );
    expect(await watch('kvgate_discovery_watch_transitions_total', ',source="kubernetes",transition="lost"')).toBe(1);
    expect(await watch('kvgate_discovery_watch_up', ',source="kubernetes"')).toBe(1);
    expect(urls()).toHaveLength(1); // the workers stayed meanwhile
    const msgs = lines.map((l) => String(l['msg']));
    expect(
      msgs.filter((m) => /kubernetes watch of service .* lost; the current workers stay until it is back/.test(m)),
    ).toHaveLength(1);
    expect(msgs.filter((m) => /failed: .*; the current workers stay, retrying/.test(m))).toHaveLength(2);
    expect(msgs.some((m) => m.includes('answered 503'))).toBe(true);
    expect(lines.find((l) => /resumed$/.test(String(l['msg'])))).toMatchObject({
      level: 30,
      attempts: 2,
      service: SERVICE,
    });
    // Failed attempts are error lines (the etcd source's are warn lines), each naming the Service.
    expect(lines.filter((l) => /, retrying$/.test(String(l['msg'])))).toEqual([
      expect.objectContaining({ level: 50, service: SERVICE }),
      expect.objectContaining({ level: 50, service: SERVICE }),
    ]);
  });

  it('one worker per address: the newer pod owns it, the older takes it back when the newer leaves first', async () => {
    const { api, registry, metrics } = await start();
    const pods = (name: string, list: [string, boolean?][]): Slice => ({
      ...slice(name, []),
      endpoints: list.map(([pod, terminating]) => ({
        addresses: ['10.0.0.7'],
        conditions: { ready: true, ...(terminating === undefined ? {} : { terminating }) },
        targetRef: { name: pod },
      })),
    });
    api.put(pods('engines-a', [['old']]));
    source!.start(pino({ level: 'silent' }), metrics);
    const ids = (): [number, string][] => registry.all().map((w) => [w.id, w.url]);
    await until(() => ids().length === 1, 'listed');
    const [[oldId]] = ids() as [[number, string]];
    api.put(pods('engines-b', [['new']]));
    await until(() => ids().length === 1 && ids()[0]![0] !== oldId, 'handed over');
    const [[newId]] = ids() as [[number, string]];
    // The old pod marked terminating (a Service publishing not-ready addresses) changes nothing.
    const read = await updates(metrics);
    api.put(pods('engines-a', [['old', true]]));
    await until(async () => (await updates(metrics)) > read, 'read');
    expect(ids()).toEqual([[newId, 'http://10.0.0.7:8000']]);
    // The newer pod leaves first while the older is still listed Ready: the address passes back to it.
    api.put(pods('engines-a', [['old']]));
    api.delete('engines-b');
    await until(() => ids().length === 1 && ids()[0]![0] !== newId, 'handed back');
    expect(ids()).toEqual([[expect.any(Number), 'http://10.0.0.7:8000']]);
    const text = await metrics.text();
    expect(text).toContain(
      'kvgate_worker_membership_changes_total{model="m",source="kubernetes",change="handed_over"} 2',
    );
    expect(text).toContain('kvgate_worker_membership_changes_total{model="m",source="kubernetes",change="shadowed"} 1');
  });
});
