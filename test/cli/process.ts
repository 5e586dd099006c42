/**
 * The compiled `kvgate` command as a child process (bin/kvgate.js -> dist/,
 * which `npm test` builds first), its stdout and stderr collected as text.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';

export const ROOT = new URL('../../', import.meta.url).pathname;
const BIN = join(ROOT, 'bin/kvgate.js');

export interface KvgateProcess {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  stdout: string;
  stderr: string;
  /** Resolves with the exit code (or the signal's name) once the process has exited and its output is read. */
  readonly exited: Promise<number | string>;
}

/** Starts `node bin/kvgate.js ...args` in the repository root. */
export function kvgate(args: readonly string[]): KvgateProcess {
  if (!existsSync(join(ROOT, 'dist/src/cli/index.js')))
    throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  const proc = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise<number | string>((resolve) =>
      child.once('close', (code, signal) => resolve(code ?? signal ?? -1)),
    ),
  };
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (proc.stdout += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (proc.stderr += chunk));
  return proc;
}

/** Runs `kvgate ...args` to completion. */
export async function kvgateRun(
  args: readonly string[],
): Promise<{ code: number | string; stdout: string; stderr: string }> {
  const p = kvgate(args);
  const code = await p.exited;
  return { code, stdout: p.stdout, stderr: p.stderr };
}
