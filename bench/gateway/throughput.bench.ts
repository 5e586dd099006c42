/**
 * Gateway cost per request, everything in one run with the same load
 * generator (wrk, one thread): a trivial OpenAI-shaped backend (its own
 * process, answers at once, no tokenization: trivial-backend.ts) reached
 *   1. directly (the floor);
 *   2. through nginx (Debian's, one worker, upstream keep-alive, no buffering);
 *   3. through a minimal node:http + undici proxy (floor-proxy.ts: no kvgate
 *      logic at all), the floor of what Node itself costs on this machine;
 *   4. through `kvgate serve` with the bundled Qwen3 tokenizer and chat
 *      template, in kv mode with KV events, in kv mode without them
 *      (approximate), and in round-robin mode.
 * With KVGATE_BENCH_BEFORE_DIST=<dist of another build> (e.g. the commit
 * before a change, built in a second worktree) the kvgate rows run against
 * that build too, alternating with this one, so before and after share a run.
 *
 * Per front: req/s, median and p99 latency (and their excess over the backend
 * alone) and CPU per request (the front's process CPU time, children
 * included, from /proc/<pid>/stat, over the requests wrk completed) for the
 * tiny chat `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}` at
 * 32 connections and at 1 connection; streamed chunks per second for a
 * 64-chunk stream at 32 connections.
 * Needs `wrk` and `nginx` on PATH (apt-get install wrk nginx); without them
 * the rows are skipped with a note. KVGATE_BENCH_GATEWAY_SECONDS sets the
 * measured seconds per row (default 6). KVGATE_BENCH_GATEWAY_PROCESSES=N adds
 * a row of this build in kv mode with KV events run as `kvgate serve
 * --processes N`, and notes its req/s against the one-process row.
 * KVGATE_BENCH_GATEWAY_NATS=1 starts a `nats-server` on loopback and adds a
 * row of this build in kv mode with KV events syncing with one peer replica
 * over it (`--replica-sync-nats`; the peer takes no traffic but receives and
 * applies every booking), and notes the CPU per request sync adds.
 * KVGATE_BENCH_GATEWAY_ROUNDS=N measures every front N times, the fronts
 * interleaved in each round, and reports per front the median of its rounds
 * (req/s, latency and CPU each): on a shared machine one round's drift then
 * moves one sample, not the figure.
 * Run: npm run bench -- gateway
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort, type BenchRow, type BenchSection } from '../util.js';

export const title =
  'Gateway cost per request: kvgate serve vs nginx vs a trivial backend (wrk, tiny chat and 64-chunk stream)';

const HERE = dirname(fileURLToPath(import.meta.url));
const MODEL = 'bench-model';
const DURATION_S = Number(process.env.KVGATE_BENCH_GATEWAY_SECONDS ?? '6');
const PROCESSES = Number(process.env.KVGATE_BENCH_GATEWAY_PROCESSES ?? '1');
const ROUNDS = Math.max(1, Number(process.env.KVGATE_BENCH_GATEWAY_ROUNDS ?? '1'));
const WITH_NATS = process.env.KVGATE_BENCH_GATEWAY_NATS === '1';
const CONNECTIONS = 32;
const STREAM_CHUNKS = 64;
const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

function onPath(cmd: string): Promise<boolean> {
  return new Promise((res) => {
    const p = spawn('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    p.on('exit', (code) => res(code === 0));
  });
}

/** Starts a process and resolves with the first match of `ready` on its stdout or stderr (kvgate serve announces itself on stderr). */
function startProcess(
  cmd: string,
  args: string[],
  ready: RegExp,
  children: ChildProcess[],
): Promise<{ m: RegExpMatchArray; pid: number }> {
  return new Promise((res, rej) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
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

function stopAll(children: ChildProcess[]): Promise<void> {
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

interface WrkResult {
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

function runWrk(url: string, scriptPath: string, seconds: number, connections: number): Promise<WrkResult> {
  return new Promise((res, rej) => {
    const p = spawn('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', scriptPath, url], {
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
function cpuSeconds(pid: number): number {
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

function wrkScript(dir: string, name: string, body: unknown): string {
  const path = join(dir, `${name}.lua`);
  const json = JSON.stringify(body).replace(/\\/g, '\\\\').replace(/"/g, '\\"');
  writeFileSync(
    path,
    `wrk.method = "POST"\nwrk.path = "/v1/chat/completions"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = "${json}"\n`,
  );
  return path;
}

function nginxConf(dir: string, listen: number, upstreamPort: number): string {
  const path = join(dir, 'nginx.conf');
  writeFileSync(
    path,
    `daemon off;
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
`,
  );
  return path;
}

/** One front under test: where wrk sends requests, and whose CPU is counted. */
interface Front {
  name: string;
  url: string;
  pid: number | undefined;
}

type KvgateMode = 'kv mode, KV events' | 'kv mode, no KV events' | 'round-robin';
const MODES: KvgateMode[] = ['kv mode, KV events', 'kv mode, no KV events', 'round-robin'];

/** How a kvgate front is run beyond its mode: several processes, or syncing with peers over NATS. */
interface KvgateExtra {
  processes?: number;
  nats?: { url: string; routerId: string };
}

async function startKvgate(
  bin: string,
  label: string,
  mode: KvgateMode,
  backend: { url: string; kvEvents: string },
  children: ChildProcess[],
  extra: KvgateExtra = {},
): Promise<Front> {
  const worker = mode === 'kv mode, KV events' ? `url=${backend.url},kv_events=${backend.kvEvents}` : backend.url;
  const modeArgs =
    mode === 'round-robin'
      ? ['--router-mode', 'round-robin']
      : mode === 'kv mode, no KV events'
        ? ['--no-router-kv-events']
        : [];
  const processes = extra.processes ?? 1;
  const extraArgs = [
    ...(processes > 1 ? ['--processes', String(processes)] : []),
    ...(extra.nats === undefined ? [] : ['--replica-sync-nats', extra.nats.url, '--router-id', extra.nats.routerId]),
  ];
  const { m, pid } = await startProcess(
    'node',
    [
      bin,
      'serve',
      '--port',
      '0',
      '--model',
      MODEL,
      '--worker',
      worker,
      '--tokenizer',
      'demo',
      ...modeArgs,
      '--log-level',
      'warn',
      '--max-concurrent-requests',
      '4096',
      ...extraArgs,
    ],
    /at (http:\/\/127\.0\.0\.1:\d+)/,
    children,
  );
  const suffix =
    (processes > 1 ? ` x${processes} processes` : '') + (extra.nats === undefined ? '' : ' + NATS sync with 1 peer');
  return { name: `kvgate ${label}${suffix}, ${mode}`, url: m[1]!, pid };
}

/** A nats-server on loopback at an OS-chosen port (Debian's `nats-server`). */
async function startNats(children: ChildProcess[]): Promise<string> {
  const { m } = await startProcess(
    'nats-server',
    ['-a', '127.0.0.1', '-p', '-1'],
    /Listening for client connections on [^\s]+:(\d+)[\s\S]*Server is ready/,
    children,
  );
  return `nats://127.0.0.1:${m[1]}`;
}

async function startNginx(dir: string, backendPort: number, children: ChildProcess[]): Promise<Front> {
  const port = await freePort();
  const child = spawn('nginx', ['-c', nginxConf(dir, port, backendPort), '-p', dir], { stdio: 'ignore' });
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
  return { name: 'nginx (1 worker, keep-alive upstream)', url: `http://127.0.0.1:${port}`, pid: child.pid };
}

interface Measured extends WrkResult {
  /** CPU milliseconds of the front per completed request. */
  cpuMsPerRequest: number;
}

async function measure(front: Front, script: string, connections: number, warm: boolean): Promise<Measured> {
  if (warm) await runWrk(front.url, script, 2, connections); // warm-up (JIT, connection pools, caches)
  const cpu0 = front.pid === undefined ? 0 : cpuSeconds(front.pid);
  const r = await runWrk(front.url, script, DURATION_S, connections);
  const cpu1 = front.pid === undefined ? 0 : cpuSeconds(front.pid);
  return { ...r, cpuMsPerRequest: r.requests > 0 ? ((cpu1 - cpu0) * 1000) / r.requests : Number.NaN };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Every front measured ROUNDS times, interleaved (warmed up in the first round); per front the median of each figure. */
async function measureAll(
  fronts: readonly Front[],
  script: string,
  connections: number,
): Promise<Record<string, Measured>> {
  const rounds: Record<string, Measured[]> = {};
  for (let r = 0; r < ROUNDS; r++)
    for (const f of fronts) (rounds[f.name] ??= []).push(await measure(f, script, connections, r === 0));
  const out: Record<string, Measured> = {};
  for (const [name, ms] of Object.entries(rounds)) {
    const pick = (k: keyof Measured): number => median(ms.map((m) => m[k]));
    out[name] = {
      rps: pick('rps'),
      p50Us: pick('p50Us'),
      p99Us: pick('p99Us'),
      requests: pick('requests'),
      non2xx: pick('non2xx'),
      cpuMsPerRequest: pick('cpuMsPerRequest'),
    };
  }
  return out;
}

const ms = (us: number): string => (us / 1000).toFixed(2);

/** The targets for kvgate's kv mode (with the Qwen3 tokenizer), judged on one build's rows. */
function targetNotes(
  label: string,
  tiny: Record<string, Measured>,
  stream: Record<string, Measured>,
  nginx: string,
): string[] {
  const kv = `kvgate ${label}, kv mode, KV events`;
  const t = tiny[kv];
  const s = stream[kv];
  const n = tiny[nginx];
  const ns = stream[nginx];
  if (t === undefined || s === undefined || n === undefined || ns === undefined) return [];
  const ok = (b: boolean): string => (b ? 'met' : 'missed');
  const rpsRatio = t.rps / n.rps;
  const chunkRatio = s.rps / ns.rps;
  return [
    `${label}, kv mode with KV events: ${rpsRatio.toFixed(2)}x nginx's req/s on the tiny chat (target >= 0.4x: ${ok(rpsRatio >= 0.4)}); ` +
      `${t.cpuMsPerRequest.toFixed(3)} ms CPU per request (target <= 0.12 ms: ${ok(t.cpuMsPerRequest <= 0.12)}); ` +
      `${chunkRatio.toFixed(2)}x nginx's streamed chunks/s (target >= 0.5x: ${ok(chunkRatio >= 0.5)}).`,
  ];
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
    const { m: line, pid: backendPid } = await startProcess(
      'node',
      [join(HERE, 'trivial-backend.js'), MODEL],
      /^(\{.*\})$/m,
      children,
    );
    const info = JSON.parse(line[1]!) as { url: string; kv_events: string };
    const backend = { url: info.url, kvEvents: info.kv_events };
    const direct: Front = { name: 'backend direct', url: backend.url, pid: backendPid };
    const fronts: Front[] = [direct];
    const nginxName = 'nginx (1 worker, keep-alive upstream)';
    if (haveNginx) fronts.push(await startNginx(dir, Number(new URL(backend.url).port), children));
    const { m: floorLine, pid: floorPid } = await startProcess(
      'node',
      [join(HERE, 'floor-proxy.js'), backend.url],
      /^(\{.*\})$/m,
      children,
    );
    fronts.push({
      name: 'floor: node:http + undici proxy, no kvgate logic',
      url: (JSON.parse(floorLine[1]!) as { url: string }).url,
      pid: floorPid,
    });
    const builds: [string, string][] = [];
    const beforeDist = process.env.KVGATE_BENCH_BEFORE_DIST;
    if (beforeDist !== undefined && beforeDist !== '')
      builds.push(['before', join(resolve(beforeDist), '..', 'bin', 'kvgate.js')]);
    else notes.push('No KVGATE_BENCH_BEFORE_DIST given: only this build of kvgate is measured.');
    builds.push(['after', join(HERE, '..', '..', '..', 'bin', 'kvgate.js')]);
    // Before and after alternate, mode by mode, so drift on a shared machine hits both alike.
    for (const mode of MODES)
      for (const [label, bin] of builds) fronts.push(await startKvgate(bin, label, mode, backend, children));
    const after = builds.at(-1)![1];
    const several =
      PROCESSES > 1
        ? await startKvgate(after, 'after', MODES[0]!, backend, children, { processes: PROCESSES })
        : undefined;
    if (several !== undefined) fronts.push(several);
    let synced: Front | undefined;
    if (WITH_NATS && !(await onPath('nats-server')))
      notes.push('nats-server is not installed: the NATS sync row is skipped.');
    else if (WITH_NATS) {
      const url = await startNats(children);
      synced = await startKvgate(after, 'after', MODES[0]!, backend, children, { nats: { url, routerId: 'bench-a' } });
      await startKvgate(after, 'peer', MODES[0]!, backend, children, { nats: { url, routerId: 'bench-b' } });
      fronts.push(synced);
    }

    const tinyScript = wrkScript(dir, 'tiny', {
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 1,
    });
    const streamScript = wrkScript(dir, 'stream', {
      model: MODEL,
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: STREAM_CHUNKS,
      stream: true,
    });
    const tiny = await measureAll(fronts, tinyScript, CONNECTIONS);
    const one = await measureAll(fronts, tinyScript, 1);
    const stream = await measureAll(fronts, streamScript, CONNECTIONS);
    const base = tiny[direct.name]!;
    const ref = tiny[nginxName] ?? base;
    const non2xx = (r: Measured): string => (r.non2xx > 0 ? `, ${r.non2xx} non-2xx` : '');
    for (const f of fronts) {
      const r = tiny[f.name]!;
      rows.push({
        name: `tiny chat, ${CONNECTIONS} connections: ${f.name}`,
        p50Us: r.p50Us,
        p99Us: r.p99Us,
        opsPerSec: r.rps,
        note: `${(r.rps / ref.rps).toFixed(2)}x nginx req/s; CPU ${r.cpuMsPerRequest.toFixed(3)} ms/request${non2xx(r)}`,
      });
    }
    const base1 = one[direct.name]!;
    for (const f of fronts) {
      const r = one[f.name]!;
      const added =
        f === direct
          ? ''
          : `+${ms(r.p50Us - base1.p50Us)} ms median, +${ms(r.p99Us - base1.p99Us)} ms p99 over the backend alone; `;
      rows.push({
        name: `tiny chat, 1 connection: ${f.name}`,
        p50Us: r.p50Us,
        p99Us: r.p99Us,
        opsPerSec: r.rps,
        note: `${added}CPU ${r.cpuMsPerRequest.toFixed(3)} ms/request${non2xx(r)}`,
      });
    }
    const streamRef = stream[nginxName] ?? stream[direct.name]!;
    for (const f of fronts) {
      const r = stream[f.name]!;
      rows.push({
        name: `${STREAM_CHUNKS}-chunk stream, ${CONNECTIONS} connections: ${f.name}`,
        p50Us: r.p50Us,
        p99Us: r.p99Us,
        opsPerSec: r.rps * STREAM_CHUNKS,
        note: `chunks/s; ${(r.rps / streamRef.rps).toFixed(2)}x nginx; CPU ${((r.cpuMsPerRequest * 1000) / STREAM_CHUNKS).toFixed(2)} µs/chunk${non2xx(r)}`,
      });
    }
    for (const [label] of builds) notes.push(...targetNotes(label, tiny, stream, nginxName));
    if (several !== undefined) {
      const one = tiny[`kvgate after, ${MODES[0]}`]!;
      notes.push(
        `--processes ${PROCESSES} (CPU summed over its processes; no NATS, sync over the cluster IPC channel): ${(tiny[several.name]!.rps / one.rps).toFixed(2)}x ` +
          `the req/s of one process on the tiny chat at ${CONNECTIONS} connections, ${(stream[several.name]!.rps / stream[`kvgate after, ${MODES[0]}`]!.rps).toFixed(2)}x its streamed chunks/s.`,
      );
    }
    if (synced !== undefined) {
      const off = tiny[`kvgate after, ${MODES[0]}`]!;
      const on = tiny[synced.name]!;
      notes.push(
        `NATS sync with one peer (nats-server on loopback): ${(1000 * (on.cpuMsPerRequest - off.cpuMsPerRequest)).toFixed(1)} µs more CPU per request ` +
          `(${(on.cpuMsPerRequest / off.cpuMsPerRequest).toFixed(2)}x) and ${(on.rps / off.rps).toFixed(2)}x the req/s of sync off on the tiny chat at ${CONNECTIONS} connections; ` +
          'the peer replica and nats-server run on the same two cores, and their CPU is not in the row.',
      );
    }
    if (ROUNDS > 1)
      notes.push(`${ROUNDS} rounds, the fronts interleaved in each; every figure is the median of its front's rounds.`);
    notes.push(
      `wrk -t1 -d${DURATION_S}s per row after a 2 s warm-up; the backend answers at once (${base.rps.toFixed(0)} req/s alone at ${CONNECTIONS} connections), so the front's cost shows.`,
      "CPU per request: the front's process CPU time (user + system, children and threads included, /proc/<pid>/stat) during the measured run over the requests wrk completed.",
      'kvgate runs with --tokenizer demo (the bundled Qwen3 tokenizer and chat template), default preprocessing, --log-level warn (no access log line per request), --max-concurrent-requests 4096.',
      "All processes share this machine's cores with wrk and the backend: compare rows of one run, not absolute numbers.",
    );
    return { title, rows, notes };
  } finally {
    await stopAll(children);
    rmSync(dir, { recursive: true, force: true });
  }
}
