/** Real `kvgate` processes for the events integration tests: spawn, collect stdout lines, find JSON lines, stop. */
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { ROOT, lineOf, start, stop, type Proc } from '../../helpers/process.js';

export { json, lineOf, start, type Proc } from '../../helpers/process.js';

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
    if (!existsSync(join(ROOT, 'dist/src/cli/index.js')))
      throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
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
  s.mocker = start([
    'mocker',
    '--port',
    '0',
    '--kv-events-port',
    '0',
    '--bootstrap-port',
    '0',
    '--speedup',
    '100',
    ...args,
  ]);
  return lineOf(s.mocker, "the mocker's ports", (o) => typeof o.url === 'string');
}
