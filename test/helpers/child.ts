/**
 * Child processes of the tests: stopping one politely, and starting an
 * external server (nats-server, etcd) whose port is read from its log.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { until } from './until.js';

/** SIGTERM, then waits for the exit (no-op once exited). */
export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

export interface ServerSpec {
  /** The Debian package that provides `cmd`, named when it cannot start. */
  readonly apt: string;
  /** The server's client port, from its stderr log; undefined until it is ready. */
  readonly port: (log: string) => number | undefined;
  readonly timeoutMs: number;
}

/** Starts `cmd args` and resolves once its stderr log says it serves, with the port it says; fails early if it exits. */
export async function spawnServer(
  cmd: string,
  args: readonly string[],
  spec: ServerSpec,
): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  let failed: Error | undefined;
  child.on('error', (err) => (failed = err));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (log += c));
  let port: number | undefined;
  await until(
    () => {
      if (failed !== undefined)
        throw new Error(`cannot start ${cmd} (install it: apt-get install ${spec.apt}): ${failed.message}`);
      if (child.exitCode !== null) throw new Error(`${cmd} exited: ${log}`);
      port = spec.port(log);
      return port !== undefined;
    },
    `${cmd} ready`,
    spec.timeoutMs,
  );
  return { child, port: port! };
}
