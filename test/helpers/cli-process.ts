/**
 * `bin/kvgate.js` as a child process (the compiled CLI, as an operator runs
 * it): stdout collected line by line, JSON log lines found by predicate.
 * Integration tests that use it need `npm run build` first (`npm test` does).
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { until } from './until.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const BIN = join(ROOT, 'bin/kvgate.js');

/** A child process whose stdout and stderr are collected line by line. */
export interface Proc {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  readonly lines: string[];
  readonly stderr: string[];
}

/** @throws Error when dist/ is missing (the CLI runs the compiled code). */
export function assertBuilt(): void {
  if (!existsSync(join(ROOT, 'dist/src/cli/index.js'))) throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
}

function start(args: readonly string[]): Proc {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc: Proc = { child, lines: [], stderr: [] };
  let buffered = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    const parts = buffered.split('\n');
    buffered = parts.pop()!;
    proc.lines.push(...parts);
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => proc.stderr.push(chunk));
  return proc;
}

export async function stop(p: Proc | undefined): Promise<void> {
  if (p === undefined || p.child.exitCode !== null || p.child.signalCode !== null) return;
  const exited = new Promise((resolve) => p.child.once('exit', resolve));
  p.child.kill('SIGTERM');
  await exited;
}

export function json(line: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(line);
    return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** Waits for the first stdout line that is a JSON object matching `pick`. */
async function lineOf(p: Proc, what: string, pick: (o: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  let found: Record<string, unknown> | undefined;
  await until(() => {
    if (p.child.exitCode !== null) throw new Error(`process exited (${p.child.exitCode}) before ${what}: ${p.stderr.join('')}`);
    found = p.lines.map(json).find((o) => o !== undefined && pick(o));
    return found !== undefined;
  }, what, 20_000);
  return found!;
}

/**
 * A mocker process (`mockerArgs` after the OS-chosen ports) and `kvgate serve` in
 * front of it as worker `workerId` with its KV events, from a config file written
 * to `dir`. Both processes are pushed to `procs` as they start (the caller stops them).
 */
export async function serveOverMocker(dir: string, opts: { mockerArgs: readonly string[]; workerId: number; blockSize: number }, procs: Proc[]): Promise<{ engine: Record<string, unknown>; url: string }> {
  const mocker = start(['mocker', '--port', '0', '--kv-events-port', '0', '--bootstrap-port', '0', ...opts.mockerArgs]);
  procs.push(mocker);
  const engine = await lineOf(mocker, 'the mocker\'s ports', (o) => typeof o.url === 'string');
  const config = join(dir, 'kvgate.json');
  writeFileSync(config, JSON.stringify({
    listen: { host: '127.0.0.1', port: 0 },
    preprocess: { threads: 0 },
    log: { level: 'info' },
    models: [{ name: engine.model, block_size: opts.blockSize, workers: [{ id: opts.workerId, url: engine.url, kv_events: (engine.kv_events as string[])[0] }] }],
  }));
  const gateway = start(['serve', '--config', config]);
  procs.push(gateway);
  const started = await lineOf(gateway, 'the gateway\'s startup line', (o) => o.msg === 'kvgate gateway started');
  return { engine, url: String(started.listen) };
}
