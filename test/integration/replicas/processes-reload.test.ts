/**
 * `POST /admin/reload` under `kvgate serve --processes 2`: whichever process accepts the request, every process
 * reloads the file before the answer, which is the combined outcome. Each request goes on a fresh connection
 * (the cluster may hand it to either process) and `x-kvgate-process` says who answered; `/admin/config` shows
 * the configuration that process runs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { fresh } from '../../helpers/fresh-request.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'mock-model';

const configText = (engines: readonly MockerLine[], temperature: number | string): string =>
  serveConfig(MODEL, [
    `router: { router_temperature: ${temperature} }`,
    'workers:',
    ...engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`),
  ]);

/** The router temperature each process runs, from `/admin/config` answers until both processes answered. */
async function temperatures(url: string): Promise<Map<string, number>> {
  const seen = new Map<string, number>();
  await until(
    async () => {
      const a = await fresh(url, '/admin/config');
      expect(a.status).toBe(200);
      const c = JSON.parse(a.body) as { models: { router: { routerTemperature: number } }[] };
      seen.set(a.process, c.models[0]!.router.routerTemperature);
      return seen.size === 2;
    },
    'an answer of each process',
    15_000,
  );
  return seen;
}

describe('kvgate serve --processes 2: POST /admin/reload reloads every process', () => {
  let suite: MockerSuite;
  let gw: CliProcess;
  let url: string;
  let file: string;

  beforeAll(async () => {
    suite = await startMockerSuite('processes-reload', ['--model', MODEL, '--tokenizer', 'demo'], 2);
    file = suite.write('gw.yaml', configText(suite.engines, 0));
    gw = startCli(['serve', '-c', file, '--processes', '2']);
    suite.procs.push(gw);
    url = (await gw.waitFor(/"listen":"(http:\/\/[^"]+)","process"/, 'the processes listen', 30_000))[1]!;
    await until(async () => (await fresh(url, '/health').catch(() => undefined)) !== undefined, 'the port', 15_000);
    expect(Object.fromEntries(await temperatures(url))).toEqual({ '1': 0, '2': 0 });
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  it('one POST applies the changed file in both processes before it answers', async () => {
    suite.write('gw.yaml', configText(suite.engines, 0.5));
    const a = await fresh(url, '/admin/reload', {});
    expect(a.status).toBe(200);
    const body = JSON.parse(a.body) as { status: string; changes: { path: string }[]; processes: unknown };
    expect(body.status).toBe('reloaded');
    // No waiting for the reload: every answer from now on, whichever process gives it, has the new file.
    expect(Object.fromEntries(await temperatures(url))).toEqual({ '1': 0.5, '2': 0.5 });
    expect(body.changes.map((c) => c.path)).toEqual(['models[0].router.router_temperature']);
    expect(body.processes).toEqual([
      { process: 1, status: 'reloaded' },
      { process: 2, status: 'reloaded' },
    ]);
    // Each process logged and counted its own reload.
    const metrics = await fresh(url, '/metrics');
    for (const p of ['1', '2'])
      expect(metrics.body).toMatch(
        new RegExp(`^kvgate_config_reloads_total\\{(?=[^}]*process="${p}")(?=[^}]*outcome="applied")[^}]*\\} 1$`, 'm'),
      );
  }, 30_000);

  it('an invalid file is refused by every process and the answer says so (422); both keep the running config', async () => {
    suite.write('gw.yaml', configText(suite.engines, '-1'));
    const a = await fresh(url, '/admin/reload', {});
    expect(a.status).toBe(422);
    const body = JSON.parse(a.body) as { error: { code: string; message: string } };
    expect(body.error.code).toBe('KVG_ERR_RELOAD_REJECTED');
    expect(body.error.message).toContain('models[0].router.router_temperature');
    expect(body.error.message).not.toMatch(/https?:\/\//);
    expect(Object.fromEntries(await temperatures(url))).toEqual({ '1': 0.5, '2': 0.5 });
    // The process asked counts each process that did not apply the file, named, once.
    const metrics = await fresh(url, '/metrics');
    for (const p of ['1', '2'])
      expect(metrics.body).toMatch(
        new RegExp(
          `^kvgate_config_reload_process_failures_total\\{(?=[^}]*process="${a.process}")(?=[^}]*outcome="rejected")` +
            `(?=[^}]*failed_process="${p}")[^}]*\\} 1$`,
          'm',
        ),
      );
  }, 30_000);
});
