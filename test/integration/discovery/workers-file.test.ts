/**
 * The watched-file discovery source over real processes: `kvgate serve -c FILE`
 * whose model names a `workers_file`, in front of two `kvgate mocker` engines;
 * the workers file is rewritten while the gateway runs (no signal, no reload).
 *
 * issue 16 (discovery: a watched file): a worker added to the file starts
 * receiving traffic; one removed takes no new request while its in-flight
 * stream completes; an invalid file is rejected with the field named and the
 * previous workers stay; every update is counted.
 */
import { renameSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { postChat, serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { expectServedBy, openStream } from '../../helpers/drained-stream.js';
import { until } from '../../helpers/until.js';

const MODEL = 'file-model';
const MESSAGES = [
  {
    role: 'user',
    content: 'Write a long story about a lighthouse keeper who collects shells and names every one of them.',
  },
];

const workersText = (engines: readonly { id: number; e: MockerLine }[]): string =>
  ['workers:', ...engines.map(({ id, e }) => `  - ${workerEntry(id, e)}`), ''].join('\n');

describe("kvgate serve follows a model's workers_file", () => {
  let suite: MockerSuite;
  let workersFile: string;
  let url: string;
  let gateway: CliProcess;
  let engines: readonly MockerLine[];

  /** Replaces the file atomically, as deploy tools and ConfigMaps do (a rename in the watched directory). */
  const writeWorkers = (text: string): void => renameSync(suite.write('.workers.tmp', text), workersFile);

  beforeAll(async () => {
    suite = await startMockerSuite('workers-file', ['--model', MODEL, '--tokenizer', 'demo'], 2);
    engines = suite.engines;
    workersFile = suite.write('workers.yaml', workersText([{ id: 1, e: engines[0]! }]));
    const config = suite.write('kvgate.yaml', serveConfig(MODEL, ['workers_file: workers.yaml']));
    ({ proc: gateway, url } = await startServeCli(config));
    suite.procs.push(gateway);
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  const chat = (extra: Record<string, unknown>): Promise<Response> =>
    postChat(url, { model: MODEL, messages: MESSAGES, ...extra });
  /** `/admin/models`'s workers: id, source, state, and whether a KV event has arrived. */
  const adminWorkers = async (): Promise<{ id: number; source: string; state: string; events: boolean }[]> => {
    type Row = { id: number; source: string; state: string; lastEventAt: string | null; capacity: object };
    const body = (await (await fetch(`${url}/admin/models`)).json()) as { models: { workers: Row[] }[] };
    return body.models[0]!.workers.map((w) => ({
      id: w.id,
      source: w.source,
      state: w.state,
      events: w.lastEventAt !== null && !Number.isNaN(Date.parse(w.lastEventAt)),
    }));
  };
  const servedWorkers = async (): Promise<number[]> => {
    const c = (await (await fetch(`${url}/admin/config`)).json()) as { models: { workers: { id: number }[] }[] };
    return c.models[0]!.workers.map((w) => w.id);
  };

  it("serves the file's workers from the start; a worker added to the file starts receiving traffic", async () => {
    expect(await servedWorkers()).toEqual([1]);
    const first = await chat({ max_tokens: 2 });
    expect(first.headers.get('x-kvgate-worker')).toBe('1');
    await first.arrayBuffer();
    const unknown = await chat({ max_tokens: 2, nvext: { backend_instance_id: 2 } });
    expect(unknown.status).toBe(400);
    await unknown.arrayBuffer();

    writeWorkers(
      workersText([
        { id: 1, e: engines[0]! },
        { id: 2, e: engines[1]! },
      ]),
    );
    await gateway.waitFor(/workers file applied: 1 joined, 0 left/, 'the workers file applied');
    expect(gateway.output()).toMatch(/worker 2 joins model file-model \(file\)/);
    // Routed to once its engine answers its health probe.
    await until(async () => {
      const r = await chat({ max_tokens: 2, nvext: { backend_instance_id: 2 } });
      await r.arrayBuffer();
      return r.status === 200 && r.headers.get('x-kvgate-worker') === '2';
    }, 'worker 2 serving');
    expect(await servedWorkers()).toEqual([1, 2]);
    // issue 16: /admin/models shows each worker's source, state and last KV-event time.
    await until(async () => (await adminWorkers())[1]?.events === true, "worker 2's KV events");
    expect(await adminWorkers()).toEqual([
      { id: 1, source: 'file', state: 'ready', events: true },
      { id: 2, source: 'file', state: 'ready', events: true },
    ]);
  }, 30_000);

  it('a worker removed from the file takes no new request while its in-flight stream completes', async () => {
    const res = await chat({ stream: true, max_tokens: 150, nvext: { backend_instance_id: 2 } });
    expect(res.headers.get('x-kvgate-worker')).toBe('2');
    const stream = await openStream(res);

    writeWorkers(workersText([{ id: 1, e: engines[0]! }]));
    await gateway.waitFor(/workers file applied: 0 joined, 1 left/, 'the removal applied');
    expect(gateway.output()).toMatch(/worker 2 leaves model file-model \(file\)/);
    expect(await servedWorkers()).toEqual([1]);
    // Listed as draining while its stream runs.
    expect((await adminWorkers()).map((w) => [w.id, w.state])).toEqual([
      [1, 'ready'],
      [2, 'draining'],
    ]);
    await expectServedBy(() => chat({ max_tokens: 2 }), '1');
    await stream.finish();
    await until(async () => (await adminWorkers()).length === 1, 'worker 2 drained');
  }, 30_000);

  it('rejects an invalid file naming the field; the previous workers stay; every update is counted', async () => {
    writeWorkers(
      ['workers:', '  - { id: 1, url: "not a url" }', '  - { id: 1, url: "http://127.0.0.1:1", colour: red }', ''].join(
        '\n',
      ),
    );
    const m = await gateway.waitFor(/workers file rejected: [^\n]*/, 'the rejection');
    expect(m[0]).toContain('workers[0].url: must be an absolute http(s) URL');
    expect(m[0]).toContain('workers[1].colour: unknown field');
    expect(m[0]).toContain('workers[1].id: 1 is already the id of workers[0]');
    expect(m[0]).toContain('the previous workers stay');
    expect(await servedWorkers()).toEqual([1]);
    const r = await chat({ max_tokens: 2 });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-kvgate-worker')).toBe('1');
    await r.arrayBuffer();

    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('kvgate_discovery_updates_total{model="file-model",source="file",outcome="applied"} 2');
    expect(metrics).toContain('kvgate_discovery_updates_total{model="file-model",source="file",outcome="rejected"} 1');
    expect(metrics).toContain(
      'kvgate_worker_membership_changes_total{model="file-model",source="file",change="joined"} 1',
    );
    expect(metrics).toContain(
      'kvgate_worker_membership_changes_total{model="file-model",source="file",change="left"} 1',
    );
  }, 30_000);
});
