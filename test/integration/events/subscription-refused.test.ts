/**
 * One worker's KV-event endpoint that cannot be subscribed for every rank must not take the gateway down. A
 * real `kvgate serve` over two `kvgate mocker` engines: worker 1 publishes on tcp:// as usual; worker 2 names
 * an ipc:// path and two data-parallel ranks. Rank 0 subscribes to the path itself; rank 1 has no port to
 * offset. Before, `kvgate serve` refused to start over it ("neither tcp://host:port nor inproc://"), and a
 * worker registering so at runtime (etcd, Kubernetes) threw out of the registry's event: now that rank is a
 * warning and a count, and everything else is served.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess } from '../../helpers/cli-process.js';
import { metric } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { postChat, serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'refused-model';

describe('a KV-event subscription refused for one rank', () => {
  let suite: MockerSuite;
  let gateway: CliProcess;
  let url: string;

  beforeAll(async () => {
    suite = await startMockerSuite('refused', ['--model', MODEL, '--tokenizer', 'demo', '--speedup', '100'], 2);
    const [e1, e2] = suite.engines;
    const ipc = `ipc://${join(suite.dir, 'kv-events')}`;
    const config = suite.write(
      'kvgate.yaml',
      serveConfig(MODEL, [
        'router_mode: kv',
        'workers:',
        `  - ${workerEntry(1, e1!)}`,
        `  - { id: 2, url: "${e2!.url}", dp_size: 2, kv_events: "${ipc}" }`,
      ]),
    );
    ({ proc: gateway, url } = await startServeCli(config));
    suite.procs.push(gateway);
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  it('is a warning and a count naming that rank; the gateway serves, and the other subscriptions stand', async () => {
    await gateway.waitFor(/worker 2 rank 1: KV events not subscribed/, 'the refusal');
    const line = gateway
      .output()
      .split('\n')
      .find((l) => l.includes('KV events not subscribed'))!;
    expect(JSON.parse(line)).toMatchObject({ level: 40, workerId: 2, dpRank: 1, model: MODEL });
    expect(gateway.output()).not.toMatch(/worker (1|2) rank 0: KV events not subscribed/);
    expect(await metric(url, 'kvgate_kv_event_subscriptions_refused_total', { worker_id: '2', dp_rank: '1' })).toBe(1);
    expect(await metric(url, 'kvgate_kv_event_subscriptions_refused_total')).toBe(1);

    const messages = [{ role: 'user', content: 'Which lamp oil burns cleanest in a lighthouse?' }];
    const pinned = await postChat(url, { model: MODEL, messages, max_tokens: 2, nvext: { backend_instance_id: 1 } });
    expect(pinned.status).toBe(200);
    expect(pinned.headers.get('x-kvgate-worker')).toBe('1');
    await pinned.arrayBuffer();
    // Worker 1's events flow: the blocks its engine stored for that request came back over ZMQ.
    await until(
      async () => (await metric(url, 'kvgate_worker_kv_events_live', { worker_id: '1' })) === 1,
      "worker 1's KV events live",
    );
    const res = await postChat(url, { model: MODEL, messages, max_tokens: 2 });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    // /admin/models: worker 1's one rank is connected to its publisher; worker 2's rank 0 has nobody at its path,
    // and its rank 1 no subscription.
    const admin = (await (await fetch(`${url}/admin/models`)).json()) as {
      models: { workers: { id: number; kvEventRanksConnected?: number }[] }[];
    };
    const workers = admin.models[0]!.workers;
    expect(workers.map((w) => [w.id, w.kvEventRanksConnected])).toEqual([
      [1, 1],
      [2, 0],
    ]);
  });
});
