/**
 * A real `nats-server` (the Debian package; `.ci/run` installs it) on
 * loopback: an OS-chosen port at first start (`-p -1`, the port read from its
 * log), the same port again on restart; optionally with a smaller
 * `max_payload` than its 1 MiB default (a config file: it has no flag). It can
 * also be paused (SIGSTOP): its connections stay open and go silent, as a hung
 * server or a partition leaves them, which only the clients' pings notice.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnServer, stopChild } from './child.js';

export interface NatsServer {
  readonly url: string;
  readonly port: number;
  /** Stops the server (SIGTERM) and waits for it to exit. */
  stop(): Promise<void>;
  /** Starts it again on the same port. */
  restart(): Promise<void>;
  /** Stops the process where it is (SIGSTOP): its sockets stay open, nothing is answered. */
  pause(): void;
  /** Lets a paused server go on (SIGCONT). */
  resume(): void;
}

export interface NatsServerOptions {
  /** The largest message the server takes (bytes). */
  readonly maxPayload?: number;
}

function spawnNats(port: number, conf: string[]): Promise<{ child: ChildProcess; port: number }> {
  return spawnServer('nats-server', [...conf, '-a', '127.0.0.1', '-p', String(port)], {
    apt: 'nats-server',
    timeoutMs: 10_000,
    port: (log) => {
      const m = /Listening for client connections on [^\s]+:(\d+)/.exec(log);
      return m !== null && log.includes('Server is ready') ? Number(m[1]) : undefined;
    },
  });
}

export async function startNatsServer(opts: NatsServerOptions = {}): Promise<NatsServer> {
  const conf: string[] = [];
  let dir: string | undefined;
  if (opts.maxPayload !== undefined) {
    dir = mkdtempSync(join(tmpdir(), 'kvgate-nats-'));
    writeFileSync(join(dir, 'nats.conf'), `max_payload: ${opts.maxPayload}\n`);
    conf.push('-c', join(dir, 'nats.conf'));
  }
  let { child, port } = await spawnNats(-1, conf);
  const stop = async (): Promise<void> => {
    child.kill('SIGCONT'); // a paused server would not handle the SIGTERM
    await stopChild(child);
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  };
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    stop,
    pause: () => void child.kill('SIGSTOP'),
    resume: () => void child.kill('SIGCONT'),
    async restart() {
      await stopChild(child);
      // The port was ours a moment ago; another process taking it in between fails the test loudly.
      ({ child } = await spawnNats(port, conf));
    },
  };
}
