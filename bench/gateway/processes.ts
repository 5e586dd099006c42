/**
 * The processes of the gateway bench: wrk, nginx, nats-server and the Node
 * fronts, each optionally pinned to its own cores with `taskset`, and their
 * CPU time read from /proc.
 *
 * KVGATE_BENCH_GATEWAY_CPUS pins the roles to CPU lists (taskset -c syntax),
 * e.g. `wrk=0-1;backend=2-3;front=4-9`: `wrk` the load generator, `backend`
 * the trivial backend, `front` everything measured (nginx, the floor proxy,
 * kvgate and its processes). A role left out is not pinned. Pinning keeps the
 * load generator and the backend from taking the front's cores, so on a large
 * machine a row measures the front, not the scheduler's placement.
 * KVGATE_BENCH_GATEWAY_WRK_THREADS sets wrk's threads (default 1).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from '../util.js';

export type Role = 'wrk' | 'backend' | 'front';

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

/** The CPU list of each pinned role, from KVGATE_BENCH_GATEWAY_CPUS. */
const PINS: Partial<Record<Role, string>> = (() => {
  const out: Partial<Record<Role, string>> = {};
  for (const part of (process.env.KVGATE_BENCH_GATEWAY_CPUS ?? '').split(';')) {
    const [role, cpus] = part.split('=').map((s) => s.trim());
    if (role === undefined || role === '') continue;
    if (role !== 'wrk' && role !== 'backend' && role !== 'front')
      throw new Error(`KVGATE_BENCH_GATEWAY_CPUS: unknown role '${role}' (wrk, backend, front)`);
    if (cpus === undefined || !/^[\d,-]+$/.test(cpus))
      throw new Error(`KVGATE_BENCH_GATEWAY_CPUS: '${part}' is not role=<cpu list>`);
    out[role] = cpus;
  }
  return out;
})();

const WRK_THREADS = Math.max(1, Number(process.env.KVGATE_BENCH_GATEWAY_WRK_THREADS ?? '1'));

/** The command line that runs `cmd` on its role's cores (taskset execs it: the pid is the command's). */
function pinned(role: Role, cmd: string, args: string[]): [string, string[]] {
  const cpus = PINS[role];
  return cpus === undefined ? [cmd, args] : ['taskset', ['-c', cpus, cmd, ...args]];
}

/** How the roles are pinned, for the notes. */
export function pinNote(): string {
  const set = Object.entries(PINS).map(([role, cpus]) => `${role} on CPUs ${cpus}`);
  return set.length === 0
    ? 'no process pinned (KVGATE_BENCH_GATEWAY_CPUS unset)'
    : `pinned with taskset: ${set.join(', ')}`;
}

/** A front under test: where wrk sends requests, and whose CPU is counted. */
export interface Front {
  name: string;
  url: string;
  pid: number | undefined;
}

export function onPath(cmd: string): Promise<boolean> {
  return new Promise((res) => {
    const p = spawn('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    p.on('exit', (code) => res(code === 0));
  });
}

/** Starts a process and resolves with the first match of `ready` on its stdout or stderr (kvgate serve announces itself on stderr). */
export function startProcess(
  role: Role,
  cmd: string,
  args: string[],
  ready: RegExp,
  children: ChildProcess[],
): Promise<{ m: RegExpMatchArray; pid: number }> {
  return new Promise((res, rej) => {
    const [bin, argv] = pinned(role, cmd, args);
    const child = spawn(bin, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    const seen = { out: '', err: '' };
    const timer = setTimeout(() => rej(new Error(`${cmd} did not start: ${seen.err.slice(-500)}`)), 30_000);
    const watch =
      (which: 'out' | 'err') =>
      (d: Buffer): void => {
        // Only the start is looked at: later output (warnings) is not kept.
        if (seen[which].length > 65_536) return;
        seen[which] += d.toString();
        const m = ready.exec(seen[which]);
        if (m !== null) {
          clearTimeout(timer);
          res({ m, pid: child.pid! });
        }
      };
    child.stdout!.on('data', watch('out'));
    child.stderr!.on('data', watch('err'));
    child.on('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`${cmd} exited with ${code}: ${seen.err.slice(-500)}`));
    });
  });
}

export function stopAll(children: ChildProcess[]): Promise<void> {
  return Promise.all(
    children.map(
      (c) =>
        new Promise<void>((res) => {
          if (c.exitCode !== null || c.signalCode !== null) return res();
          c.once('exit', () => res());
          c.kill('SIGTERM');
        }),
    ),
  ).then(() => undefined);
}

export interface WrkResult {
  rps: number;
  requests: number;
  p50Us: number;
  p99Us: number;
  non2xx: number;
}

function toUs(v: string): number {
  const m = /^([\d.]+)(us|ms|s|m)$/.exec(v.trim());
  if (m === null) return Number.NaN;
  const n = Number(m[1]);
  return m[2] === 'us' ? n : m[2] === 'ms' ? n * 1000 : m[2] === 's' ? n * 1e6 : n * 6e7;
}

export function runWrk(url: string, scriptPath: string, seconds: number, connections: number): Promise<WrkResult> {
  return new Promise((res, rej) => {
    const threads = Math.min(WRK_THREADS, connections);
    const args = [`-t${threads}`, `-c${connections}`, `-d${seconds}s`, '--latency', '-s', scriptPath, url];
    const [bin, argv] = pinned('wrk', 'wrk', args);
    const p = spawn(bin, argv, {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', () => {
      const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
      const p50 = /\s50%\s+(\S+)/.exec(out);
      const p99 = /\s99%\s+(\S+)/.exec(out);
      const non2xx = /Non-2xx or 3xx responses:\s+(\d+)/.exec(out);
      const requests = /(\d+) requests in/.exec(out);
      if (rps === null || p50 === null || p99 === null)
        return rej(new Error(`wrk against ${url}: output not understood:\n${out}`));
      res({
        rps: Number(rps[1]),
        requests: requests === null ? 0 : Number(requests[1]),
        p50Us: toUs(p50[1]!),
        p99Us: toUs(p99[1]!),
        non2xx: non2xx === null ? 0 : Number(non2xx[1]),
      });
    });
  });
}

/** CPU seconds (user + system) of a process and its descendants (nginx's worker, kvgate's threads are in its own stat). */
export function cpuSeconds(pid: number): number {
  let total = 0;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    total += (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
    for (const child of readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)) {
      if (child !== '') total += cpuSeconds(Number(child));
    }
  } catch {
    // gone, or not Linux: counted as nothing
  }
  return total;
}

function nginxConf(dir: string, listen: number, upstreamPort: number, workers: number): string {
  const path = join(dir, `nginx-${workers}.conf`);
  writeFileSync(
    path,
    `daemon off;
worker_processes ${workers};
pid ${dir}/nginx-${workers}.pid;
error_log ${dir}/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream engine { server 127.0.0.1:${upstreamPort}; keepalive 64; }
  server {
    listen 127.0.0.1:${listen};
    location / {
      proxy_pass http://engine;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
    }
  }
}
`,
  );
  return path;
}

/** A nats-server on loopback at an OS-chosen port (Debian's `nats-server`). */
export async function startNats(children: ChildProcess[]): Promise<string> {
  const { m } = await startProcess(
    'front',
    'nats-server',
    ['-a', '127.0.0.1', '-p', '-1'],
    /Listening for client connections on [^\s]+:(\d+)[\s\S]*Server is ready/,
    children,
  );
  return `nats://127.0.0.1:${m[1]}`;
}

/** nginx with `workers` worker processes (`worker_processes`), proxying to the backend with keep-alive upstream connections. */
export async function startNginx(
  dir: string,
  backendPort: number,
  workers: number,
  children: ChildProcess[],
): Promise<Front> {
  const port = await freePort();
  const [bin, argv] = pinned('front', 'nginx', ['-c', nginxConf(dir, port, backendPort, workers), '-p', dir]);
  const child = spawn(bin, argv, { stdio: 'ignore' });
  children.push(child);
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      if ((await fetch(`http://127.0.0.1:${port}/health`)).ok) break;
    } catch {
      // not yet listening
    }
    if (Date.now() > deadline) throw new Error('nginx did not start');
    await new Promise((r) => setTimeout(r, 50));
  }
  return { name: nginxName(workers), url: `http://127.0.0.1:${port}`, pid: child.pid };
}

/** The row name of nginx with `workers` workers. */
export function nginxName(workers: number): string {
  return `nginx (${workers} worker${workers === 1 ? '' : 's'}, keep-alive upstream)`;
}

/** A wrk Lua script that POSTs `body` to /v1/chat/completions, written under `dir`; its path. */
export function wrkScript(dir: string, name: string, body: unknown): string {
  const path = join(dir, `${name}.lua`);
  const json = JSON.stringify(body).replace(/\\/g, '\\\\').replace(/"/g, '\\"');
  writeFileSync(
    path,
    `wrk.method = "POST"\nwrk.path = "/v1/chat/completions"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = "${json}"\n`,
  );
  return path;
}

/**
 * `kvgate serve`'s arguments as the gateway bench runs it against one worker (`url=...,kv_events=...` for KV
 * events): the bundled demo tokenizer, warnings only in the log (no line per request), a concurrency cap above any
 * wrk run's connections.
 */
export function kvgateServeArgs(model: string, worker: string): string[] {
  return [
    'serve',
    '--port',
    '0',
    '--model',
    model,
    '--worker',
    worker,
    '--tokenizer',
    'demo',
    '--log-level',
    'warn',
    '--max-concurrent-requests',
    '4096',
  ];
}
