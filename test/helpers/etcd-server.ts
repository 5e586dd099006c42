/**
 * A real single-node etcd (Debian's etcd-server package; `.ci/run` installs
 * it) on loopback: OS-chosen client and peer ports (the client port read from
 * its log) and a temporary data directory, removed on stop.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnServer, stopChild } from './child.js';

export interface EtcdServer {
  /** The client endpoint, http://127.0.0.1:PORT. */
  readonly url: string;
  /** Stops the server (SIGTERM), waits for it to exit and removes its data. */
  stop(): Promise<void>;
  /** Stops it and starts an empty one (a wiped or restored cluster) on the same client port. */
  restartEmpty(): Promise<void>;
  /** Stops the server (SIGTERM) and waits for it to exit; its data stays for `resume`. */
  halt(): Promise<void>;
  /** Starts a halted server again on the same client port: with its data, or `empty` (a cluster that lost it). */
  resume(opts?: { empty?: boolean }): Promise<void>;
}

function spawnEtcd(dir: string, clientPort: number): Promise<{ child: ChildProcess; port: number }> {
  // Peer port 0: the advertised URLs are never dialled by a single node's clients (they use `url`).
  return spawnServer(
    'etcd',
    [
      '--name',
      'kvgate-test',
      '--data-dir',
      join(dir, 'data'),
      '--listen-client-urls',
      `http://127.0.0.1:${clientPort}`,
      '--advertise-client-urls',
      'http://127.0.0.1:2379',
      '--listen-peer-urls',
      'http://127.0.0.1:0',
      '--initial-advertise-peer-urls',
      'http://127.0.0.1:2380',
      '--initial-cluster',
      'kvgate-test=http://127.0.0.1:2380',
    ],
    {
      apt: 'etcd-server',
      timeoutMs: 20_000,
      port: (log) => {
        const m = /serving insecure client requests on 127\.0\.0\.1:(\d+)/.exec(log);
        return m === null ? undefined : Number(m[1]);
      },
    },
  );
}

export async function startEtcdServer(): Promise<EtcdServer> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-etcd-'));
  const started = await spawnEtcd(dir, 0);
  const port = started.port;
  let child = started.child;
  const kill = (): Promise<void> => stopChild(child);
  const resume = async (opts: { empty?: boolean } = {}): Promise<void> => {
    if (opts.empty === true) rmSync(join(dir, 'data'), { recursive: true, force: true });
    // The port was ours a moment ago; another process taking it in between fails the test loudly.
    ({ child } = await spawnEtcd(dir, port));
  };
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
    async restartEmpty() {
      await kill();
      await resume({ empty: true });
    },
    halt: kill,
    resume,
  };
}
