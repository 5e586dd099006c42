/**
 * What the `kvgate serve -c FILE` integration suites share: one `kvgate mocker`
 * process with N engines, a temporary directory for the config files they
 * write, the config's common lines and a chat request. Each suite adds what
 * it tests (etcd, a workers file, reloads, several processes) on top.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startMockerCli, startServeCli, type CliProcess, type MockerLine } from './cli-process.js';

export interface MockerSuite {
  readonly dir: string;
  readonly engines: readonly MockerLine[];
  /** Every process stopped by `stop()`: the mocker, and what the suite adds (gateways, registrations). */
  readonly procs: CliProcess[];
  /** Writes `text` to the file `name` in `dir`; returns its path. */
  write(name: string, text: string): string;
  /** Stops every process (SIGTERM, together) and removes `dir`. */
  stop(): Promise<void>;
}

/** Starts `kvgate mocker ARGS` with `count` engines and makes a temporary directory named after `name`. */
export async function startMockerSuite(
  name: string,
  mockerArgs: readonly string[],
  count: number,
): Promise<MockerSuite> {
  const mocker = await startMockerCli(mockerArgs, count);
  const dir = mkdtempSync(join(tmpdir(), `kvgate-${name}-`));
  const procs = [mocker.proc];
  return {
    dir,
    engines: mocker.engines,
    procs,
    write(file, text) {
      const path = join(dir, file);
      writeFileSync(path, text);
      return path;
    },
    async stop() {
      await Promise.allSettled(procs.map((p) => p.stop()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A `kvgate serve` YAML config of one model: the port chosen by the OS, `top` lines (default: the admin
 * endpoints on and preprocessing on the main thread, which a test's timing should not depend on), then the
 * model with the demo tokenizer and its `modelLines` (indented as members of the model).
 */
export function serveConfig(
  model: string,
  modelLines: readonly string[],
  top: readonly string[] = ['admin: { enabled: true }', 'preprocess: { threads: 0 }'],
): string {
  return [
    'listen: { port: 0 }',
    ...top,
    'models:',
    `  - name: ${model}`,
    '    tokenizer: demo',
    ...modelLines.map((l) => `    ${l}`),
    '',
  ].join('\n');
}

/** One worker of a YAML `workers` list: its id, the engine's URL and its first KV-event endpoint. */
export const workerEntry = (id: number, e: MockerLine): string =>
  `{ id: ${id}, url: "${e.url}", kv_events: "${e.kv_events[0]}" }`;

/** POSTs `{ model, messages, ...extra }` as JSON to the gateway at `url` (`path` defaults to chat completions). */
export function postChat(
  url: string,
  body: { model: string; messages: unknown } & Record<string, unknown>,
  path = '/v1/chat/completions',
): Promise<Response> {
  return fetch(`${url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

/** Starts `kvgate serve -c FILE` as one of the suite's processes (stopped with it); resolves to its URL. */
export async function serveInSuite(suite: MockerSuite, configFile: string): Promise<string> {
  const gw = await startServeCli(configFile);
  suite.procs.push(gw.proc);
  return gw.url;
}

/**
 * A `kvgate serve` (kv routing, demo tokenizer) in front of `count` mocker engines with ids 1..count,
 * added to a new suite named `name`; `suite.stop()` stops both. `modelLines` are added to the model.
 */
export async function startKvGatewaySuite(
  name: string,
  model: string,
  count: number,
  modelLines: readonly string[] = [],
): Promise<{ suite: MockerSuite; url: string }> {
  const suite = await startMockerSuite(name, ['--tokenizer', 'demo', '--max-model-len', '65536'], count);
  const file = suite.write(
    'serve.yaml',
    serveConfig(model, [...modelLines, 'workers:', ...suite.engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`)]),
  );
  return { suite, url: await serveInSuite(suite, file) };
}

/** A user message of `words` distinct words tagged `tag`: prompts with different tags differ from their first block. */
export function distinctWords(tag: string, words: number): string {
  return Array.from({ length: words }, (_, i) => `${tag}${(i * 7919) % 10007}`).join(' ');
}
