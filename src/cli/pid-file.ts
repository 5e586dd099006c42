/**
 * `pid_file` / `--pid-file`: the process id of the `kvgate serve` an operator
 * started (with `--processes N`, the cluster primary, which passes SIGHUP on
 * to every process), so `kill -HUP "$(cat FILE)"` reaches exactly this
 * gateway whatever the command line looks like and however many run.
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs';
import { KvgateError } from '../errors/index.js';

/**
 * Writes this process's id to `path` (replacing a stale file) and returns what removes it; a no-op without a path.
 * The file is removed only while it still names this process (another gateway may have taken the path since).
 * @throws KvgateError KVG_ERR_INVALID_CONFIG when the file cannot be written (a startup failure, exit code 2).
 */
export function writePidFile(path: string | undefined): () => void {
  if (path === undefined) return () => undefined;
  const pid = String(process.pid);
  try {
    writeFileSync(path, `${pid}\n`);
  } catch (err) {
    throw new KvgateError(
      'KVG_ERR_INVALID_CONFIG',
      `pid_file: cannot write ${path}: ${(err as Error).message}`,
      { source: 'pid_file', reason: (err as NodeJS.ErrnoException).code ?? 'write failed' },
      { cause: err },
    );
  }
  return () => {
    try {
      if (readPid(path) === pid) rmSync(path, { force: true });
    } catch {
      // Gone already, or unreadable: nothing of ours to remove.
    }
  };
}

function readPid(path: string): string {
  return readFileSync(path, 'utf8').trim();
}
