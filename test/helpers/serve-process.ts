/**
 * `kvgate serve` and `kvgate mocker` started from a config file or flags, on
 * top of ./process.ts (the compiled CLI: `npm run build` first).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { assertBuilt, json, lineOf, MOCKER_OS_PORTS, start, stop, type Proc } from './process.js';

/** A `kvgate serve` or `kvgate mocker` process of these suites (stdout kept line by line; see ./process.ts). */
export type ServedProc = Proc;
export const stopServed = stop;

/** The stdout lines that are JSON objects. */
export function jsonLines(p: ServedProc): Record<string, unknown>[] {
  return p.lines.map(json).filter((o): o is Record<string, unknown> => o !== undefined);
}

function startCompiled(args: readonly string[]): ServedProc {
  assertBuilt();
  return start(args);
}

/** Starts `kvgate serve --config <file>` and waits for its startup line; resolves with the process and its URL. */
export async function startServe(configFile: string): Promise<{ proc: ServedProc; url: string }> {
  const proc = startCompiled(['serve', '--config', configFile]);
  const started = await lineOf(proc, "the gateway's startup line", (o) => o.msg === 'kvgate gateway started');
  return { proc, url: String(started.listen) };
}

/** Starts one mocker engine on OS-chosen ports; resolves with its process and announced JSON line (url, model, kv_events). */
export async function startMockerEngine(
  extra: readonly string[] = [],
): Promise<{ proc: ServedProc; engine: Record<string, unknown> }> {
  const proc = startCompiled(['mocker', ...MOCKER_OS_PORTS, '--speedup', '100', ...extra]);
  const engine = await lineOf(proc, "the mocker's ports", (o) => typeof o.url === 'string');
  return { proc, engine };
}

/** A `kvgate serve` started from a config object: its process, URL, and `stop()` (the process, then its config's directory). */
export interface ServedGateway {
  readonly proc: ServedProc;
  readonly url: string;
  stop(): Promise<void>;
}

/** Writes `config` as JSON to a fresh temporary directory and starts `kvgate serve` on it. */
export async function serveConfigObject(config: Record<string, unknown>): Promise<ServedGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-serve-'));
  const file = join(dir, 'kvgate.json');
  writeFileSync(file, JSON.stringify(config));
  try {
    const { proc, url } = await startServe(file);
    return {
      proc,
      url,
      async stop() {
        await stop(proc);
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
