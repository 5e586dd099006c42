/**
 * `kvgate serve --pid-file FILE` (real processes: the gateway over two
 * `kvgate mocker` engines): the file names the gateway's process, so
 * `kill -HUP "$(cat FILE)"` reloads exactly this gateway however it was
 * started and however many run; with `--processes 2` it names the primary,
 * which passes SIGHUP on; the file goes when the gateway exits.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli } from '../../helpers/cli-process.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';
import { until } from '../../helpers/until.js';

const MODEL = 'pid-model';

describe('kvgate serve --pid-file', () => {
  let suite: MockerSuite;
  let config: string;

  beforeAll(async () => {
    suite = await startMockerSuite('pid-file', ['--model', MODEL, '--tokenizer', 'demo'], 2);
    config = suite.write(
      'kvgate.yaml',
      serveConfig(
        MODEL,
        [
          'router: { router_temperature: 0 }',
          'workers:',
          ...suite.engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`),
        ],
        ['preprocess: { threads: 0 }'],
      ),
    );
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  for (const processes of [1, 2]) {
    it(`names the process that reloads on SIGHUP and is removed on exit (--processes ${processes})`, async () => {
      const pidFile = join(suite.dir, `kvgate-${processes}.pid`);
      const gateway = startCli(['serve', '-c', config, '--pid-file', pidFile, '--processes', String(processes)]);
      suite.procs.push(gateway);
      // Every process listening (a SIGHUP while one starts is kept for it, but the reload line would then be its own).
      await until(
        () => gateway.output().split('kvgate gateway started').length - 1 === processes,
        `${processes} gateway process(es) listening`,
        30_000,
      );
      await until(() => existsSync(pidFile), 'the pid file', 10_000);
      expect(readFileSync(pidFile, 'utf8')).toBe(`${gateway.child.pid}\n`);

      // The operator's command, as the README gives it.
      execFileSync('bash', ['-c', `kill -HUP "$(cat '${pidFile}')"`]);
      await until(
        () => gateway.output().split('configuration reloaded').length - 1 === processes,
        'a reload line from every process',
        15_000,
      );
      await gateway.stop();
      expect(existsSync(pidFile)).toBe(false);
    }, 60_000);
  }
});
