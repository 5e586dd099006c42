/**
 * `kvgate serve` and `kvgate mocker` started from a config file or flags, on
 * top of ./process.ts (the compiled CLI: `npm run build` first).
 */
import { assertBuilt, json, lineOf, start, stop, type Proc } from './process.js';

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
  const started = await lineOf(proc, 'the gateway\'s startup line', (o) => o.msg === 'kvgate gateway started');
  return { proc, url: String(started.listen) };
}

/** Starts one mocker engine on OS-chosen ports; resolves with its process and announced JSON line (url, model, kv_events). */
export async function startMockerEngine(extra: readonly string[] = []): Promise<{ proc: ServedProc; engine: Record<string, unknown> }> {
  const proc = startCompiled(['mocker', '--port', '0', '--kv-events-port', '0', '--bootstrap-port', '0', '--speedup', '100', ...extra]);
  const engine = await lineOf(proc, 'the mocker\'s ports', (o) => typeof o.url === 'string');
  return { proc, engine };
}
