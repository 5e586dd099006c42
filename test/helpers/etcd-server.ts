/**
 * A real single-node etcd (Debian's etcd-server package; `.ci/run` installs
 * it) on loopback: OS-chosen client and peer ports (the client port read from
 * its log) and a temporary data directory, removed on stop.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from './until.js';

export interface EtcdServer {
  /** The client endpoint, http://127.0.0.1:PORT. */
  readonly url: string;
  /** Stops the server (SIGTERM), waits for it to exit and removes its data. */
  stop(): Promise<void>;
  /** Stops it and starts an empty one (a wiped or restored cluster) on the same client port. */
  restartEmpty(): Promise<void>;
}

async function spawnEtcd(dir: string, clientPort: number): Promise<{ child: ChildProcess; port: number }> {
  // Peer port 0: the advertised URLs are never dialled by a single node's clients (they use `url`).
  const child = spawn('etcd', ['--name', 'kvgate-test', '--data-dir', join(dir, 'data'),
    '--listen-client-urls', `http://127.0.0.1:${clientPort}`, '--advertise-client-urls', 'http://127.0.0.1:2379',
    '--listen-peer-urls', 'http://127.0.0.1:0', '--initial-advertise-peer-urls', 'http://127.0.0.1:2380',
    '--initial-cluster', 'kvgate-test=http://127.0.0.1:2380'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  let failed: Error | undefined;
  child.on('error', (err) => (failed = err));
  child.stderr!.setEncoding('utf8').on('data', (c: string) => (log += c));
  let port: number | undefined;
  await until(() => {
    if (failed !== undefined) throw new Error(`cannot start etcd (install it: apt-get install etcd-server): ${failed.message}`);
    if (child.exitCode !== null) throw new Error(`etcd exited: ${log}`);
    const m = /serving insecure client requests on 127\.0\.0\.1:(\d+)/.exec(log);
    if (m !== null) port = Number(m[1]);
    return port !== undefined;
  }, 'etcd ready', 20_000);
  return { child, port: port! };
}

export async function startEtcdServer(): Promise<EtcdServer> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-etcd-'));
  const started = await spawnEtcd(dir, 0);
  const port = started.port;
  let child = started.child;
  const kill = async (): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  };
  return {
    url: `http://127.0.0.1:${port}`,
    async stop() {
      await kill();
      rmSync(dir, { recursive: true, force: true });
    },
    async restartEmpty() {
      await kill();
      rmSync(join(dir, 'data'), { recursive: true, force: true });
      // The port was ours a moment ago; another process taking it in between fails the test loudly.
      ({ child } = await spawnEtcd(dir, port));
    },
  };
}
