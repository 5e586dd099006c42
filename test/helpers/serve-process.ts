/**
 * `kvgate serve` and `kvgate mocker` started from a config file or flags, on
 * top of ./process.ts (the compiled CLI: `npm run build` first).
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT, json, lineOf, start, stop, type Proc } from './process.js';

export type CliProcess = Proc;
export const stopCli = stop;

/** The stdout lines that are JSON objects. */
export function jsonLines(p: CliProcess): Record<string, unknown>[] {
  return p.lines.map(json).filter((o): o is Record<string, unknown> => o !== undefined);
}

function startCli(args: readonly string[]): CliProcess {
  if (!existsSync(join(ROOT, 'dist/src/cli/index.js'))) throw new Error('dist/ is missing: run `npm run build` first (npm test does)');
  return start(args);
}

/** Starts `kvgate serve --config <file>` and waits for its startup line; resolves with the process and its URL. */
export async function startServe(configFile: string): Promise<{ proc: CliProcess; url: string }> {
  const proc = startCli(['serve', '--config', configFile]);
  const started = await lineOf(proc, 'the gateway\'s startup line', (o) => o.msg === 'kvgate gateway started');
  return { proc, url: String(started.listen) };
}

/** Starts one mocker engine on OS-chosen ports; resolves with its process and announced JSON line (url, model, kv_events). */
export async function startMockerCli(extra: readonly string[] = []): Promise<{ proc: CliProcess; engine: Record<string, unknown> }> {
  const proc = startCli(['mocker', '--port', '0', '--kv-events-port', '0', '--bootstrap-port', '0', '--speedup', '100', ...extra]);
  const engine = await lineOf(proc, 'the mocker\'s ports', (o) => typeof o.url === 'string');
  return { proc, engine };
}
