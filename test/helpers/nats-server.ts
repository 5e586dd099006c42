/**
 * A real `nats-server` (the Debian package; `.ci/run` installs it) on
 * loopback: an OS-chosen port at first start (`-p -1`, the port read from its
 * log), the same port again on restart.
 */
import type { ChildProcess } from 'node:child_process';
import { spawnServer, stopChild } from './child.js';

export interface NatsServer {
  readonly url: string;
  readonly port: number;
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port. */
  restart(): Promise<void>;
}

function spawnNats(port: number): Promise<{ child: ChildProcess; port: number }> {
  return spawnServer('nats-server', ['-a', '127.0.0.1', '-p', String(port)], {
    apt: 'nats-server',
    timeoutMs: 10_000,
    port: (log) => {
      const m = /Listening for client connections on [^\s]+:(\d+)/.exec(log);
      return m !== null && log.includes('Server is ready') ? Number(m[1]) : undefined;
    },
  });
}

export async function startNatsServer(): Promise<NatsServer> {
  let { child, port } = await spawnNats(-1);
  const stop = (): Promise<void> => stopChild(child);
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
