/**
 * Gateway throughput and added latency, side by side with the same load
 * generator (wrk) against:
 *   1. the mocker alone (the floor: one simulated engine, very fast steps);
 *   2. nginx (Debian's, one worker process, upstream keep-alive, no buffering)
 *      as a plain reverse proxy in front of the same mocker;
 *   3. `kvgate serve` (KV routing with KV events, the demo tokenizer) in
 *      front of the same mocker, with one preprocessing thread and with
 *      preprocessing on the main thread.
 * Each runs in its own process; requests are short chat completions, non-
 * streaming (max_tokens 1, at 1 and 32 connections) and streaming
 * (max_tokens 16, 32 connections). Added latency is the median of the
 * proxied run minus the median of the direct run.
 * Needs `wrk` and `nginx` on PATH (apt-get install wrk nginx); without them
 * the rows are skipped with a note. Run: npm run bench -- gateway
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, type BenchRow, type BenchSection } from '../util.js';

export const title = 'Gateway overhead: kvgate serve vs nginx vs the mocker alone (wrk, short chat completions)';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const KVGATE = join(ROOT, 'bin', 'kvgate.js');
const MODEL = 'bench-model';
const DURATION_S = 8;
const CONNECTIONS = 32;

function onPath(cmd: string): Promise<boolean> {
  return new Promise((res) => {
    const p = spawn('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    p.on('exit', (code) => res(code === 0));
  });
}

/** Starts a process and resolves with the first stdout match of `ready`. */
function startProcess(cmd: string, args: string[], ready: RegExp, children: ChildProcess[]): Promise<RegExpMatchArray> {
  return new Promise((res, rej) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.push(child);
    let out = '';
    let err = '';
    const timer = setTimeout(() => rej(new Error(`${cmd} did not start: ${err.slice(-500)}`)), 30_000);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = ready.exec(out);
      if (m !== null) {
        clearTimeout(timer);
        res(m);
      }
    });
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`${cmd} exited with ${code}: ${err.slice(-500)}`));
    });
  });
}

function stopAll(children: ChildProcess[]): Promise<void> {
  return Promise.all(children.map((c) => new Promise<void>((res) => {
    if (c.exitCode !== null || c.signalCode !== null) return res();
    c.once('exit', () => res());
    c.kill('SIGTERM');
  }))).then(() => undefined);
}

interface WrkResult {
  rps: number;
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

function runWrk(url: string, scriptPath: string, seconds: number, connections: number): Promise<WrkResult> {
  return new Promise((res, rej) => {
    const p = spawn('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', scriptPath, url], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (d: Buffer) => (out += d.toString()));
    p.stderr.on('data', (d: Buffer) => (out += d.toString()));
    p.on('exit', () => {
      const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
      const p50 = /\s50%\s+(\S+)/.exec(out);
      const p99 = /\s99%\s+(\S+)/.exec(out);
      const non2xx = /Non-2xx or 3xx responses:\s+(\d+)/.exec(out);
      if (rps === null || p50 === null || p99 === null) return rej(new Error(`wrk against ${url}: output not understood:\n${out}`));
      res({ rps: Number(rps[1]), p50Us: toUs(p50[1]!), p99Us: toUs(p99[1]!), non2xx: non2xx === null ? 0 : Number(non2xx[1]) });
    });
  });
}

function wrkScript(dir: string, name: string, body: unknown): string {
  const path = join(dir, `${name}.lua`);
  const json = JSON.stringify(body).replace(/\\/g, '\\\\').replace(/"/g, '\\"');
  writeFileSync(path, `wrk.method = "POST"\nwrk.path = "/v1/chat/completions"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = "${json}"\n`);
  return path;
}

function nginxConf(dir: string, listen: number, upstreamPort: number): string {
  const path = join(dir, 'nginx.conf');
  writeFileSync(path, `daemon off;
worker_processes 1;
pid ${dir}/nginx.pid;
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
`);
  return path;
}

export async function run(): Promise<BenchSection> {
  const notes: string[] = [];
  const rows: BenchRow[] = [];
  if (!(await onPath('wrk'))) {
    return { title, rows, notes: ['skipped: wrk is not installed (apt-get install wrk nginx).'] };
  }
  const haveNginx = await onPath('nginx');
  if (!haveNginx) notes.push('nginx is not installed: its rows are skipped.');
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-gw-bench-'));
  const children: ChildProcess[] = [];
  try {
    const mockerLine = await startProcess('node', [KVGATE, 'mocker', '--port', '0', '--kv-events-port', '0', '--model', MODEL, '--tokenizer', 'demo',
      '--speedup', '1000', '--max-num-seqs', '1024'], /"url":"(http:\/\/[^"]+)".*"kv_events":\["([^"]+)"\]/, children);
    const mockerUrl = mockerLine[1]!;
    const mockerPort = Number(new URL(mockerUrl).port);
    const gateway = async (threads: number): Promise<string> => (await startProcess('node', [KVGATE, 'serve', '--port', '0', '--model', MODEL,
      '--worker', `url=${mockerUrl},kv_events=${mockerLine[2]!}`, '--tokenizer', 'demo', '--preprocess-threads', String(threads),
      '--log-level', 'warn', '--max-concurrent-requests', '4096'], /at (http:\/\/127\.0\.0\.1:\d+)/, children))[1]!;
    const targets: [string, string][] = [['mocker alone', mockerUrl]];
    if (haveNginx) {
      const port = await freePort();
      const ready = spawn('nginx', ['-c', nginxConf(dir, port, mockerPort), '-p', dir], { stdio: 'ignore' });
      children.push(ready);
      // Ready when it answers.
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
      targets.push(['nginx -> mocker', `http://127.0.0.1:${port}`]);
    }
    targets.push(['kvgate (1 preprocessing thread) -> mocker', await gateway(1)]);
    targets.push(['kvgate (preprocessing on the main thread) -> mocker', await gateway(0)]);

    const messages = [{ role: 'system', content: 'You are a concise assistant.' }, { role: 'user', content: 'Name three prime numbers.' }];
    const short = wrkScript(dir, 'short', { model: MODEL, messages, max_tokens: 1 });
    const stream = wrkScript(dir, 'stream', { model: MODEL, messages, max_tokens: 16, stream: true });
    const kinds: [string, string, number][] = [
      ['1 connection, non-streaming, max_tokens 1', short, 1],
      [`${CONNECTIONS} connections, non-streaming, max_tokens 1`, short, CONNECTIONS],
      [`${CONNECTIONS} connections, streaming, max_tokens 16`, stream, CONNECTIONS],
    ];
    for (const [kind, script, connections] of kinds) {
      const base: Record<string, WrkResult> = {};
      for (const [name, url] of targets) {
        await runWrk(url, script, 2, connections); // warm-up (JIT, connection pools, caches)
        const r = await runWrk(url, script, DURATION_S, connections);
        base[name] = r;
        const direct = base['mocker alone']!;
        const added = name === 'mocker alone' ? '' : `, +${((r.p50Us - direct.p50Us) / 1000).toFixed(2)} ms median over the mocker alone`;
        rows.push({
          name: `${kind}: ${name}`, p50Us: r.p50Us, p99Us: r.p99Us, opsPerSec: r.rps,
          note: `${(r.rps / direct.rps * 100).toFixed(0)}% of the mocker's req/s${added}${r.non2xx > 0 ? `, ${r.non2xx} non-2xx` : ''}`,
        });
      }
    }
    notes.push(`wrk -t1 -d${DURATION_S}s per row, after a 2 s warm-up; the mocker runs with --speedup 1000 so engine time is small and proxy cost shows.`,
      'With 1 connection the added median is the per-request cost of the proxy; with 32 it also includes queueing behind the proxy\'s CPU.',
      'All processes share this machine\'s cores with wrk, so the proxies also compete with the load generator and the engine; compare rows, not absolute numbers.',
      'kvgate does per request what nginx does not: JSON parse and schema check, chat template + tokenization (in a worker thread), block hashing, the KV-aware routing decision and bookkeeping.');
    return { title, rows, notes };
  } finally {
    await stopAll(children);
    rmSync(dir, { recursive: true, force: true });
  }
}
