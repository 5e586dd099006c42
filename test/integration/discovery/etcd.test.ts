/**
 * etcd discovery over real processes: a real etcd (started here on OS-chosen
 * ports with a temporary data dir), `kvgate mocker` engines, `kvgate serve -c
 * FILE` whose model has an `etcd` section, and `kvgate register` keeping one
 * engine's lease alive.
 *
 * issue 16 (discovery: etcd; must-show 1): a worker registered with
 * `kvgate register` starts receiving traffic; killing the registration
 * (SIGKILL: the lease expires) removes it and its index entries; SIGTERM
 * revokes the lease at once; an invalid registration value is rejected whole
 * and logged with its fields, and counted; a lost watch is followed by a
 * relist whose difference is applied (an etcd wiped while kvgate watched).
 */
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, startServeCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { postChat, serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { startEtcdServer, type EtcdServer } from '../../helpers/etcd-server.js';
import { until } from '../../helpers/until.js';

const MODEL = 'etcd-model';
const PREFIX = '/kvgate/workers';
const MESSAGES = [
  {
    role: 'user',
    content:
      'Describe, in a long and careful answer, how a lighthouse keeper on a remote island keeps the lamp burning through a winter storm.',
  },
];

describe('kvgate serve discovers workers registered in etcd', () => {
  let suite: MockerSuite;
  let etcd: EtcdServer;
  let url: string;
  let gateway: CliProcess;
  let engines: readonly MockerLine[];

  beforeAll(async () => {
    etcd = await startEtcdServer();
    suite = await startMockerSuite('etcd', ['--model', MODEL, '--tokenizer', 'demo', '--speedup', '100'], 2);
    engines = suite.engines;
    const config = suite.write(
      'kvgate.yaml',
      serveConfig(MODEL, [
        `workers: [${workerEntry(1, engines[0]!)}]`,
        `etcd: { endpoints: ["${etcd.url}"], prefix: ${PREFIX} }`,
      ]),
    );
    ({ proc: gateway, url } = await startServeCli(config));
    suite.procs.push(gateway);
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
    await etcd?.stop();
  });

  const register = async (ttl: number): Promise<CliProcess> => {
    const p = startCli([
      'register',
      '--etcd',
      etcd.url,
      '--model',
      MODEL,
      '--id',
      '2',
      '--url',
      engines[1]!.url,
      '--kv-events',
      engines[1]!.kv_events[0]!,
      '--ttl',
      String(ttl),
    ]);
    suite.procs.push(p);
    await p.waitFor(/"msg":"registered"/, 'the registration');
    return p;
  };
  const post = (path: string, extra: Record<string, unknown>): Promise<Response> =>
    postChat(url, { model: MODEL, messages: MESSAGES, ...extra }, path);
  /** The blocks of the prompt the index holds for worker 2 (a query: nothing is booked). */
  const overlapOn2 = async (): Promise<number> => {
    const r = await post('/v1/route', { nvext: { backend_instance_id: 2 } });
    const body = (await r.json()) as { overlap_blocks: number; worker: { worker_id: number } };
    expect(r.status).toBe(200);
    expect(body.worker.worker_id).toBe(2);
    return body.overlap_blocks;
  };
  const adminWorkers = async (): Promise<[number, string, string][]> => {
    const body = (await (await fetch(`${url}/admin/models`)).json()) as {
      models: { workers: { id: number; source: string; state: string }[] }[];
    };
    return body.models[0]!.workers.map((w) => [w.id, w.source, w.state]);
  };
  const routeTo2 = async (): Promise<number> => {
    const r = await post('/v1/route', { nvext: { backend_instance_id: 2 } });
    await r.arrayBuffer();
    return r.status;
  };

  it('a worker registered with kvgate register starts receiving traffic', async () => {
    expect(await adminWorkers()).toEqual([[1, 'static', 'ready']]);
    await register(2);
    await gateway.waitFor(/etcd workers applied: 1 joined, 0 left/, 'the registration applied');
    expect(gateway.output()).toMatch(/worker 2 joins model etcd-model \(etcd\)/);
    await until(async () => {
      const r = await post('/v1/chat/completions', { max_tokens: 2, nvext: { backend_instance_id: 2 } });
      await r.arrayBuffer();
      return r.status === 200 && r.headers.get('x-kvgate-worker') === '2';
    }, 'worker 2 serving');
    expect(await adminWorkers()).toEqual([
      [1, 'static', 'ready'],
      [2, 'etcd', 'ready'],
    ]);
    // Its KV events reach the index: the prompt's blocks are now known on worker 2.
    await until(async () => (await overlapOn2()) > 0, "worker 2's blocks indexed");
  }, 30_000);

  it('killing the registration (SIGKILL: the lease expires) removes the worker and its index entries', async () => {
    const registration = suite.procs.find(
      (p) => p.output().includes('"msg":"registered"') && p.child.exitCode === null,
    )!;
    registration.child.kill('SIGKILL');
    await gateway.waitFor(/etcd workers applied: 0 joined, 1 left/, 'the lease expiry applied', 15_000);
    expect(gateway.output()).toMatch(/worker 2 leaves model etcd-model \(etcd\)/);
    await until(async () => (await adminWorkers()).length === 1, 'worker 2 gone from /admin/models');
    expect(await adminWorkers()).toEqual([[1, 'static', 'ready']]);
    // No longer routable: a pin to it is refused.
    expect(await routeTo2()).toBe(400);
    const r = await post('/v1/route', {});
    expect(((await r.json()) as { worker: { worker_id: number } }).worker.worker_id).toBe(1);

    // The same engine registered again starts with no index entries: the old ones went with the lease.
    const again = await register(2);
    await until(async () => (await routeTo2()) === 200, 'worker 2 back');
    expect(await overlapOn2()).toBe(0);
    // SIGTERM revokes the lease: the worker leaves at once, without waiting for the TTL.
    await again.stop();
    expect(again.output()).toContain('revoked');
    await until(async () => (await adminWorkers()).length === 1, 'worker 2 gone after the revoke');
  }, 40_000);

  it('an invalid registration value is rejected whole, logged with its fields and counted', async () => {
    const client = new Etcd3({ hosts: etcd.url });
    try {
      await client.put(`${PREFIX}/${MODEL}/3`).value(JSON.stringify({ url: 'not a url', colour: 'red' }));
      await client
        .put(`${PREFIX}/${MODEL}/1`)
        .value(JSON.stringify({ url: engines[1]!.url, kv_events: engines[1]!.kv_events[0] }));
      const m = await gateway.waitFor(/etcd registration rejected: [^\n]*colour[^\n]*/, 'the rejection');
      expect(m[0]).toContain('url: must be an absolute http(s) URL');
      expect(m[0]).toContain('colour: unknown field');
      await gateway.waitFor(
        /etcd registration rejected: [^\n]*worker id 1 is already the id of worker 1 of model etcd-model \(static\)/,
        'the id clash',
      );
    } finally {
      client.close();
    }
    expect(await adminWorkers()).toEqual([[1, 'static', 'ready']]);
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('kvgate_discovery_updates_total{model="etcd-model",source="etcd",outcome="rejected"} 2');
    expect(metrics).toMatch(
      /kvgate_worker_membership_changes_total\{model="etcd-model",source="etcd",change="left"\} 2/,
    );
  }, 30_000);

  it('after a lost watch kvgate lists the prefix again and applies the difference', async () => {
    const applied = (): number => gateway.output().match(/etcd workers applied: 0 joined, 1 left/g)?.length ?? 0;
    const client = new Etcd3({ hosts: etcd.url });
    try {
      await client
        .put(`${PREFIX}/${MODEL}/2`)
        .value(JSON.stringify({ url: engines[1]!.url, kv_events: engines[1]!.kv_events[0] }));
    } finally {
      client.close();
    }
    await until(async () => (await adminWorkers()).length === 2, 'worker 2 joined');
    const before = applied();
    // An empty etcd on the same port: the resumed watch (from a revision the new cluster has not reached)
    // would report nothing; only the relist sees that key 2 is gone.
    await etcd.restartEmpty();
    await until(() => applied() === before + 1, 'the relist applied', 30_000);
    await until(async () => (await adminWorkers()).length === 1, 'worker 2 gone');
    expect(gateway.output()).toMatch(/etcd watch of \/kvgate\/workers\/etcd-model\/ lost/);
  }, 45_000);
});
