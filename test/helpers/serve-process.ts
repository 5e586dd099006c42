/**
 * `bin/kvgate.js` as a child process (the compiled CLI: `npm run build` first):
 * stdout collected line by line, JSON lines readable, SIGTERM to stop.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { until } from './until.js';

const ROOT = new URL('../../', import.meta.url).pathname;
const BIN = join(ROOT, 'bin/kvgate.js');

export interface CliProcess {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  readonly lines: string[];
  readonly stderr: string[];
}

/** Starts `kvgate <args>`. @throws when dist/ is missing. */
function startCli(args: readonly string[]): CliProcess {
  if (!existsSync(join(ROOT, 'dist/src/cli/index.js'))) throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc: CliProcess = { child, lines: [], stderr: [] };
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

/** SIGTERM, then resolves when the process has exited. */
export async function stopCli(p: CliProcess | undefined): Promise<void> {
  if (p === undefined || p.child.exitCode !== null || p.child.signalCode !== null) return;
  const exited = new Promise((resolve) => p.child.once('exit', resolve));
  p.child.kill('SIGTERM');
  await exited;
}

/** The stdout lines that are JSON objects. */
export function jsonLines(p: CliProcess): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  for (const line of p.lines) {
    try {
      const v: unknown = JSON.parse(line);
      if (typeof v === 'object' && v !== null && !Array.isArray(v)) out.push(v as Record<string, unknown>);
    } catch {
      // banner text
    }
  }
  return out;
}

/** Waits for the first JSON stdout line matching `pick`. */
async function jsonLineOf(p: CliProcess, what: string, pick: (o: Record<string, unknown>) => boolean, timeoutMs = 20_000): Promise<Record<string, unknown>> {
  let found: Record<string, unknown> | undefined;
  await until(() => {
    if (p.child.exitCode !== null) throw new Error(`process exited (${p.child.exitCode}) before ${what}: ${p.stderr.join('')}`);
    found = jsonLines(p).find(pick);
    return found !== undefined;
  }, what, timeoutMs);
  return found!;
}

/** Starts `kvgate serve --config <file>` and waits for its startup line; resolves with the process and its URL. */
export async function startServe(configFile: string): Promise<{ proc: CliProcess; url: string }> {
  const proc = startCli(['serve', '--config', configFile]);
  const started = await jsonLineOf(proc, 'the gateway\'s startup line', (o) => o.msg === 'kvgate gateway started');
  return { proc, url: String(started.listen) };
}

/** Starts one mocker engine on OS-chosen ports; resolves with its process and announced JSON line (url, model, kv_events). */
export async function startMockerCli(extra: readonly string[] = []): Promise<{ proc: CliProcess; engine: Record<string, unknown> }> {
  const proc = startCli(['mocker', '--port', '0', '--kv-events-port', '0', '--bootstrap-port', '0', '--speedup', '100', ...extra]);
  const engine = await jsonLineOf(proc, 'the mocker\'s ports', (o) => typeof o.url === 'string');
  return { proc, engine };
}
