/** Real `kvgate` processes for the events integration tests: spawn, collect stdout lines, find JSON lines, stop. */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import type { Readable } from 'node:stream';
import { until } from '../../helpers/until.js';

const ROOT = new URL('../../../', import.meta.url).pathname;
const BIN = join(ROOT, 'bin/kvgate.js');

/** A child process whose stdout and stderr are collected line by line. */
export interface Proc {
  readonly child: ChildProcessByStdio<null, Readable, Readable>;
  readonly lines: string[];
  readonly stderr: string[];
}

export function start(args: readonly string[]): Proc {
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

async function stop(p: Proc | undefined): Promise<void> {
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
export async function lineOf(p: Proc, what: string, pick: (o: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  let found: Record<string, unknown> | undefined;
  await until(() => {
    if (p.child.exitCode !== null) throw new Error(`process exited (${p.child.exitCode}) before ${what}: ${p.stderr.join('')}`);
    found = p.lines.map(json).find((o) => o !== undefined && pick(o));
    return found !== undefined;
  }, what, 20_000);
  return found!;
}


/** A suite's scratch folder and its mocker and gateway processes, stopped and removed after the suite. */
export interface SuiteProcesses {
  dir: string;
  mocker: Proc | undefined;
  gateway: Proc | undefined;
}

/** Registers the suite's setup (compiled CLI present, scratch folder) and teardown. */
export function suiteProcesses(prefix: string): SuiteProcesses {
  const s: SuiteProcesses = { dir: '', mocker: undefined, gateway: undefined };
  beforeAll(() => {
    if (!existsSync(join(ROOT, 'dist/src/cli/index.js'))) throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
    s.dir = mkdtempSync(join(tmpdir(), prefix));
  });
  afterAll(async () => {
    await Promise.all([stop(s.gateway), stop(s.mocker)]);
    rmSync(s.dir, { recursive: true, force: true });
  });
  return s;
}

/** Starts a mocker engine (OS-chosen ports, speedup 100) with `args` added; resolves to its printed ports line. */
export async function startEngine(s: SuiteProcesses, args: readonly string[]): Promise<Record<string, unknown>> {
  s.mocker = start(['mocker', '--port', '0', '--kv-events-port', '0', '--bootstrap-port', '0', '--speedup', '100', ...args]);
  return lineOf(s.mocker, 'the mocker\'s ports', (o) => typeof o.url === 'string');
}
