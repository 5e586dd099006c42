/**
 * Issue 23, section 2: an etcd restart must not lose the fleet. A real etcd
 * (stopped and started again on its port: with its data, then without), real
 * `kvgate mocker` engines registered only through real `kvgate register`
 * processes on 2 s leases, and a real `kvgate serve` that discovers them in
 * etcd, with traffic pinned to each worker while etcd goes away.
 *
 * The first two outages last more than twice the lease's TTL. Before the fix
 * etcd3's keep-alive loop declared the lease lost then, and each failed
 * registration attempt started another retry loop: thousands of log lines a
 * second, and no key after etcd returned, so every worker left for good. The
 * gateway resumed its watch from the old revision, which a cluster that lost
 * its data never reaches: a registration put again was never seen.
 */
import { Etcd3 } from 'etcd3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, startServeCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { startEtcdServer, type EtcdServer } from '../../helpers/etcd-server.js';
import { metric } from '../../helpers/metric-sum.js';
import { postChat, serveConfig, startMockerSuite, type MockerSuite } from '../../helpers/serve-suite.js';
import { startTcpProxy, type TcpProxy } from '../../helpers/tcp-proxy.js';
import { until } from '../../helpers/until.js';

const MODEL = 'etcd-restart-model';
const PREFIX = '/kvgate/workers';
const TTL_S = 2;
/** How long etcd stays away: past twice the TTL. */
const OUTAGE_MS = 5_000;
/** The outage during which log lines are counted: long enough for several doublings of the back-off. */
const LONG_OUTAGE_MS = 8_000;
const WATCH = `/kvgate/workers/${MODEL}/`.replace(/\//g, '\\/');
const MESSAGES = [{ role: 'user', content: 'Name three things a lighthouse keeper checks every evening.' }];

interface Result {
  readonly status: number;
  readonly worker: string | null;
  readonly at: number;
}

describe('an etcd restart does not lose the fleet (issue 23)', () => {
  let suite: MockerSuite;
  let etcd: EtcdServer;
  /** The gateway reaches etcd through it (the registrations do not): cut, it is a partition. */
  let proxy: TcpProxy;
  let url: string;
  let gateway: CliProcess;
  let engines: readonly MockerLine[];
  const registrations = new Map<number, CliProcess>();

  /** `kvgate register` of engine `id - 1` as worker `id`; waits for its first registration unless told not to. */
  const register = async (id: number, wait = true): Promise<CliProcess> => {
    const e = engines[id - 1]!;
    const p = startCli([
      'register',
      '--etcd',
      etcd.url,
      '--model',
      MODEL,
      '--id',
      String(id),
      '--url',
      e.url,
      '--kv-events',
      e.kv_events[0]!,
      '--ttl',
      String(TTL_S),
    ]);
    suite.procs.push(p);
    registrations.set(id, p);
    if (wait) await p.waitFor(/"msg":"registered"/, `worker ${id}'s registration`);
    return p;
  };
  const adminWorkers = async (): Promise<[number, string][]> => {
    const body = (await (await fetch(`${url}/admin/models`)).json()) as {
      models: { workers: { id: number; state: string }[] }[];
    };
    return body.models[0]!.workers.map((w) => [w.id, w.state]);
  };
  const allReady = async (ids: number[]): Promise<boolean> =>
    JSON.stringify(await adminWorkers()) === JSON.stringify(ids.map((id) => [id, 'ready']));
  const pinned = async (id: number): Promise<Result> => {
    const r = await postChat(url, {
      model: MODEL,
      messages: MESSAGES,
      max_tokens: 2,
      nvext: { backend_instance_id: id },
    });
    await r.arrayBuffer();
    return { status: r.status, worker: r.headers.get('x-kvgate-worker'), at: performance.now() };
  };
  /** Requests pinned to each of `ids`, one lane per worker, paced, until stopped. */
  const traffic = (ids: number[]): { results: Result[]; stop(): Promise<Result[]> } => {
    const results: Result[] = [];
    let running = true;
    const lane = async (id: number): Promise<void> => {
      while (running) {
        results.push(await pinned(id));
        await new Promise((r) => setTimeout(r, 25));
      }
    };
    const lanes = Promise.all(ids.map(lane));
    return { results, stop: async () => ((running = false), await lanes, results) };
  };
  /** Runs `f` with an etcd client of the test's own. */
  const withEtcd = async <T>(f: (client: Etcd3) => Promise<T>): Promise<T> => {
    const client = new Etcd3({ hosts: etcd.url });
    try {
      return await f(client);
    } finally {
      client.close();
    }
  };
  /** The worker ids registered in etcd now. */
  const etcdKeys = (): Promise<string[]> =>
    withEtcd(async (c) =>
      (await c.getAll().prefix(`${PREFIX}/${MODEL}/`).keys()).map((k) => k.slice(`${PREFIX}/${MODEL}/`.length)).sort(),
    );
  /** Lines a process wrote after `from` characters of its output. */
  const linesSince = (p: CliProcess, from: number): string[] =>
    p
      .output()
      .slice(from)
      .split('\n')
      .filter((l) => l.trim() !== '');
  /** Waits until etcd, halted at `since`, has been away `ms` and `also` holds. */
  const awayUntil = (since: number, ms: number, also: () => boolean): Promise<void> =>
    until(() => performance.now() - since >= ms && also(), 'the outage', ms + 20_000);

  beforeAll(async () => {
    etcd = await startEtcdServer();
    suite = await startMockerSuite('etcd-restart', ['--model', MODEL, '--tokenizer', 'demo', '--speedup', '100'], 3);
    engines = suite.engines;
    proxy = await startTcpProxy(Number(new URL(etcd.url).port));
    const etcdLine = `etcd: { endpoints: ["http://127.0.0.1:${proxy.port}"], prefix: ${PREFIX} }`;
    const config = suite.write('kvgate.yaml', serveConfig(MODEL, [etcdLine]));
    ({ proc: gateway, url } = await startServeCli(config));
    suite.procs.push(gateway);
    await Promise.all([register(1), register(2)]);
    await until(() => allReady([1, 2]), 'workers 1 and 2 routable', 20_000);
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
    await proxy?.close();
    await etcd?.stop();
  });

  it('etcd restarted with its data while traffic flows: every worker stays routable, the watch is lost and resumed', async () => {
    const lines = gateway.output().length;
    const load = traffic([1, 2]);
    await until(() => load.results.length >= 10, 'traffic before the outage', 10_000);
    const since = performance.now();
    await etcd.halt();
    await awayUntil(since, OUTAGE_MS, () => /etcd watch of [^\n]* lost/.test(gateway.output().slice(lines)));
    await etcd.resume();
    const back = performance.now();
    // Watched for three TTLs after etcd is back: a lease that lapsed would have taken its key, and its worker, by then.
    await until(
      () => performance.now() - back >= 3 * TTL_S * 1000 && load.results.filter((r) => r.at > back).length >= 20,
      'traffic after the restart',
      30_000,
    );
    const results = await load.stop();

    // Every request, before, during and after the outage, reached the worker it was pinned to.
    expect(results.filter((r) => r.status !== 200)).toEqual([]);
    expect(new Set(results.filter((r) => r.at > back).map((r) => r.worker))).toEqual(new Set(['1', '2']));
    expect(await etcdKeys()).toEqual(['1', '2']);
    // Nothing flapped: no worker left, none joined again.
    expect(gateway.output().slice(lines)).not.toMatch(/leaves model|joins model/);
    expect(await metric(url, 'kvgate_worker_membership_changes_total', { change: 'left' })).toBe(0);
    // The gateway said it lost the watch and got it back; each registration kept its lease (etcd restored it
    // with its data, and the next keep-alive renewed it).
    await gateway.waitFor(
      new RegExp(`etcd watch of ${WATCH} resumed: listed again, 2 workers`),
      'the watch resumed',
      20_000,
    );
    expect(gateway.output().slice(lines)).toMatch(new RegExp(`etcd watch of ${WATCH} lost; the current workers stay`));
    for (const id of [1, 2]) {
      await registrations.get(id)!.waitFor(/keep-alive restored/, `worker ${id}'s keep-alive`, 15_000);
      expect(registrations.get(id)!.output()).not.toMatch(/registration lost|registration renewed/);
    }
    expect(await metric(url, 'kvgate_discovery_watch_transitions_total', { transition: 'lost' })).toBe(1);
    expect(await metric(url, 'kvgate_discovery_watch_transitions_total', { transition: 'resumed' })).toBe(1);
    expect(await metric(url, 'kvgate_discovery_watch_up', { source: 'etcd' })).toBe(1);
    expect(await allReady([1, 2])).toBe(true);
  }, 90_000);

  it('while etcd is down, kvgate register logs once per attempt at most, with back-off, and registers once it is back', async () => {
    const marks = new Map([...registrations].map(([id, p]) => [id, p.output().length]));
    const gatewayLines = gateway.output().length;
    const retriesBefore = await metric(url, 'kvgate_discovery_watch_retries_total');
    await etcd.halt();
    const since = performance.now();
    // A registration that starts while etcd is away, beside two that were registered.
    const late = await register(3, false);
    await awayUntil(since, LONG_OUTAGE_MS, () => late.output().includes('cannot register'));

    // A handful of lines over the outage, not thousands.
    const lateLines = linesSince(late, 0);
    expect(lateLines.length).toBeGreaterThanOrEqual(2);
    expect(lateLines.length).toBeLessThanOrEqual(8);
    for (const id of [1, 2]) expect(linesSince(registrations.get(id)!, marks.get(id)!).length).toBeLessThanOrEqual(2);
    expect(linesSince(gateway, gatewayLines).length).toBeLessThanOrEqual(12);
    // The new one: one line per attempt, attempts spaced by a wait that doubles (with jitter) from 0.5 s.
    const attempts = lateLines.map((l) => JSON.parse(l) as { msg: string; attempt: number; retry_in_ms: number });
    expect(attempts.map((a) => a.attempt)).toEqual(attempts.map((_, i) => i + 1));
    attempts.forEach((a, i) => expect(a.retry_in_ms).toBeGreaterThanOrEqual(Math.min(250 * 2 ** i, 5000)));
    // The registered ones: one line when keep-alives start failing, nothing more while etcd is away.
    for (const id of [1, 2]) {
      const lines = linesSince(registrations.get(id)!, marks.get(id)!);
      expect(lines).toHaveLength(1);
      expect(lines[0]).toContain('keep-alive failing');
    }
    // The gateway: a line per list-and-watch attempt, on its own back-off.
    expect((await metric(url, 'kvgate_discovery_watch_retries_total')) - retriesBefore).toBeLessThanOrEqual(10);

    await etcd.resume();
    await until(async () => (await etcdKeys()).includes('3'), 'worker 3 registered once etcd is back', 20_000);
    await until(() => allReady([1, 2, 3]), 'worker 3 routable', 30_000);
    expect(await pinned(3)).toMatchObject({ status: 200, worker: '3' });
    expect(late.output()).toMatch(/"msg":"registered"/);
  }, 90_000);

  it('etcd restarted without its data: every registration is renewed and the gateway sees every worker again', async () => {
    const marks = new Map([...registrations].map(([id, p]) => [id, p.output().length]));
    const lines = gateway.output().length;
    await etcd.halt();
    await etcd.resume({ empty: true });
    // Every key and lease is gone: each registration puts its key again, on a new lease.
    const ids = [...registrations.keys()].sort((a, b) => a - b);
    await until(async () => (await etcdKeys()).length === ids.length, 'every worker registered again', 20_000);
    // Until its watch is back, the gateway still shows the workers it kept, and the listing it is applying may
    // predate some of the keys put again (a worker leaves, then joins from the watch): wait for that first.
    const resumed = new RegExp(`etcd watch of ${WATCH} resumed`);
    await until(() => resumed.test(gateway.output().slice(lines)), 'the watch resumed', 30_000);
    await until(() => allReady(ids), 'every worker routable again', 30_000);
    for (const id of ids) expect(await pinned(id)).toMatchObject({ status: 200, worker: String(id) });
    // The gateway watches the new cluster, whose revisions started over: a worker deregistered (its lease
    // revoked, its key deleted) leaves, and registered again joins.
    const last = ids.at(-1)!;
    await registrations.get(last)!.stop();
    await until(() => allReady(ids.slice(0, -1)), `worker ${last} gone`, 20_000);
    await register(last);
    await until(() => allReady(ids), `worker ${last} back`, 20_000);

    for (const id of ids.slice(0, -1)) {
      const text = registrations.get(id)!.output().slice(marks.get(id)!);
      expect(text).toMatch(/registration lost: etcd no longer holds lease/);
      expect(text).toMatch(/"msg":"registration renewed"/);
    }
  }, 90_000);

  it('a gateway cut off from etcd while its history is compacted lists again on return: what changed applies, the rest stays', async () => {
    const ids = [...registrations.keys()].sort((a, b) => a - b);
    await until(() => allReady(ids), 'every worker routable', 30_000);
    const lines = gateway.output().length;
    await proxy.cut();
    await until(() => /etcd watch of [^\n]* lost/.test(gateway.output().slice(lines)), 'the watch lost', 20_000);
    // While the gateway cannot see it: a worker deregisters, and etcd compacts away the history of that change.
    const gone = ids.at(-1)!;
    await registrations.get(gone)!.stop();
    await withEtcd(async (c) => {
      const { header } = await c.getAll().prefix(PREFIX).exec();
      await c.kv.compact({ revision: header.revision, physical: true });
    });
    expect(await etcdKeys()).toEqual(ids.slice(0, -1).map(String));
    // The workers stay routable while the gateway cannot reach etcd.
    for (const id of ids) expect(await pinned(id)).toMatchObject({ status: 200, worker: String(id) });
    await proxy.restore();

    await until(() => allReady(ids.slice(0, -1)), `worker ${gone} gone`, 20_000);
    // The listing is applied first; the line comes once the new watch is confirmed.
    const resumed = new RegExp(`etcd watch of ${WATCH} resumed: listed again, ${ids.length - 1} workers`);
    await until(() => resumed.test(gateway.output().slice(lines)), 'the watch resumed', 20_000);
    const since = gateway.output().slice(lines);
    // Only the worker whose key went left; the others never flapped.
    expect(since.match(/worker \d+ leaves model/g)).toEqual([`worker ${gone} leaves model`]);
    expect(since).not.toMatch(/joins model/);
    for (const id of ids.slice(0, -1)) expect(await pinned(id)).toMatchObject({ status: 200, worker: String(id) });
  }, 90_000);
});
