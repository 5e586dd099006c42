/**
 * kvgate as an operator runs it: `node bin/kvgate.js ...` child processes
 * (the compiled CLI, so `npm run build` first), their stdout collected line by
 * line (pino JSON lines and the mocker's port report) and stderr kept for
 * failure messages.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { stopChild } from './child.js';
import { until } from './until.js';

export const ROOT = new URL('../../', import.meta.url).pathname;
export const BIN = join(ROOT, 'bin/kvgate.js');

/** Throws unless the CLI is compiled: `bin/kvgate.js` runs `dist/`. */
export function assertBuilt(): void {
  if (!existsSync(join(ROOT, 'dist/src/cli/index.js')))
    throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
}

/** `kvgate mocker` flags that put an engine's HTTP, KV-event and bootstrap ports where the OS chooses. */
export const MOCKER_OS_PORTS: readonly string[] = ['--port', '0', '--kv-events-port', '0', '--bootstrap-port', '0'];

/** A child process whose stdout and stderr are collected line by line. */
export interface Proc {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  readonly lines: string[];
  readonly stderr: string[];
}

export function start(args: readonly string[]): Proc {
  return startCommand(process.execPath, [BIN, ...args]);
}

/** Any command run from the repository root, its output collected as `start`'s (e.g. kvgate inside a container). */
export function startCommand(cmd: string, args: readonly string[]): Proc {
  const child = spawn(cmd, args, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
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
  if (p !== undefined) await stopChild(p.child);
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
export async function lineOf(
  p: Proc,
  what: string,
  pick: (o: Record<string, unknown>) => boolean,
  timeoutMs = 20_000,
): Promise<Record<string, unknown>> {
  let found: Record<string, unknown> | undefined;
  await until(
    () => {
      if (p.child.exitCode !== null)
        throw new Error(`process exited (${p.child.exitCode}) before ${what}: ${p.stderr.join('')}`);
      found = p.lines.map(json).find((o) => o !== undefined && pick(o));
      return found !== undefined;
    },
    what,
    timeoutMs,
  );
  return found!;
}
