/**
 * A real `nats-server` (the Debian package; `.ci/run` installs it) on
 * loopback: an OS-chosen port at first start (`-p -1`, the port read from its
 * log), the same port again on restart.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { until } from './until.js';

export interface NatsServer {
  readonly url: string;
  readonly port: number;
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port. */
  restart(): Promise<void>;
}

async function spawnNats(port: number): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn('nats-server', ['-a', '127.0.0.1', '-p', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  let failed: Error | undefined;
  child.on('error', (err) => (failed = err));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (log += c));
  let bound: number | undefined;
  await until(() => {
    if (failed !== undefined) throw new Error(`cannot start nats-server (install it: apt-get install nats-server): ${failed.message}`);
    if (child.exitCode !== null) throw new Error(`nats-server exited: ${log}`);
    const m = /Listening for client connections on [^\s]+:(\d+)/.exec(log);
    if (m !== null && log.includes('Server is ready')) bound = Number(m[1]);
    return bound !== undefined;
  }, 'nats-server ready', 10_000);
  return { child, port: bound! };
}

export async function startNatsServer(): Promise<NatsServer> {
  let { child, port } = await spawnNats(-1);
  const stop = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop,
    async restart() {
      await stop();
      // The port was ours a moment ago; another process taking it in between fails the test loudly.
      ({ child } = await spawnNats(port));
    },
  };
}
