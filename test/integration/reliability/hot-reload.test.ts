/**
 * Hot reconfiguration over real processes: `kvgate serve -c FILE` in front of
 * two `kvgate mocker` engines, the file rewritten and the gateway sent SIGHUP
 * (and `POST /admin/reload`).
 *
 * issue 16 must-show 4: a reload with a changed `router_temperature` and one
 * worker removed applies both while a stream runs on the removed worker, and
 * that stream completes; an invalid file changes nothing and the log names the
 * field; a field that needs a restart is refused the same way; each reload is
 * logged and counted.
 */
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import {
  postChat,
  serveConfig,
  serveInSuite,
  startMockerSuite,
  workerEntry,
  type MockerSuite,
} from '../../helpers/serve-suite.js';
import { expectServedBy, openStream } from '../../helpers/drained-stream.js';
import { until } from '../../helpers/until.js';

const MODEL = 'reload-model';
const MESSAGES = [
  {
    role: 'user',
    content: 'Write a long story about a lighthouse keeper who collects shells and names every one of them.',
  },
];

function configText(
  engines: readonly MockerLine[],
  opts: { temperature: number | string; blockSize?: number },
): string {
  return serveConfig(MODEL, [
    ...(opts.blockSize !== undefined ? [`block_size: ${opts.blockSize}`] : []),
    `router: { router_temperature: ${opts.temperature} }`,
    'workers:',
    ...engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`),
  ]);
}

/** A reloadable gateway over `count` mocker engines, its config file written with temperature 0, `flags` after `-c`. */
interface Reloadable {
  suite: MockerSuite;
  file: string;
  url: string;
  gateway: CliProcess;
  engines: readonly MockerLine[];
}

async function startReloadable(name: string, count: number, flags: readonly string[] = []): Promise<Reloadable> {
  const suite = await startMockerSuite(name, ['--model', MODEL, '--tokenizer', 'demo'], count);
  const engines = suite.engines;
  const file = suite.write('kvgate.yaml', configText(engines, { temperature: 0 }));
  const gateway = startCli(['serve', '-c', file, ...flags]);
  suite.procs.push(gateway);
  const url = (await gateway.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'the gateway listening'))[1]!;
  return { suite, file, url, gateway, engines };
}

describe('kvgate serve reloads its config file (SIGHUP, POST /admin/reload)', () => {
  let suite: MockerSuite;
  let file: string;
  let url: string;
  let gateway: CliProcess;
  let engines: readonly MockerLine[];

  beforeAll(async () => {
    ({ suite, file, url, gateway, engines } = await startReloadable('reload', 2));
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  const chat = (extra: Record<string, unknown>): Promise<Response> =>
    postChat(url, { model: MODEL, messages: MESSAGES, ...extra });
  const routerConfig = async (): Promise<{ temperature: number; workers: number[] }> => {
    const c = (await (await fetch(`${url}/admin/config`)).json()) as {
      models: { router: { routerTemperature: number }; workers: { id: number }[] }[];
    };
    return { temperature: c.models[0]!.router.routerTemperature, workers: c.models[0]!.workers.map((w) => w.id) };
  };
  const count = (text: string, re: RegExp): number => text.split('\n').filter((l) => re.test(l)).length;

  it('applies a new router_temperature and a removed worker without dropping the stream in flight on it', async () => {
    const res = await chat({ stream: true, max_tokens: 150, nvext: { backend_instance_id: 2 } });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-kvgate-worker')).toBe('2');
    const stream = await openStream(res);

    writeFileSync(file, configText(engines.slice(0, 1), { temperature: 0.7 }));
    gateway.child.kill('SIGHUP');
    await gateway.waitFor(/configuration reloaded: [^"]*router_temperature/, 'the reload log line');
    expect(gateway.output()).toMatch(/worker 2 leaves model reload-model/);
    expect(await routerConfig()).toEqual({ temperature: 0.7, workers: [1] });

    // New requests go to the remaining worker only.
    await expectServedBy(() => chat({ max_tokens: 2 }), '1');
    // The stream that was running on worker 2 finishes normally.
    await stream.finish();
  }, 60_000);

  it('rejects an invalid file on SIGHUP: nothing changes and the log names the field', async () => {
    writeFileSync(file, configText(engines, { temperature: -1 }));
    gateway.child.kill('SIGHUP');
    await gateway.waitFor(
      /configuration reload rejected[^\n]*models\[0\]\.router\.router_temperature/,
      'the rejection naming the field',
    );
    expect(await routerConfig()).toEqual({ temperature: 0.7, workers: [1] });
    const r = await chat({ max_tokens: 2 });
    expect(r.status).toBe(200);
    expect(r.headers.get('x-kvgate-worker')).toBe('1');
    await r.arrayBuffer();
  }, 30_000);

  it('refuses on POST /admin/reload a change that needs a restart, naming the field, and counts every outcome', async () => {
    writeFileSync(file, configText(engines, { temperature: 0.2, blockSize: 32 }));
    const res = await fetch(`${url}/admin/reload`, { method: 'POST' });
    expect(res.status).toBe(422);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('KVG_ERR_RELOAD_REJECTED');
    expect(body.error.message).toMatch(
      /models\[0\]\.block_size: changed from 16 to 32, which takes effect only when kvgate restarts/,
    );
    expect(await routerConfig()).toEqual({ temperature: 0.7, workers: [1] });

    writeFileSync(file, configText(engines, { temperature: 0.7 }));
    const ok = await fetch(`${url}/admin/reload`, { method: 'POST' });
    expect(ok.status).toBe(200);
    const applied = (await ok.json()) as { changes: { path: string; to?: string[] }[] };
    expect(applied.changes).toEqual([{ path: 'models[0].workers', to: [`2 aggregated ${engines[1]!.url}`] }]);
    expect(await routerConfig()).toEqual({ temperature: 0.7, workers: [1, 2] });

    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('kvgate_config_reloads_total{trigger="sighup",outcome="applied"} 1');
    expect(metrics).toContain('kvgate_config_reloads_total{trigger="sighup",outcome="rejected"} 1');
    expect(metrics).toContain('kvgate_config_reloads_total{trigger="admin",outcome="rejected"} 1');
    expect(metrics).toContain(
      'kvgate_worker_membership_changes_total{model="reload-model",source="static",change="left"} 1',
    );
    expect(count(gateway.output(), /configuration reload rejected/)).toBe(2);
  }, 30_000);
});

/**
 * A worker the reloaded file adds whose id a workers file already holds cannot join. Before the fix the reload
 * counted as applied, and the running configuration recorded the worker as configured, so reloading the same file
 * once the id was free changed nothing and the worker never joined.
 */
describe('a reload that adds a worker whose id another source holds', () => {
  let suite: MockerSuite;
  let file: string;
  let workersFile: string;
  let url: string;
  let gateway: CliProcess;
  let engines: readonly MockerLine[];

  const config = (statics: readonly number[]): string =>
    serveConfig(MODEL, [
      'workers_file: workers.yaml',
      'workers:',
      ...statics.map((id) => `  - ${workerEntry(id, engines[id - 1]!)}`),
    ]);
  const workersText = (ids: readonly number[]): string =>
    ids.length === 0
      ? 'workers: []\n'
      : ['workers:', ...ids.map((id) => `  - ${workerEntry(id, engines[id - 1]!)}`), ''].join('\n');
  const sources = async (): Promise<Record<number, string>> => {
    const m = (await (await fetch(`${url}/admin/models`)).json()) as {
      models: { workers: { id: number; source?: string }[] }[];
    };
    return Object.fromEntries(m.models[0]!.workers.map((w) => [w.id, w.source ?? '']));
  };

  beforeAll(async () => {
    suite = await startMockerSuite('reload-clash', ['--model', MODEL, '--tokenizer', 'demo'], 2);
    engines = suite.engines;
    workersFile = suite.write('workers.yaml', workersText([2]));
    file = suite.write('kvgate.yaml', config([1]));
    url = await serveInSuite(suite, file);
    gateway = suite.procs.at(-1) as CliProcess;
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  it('is applied in part, named and counted, and joins on a later reload once the id is free', async () => {
    expect(await sources()).toEqual({ 1: 'static', 2: 'file' });
    writeFileSync(file, config([1, 2]));
    const partial = await fetch(`${url}/admin/reload`, { method: 'POST' });
    expect(partial.status).toBe(200);
    expect(await partial.json()).toMatchObject({
      status: 'partial',
      not_joined: [{ worker_id: 2, model: MODEL, reason: expect.stringMatching(/2/) }],
    });
    await gateway.waitFor(/configuration reloaded in part: [^"]*worker\(s\) 2 could not join/, 'the partial line');
    expect(await sources()).toEqual({ 1: 'static', 2: 'file' });

    // The workers file lets go of id 2; the same config file reloaded now adds it.
    writeFileSync(workersFile, workersText([]));
    await until(async () => (await sources())[2] === undefined, 'worker 2 to leave with the workers file');
    const applied = await fetch(`${url}/admin/reload`, { method: 'POST' });
    expect(await applied.json()).toMatchObject({ status: 'reloaded', changes: [{ path: 'models[0].workers' }] });
    expect(await sources()).toEqual({ 1: 'static', 2: 'static' });
    const metrics = await (await fetch(`${url}/metrics`)).text();
    expect(metrics).toContain('kvgate_config_reloads_total{trigger="admin",outcome="partial"} 1');
    expect(metrics).toContain('kvgate_config_reloads_total{trigger="admin",outcome="applied"} 1');
  }, 60_000);
});

/**
 * The flags go on top of the file at every reload: a file edit to a field a flag sets cannot take effect. Before the
 * fix `POST /admin/reload` answered `{"status":"reloaded","changes":[]}` and the edit was passed over in silence.
 */
describe('a reload of a file edit that a command-line flag hides', () => {
  let suite: MockerSuite;
  let file: string;
  let url: string;
  let gateway: CliProcess;
  let engines: readonly MockerLine[];

  beforeAll(async () => {
    ({ suite, file, url, gateway, engines } = await startReloadable('reload-flags', 1, [
      '--router-temperature',
      '0.5',
    ]));
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  it('names the field and its flag in the answer and on a warn line, and keeps the flag value', async () => {
    writeFileSync(file, configText(engines, { temperature: 0.9 }));
    const res = await fetch(`${url}/admin/reload`, { method: 'POST' });
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({
      status: 'reloaded',
      changes: [],
      hidden_by_flags: [{ path: 'models[0].router.router_temperature', flag: '--router-temperature' }],
    });
    await gateway.waitFor(/"level":40[^\n]*set by --router-temperature/, 'the warn line naming the flag');
    const c = (await (await fetch(`${url}/admin/config`)).json()) as {
      models: { router: { routerTemperature: number } }[];
    };
    expect(c.models[0]!.router.routerTemperature).toBe(0.5);
  }, 30_000);
});
