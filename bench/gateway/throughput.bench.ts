/**
 * Gateway cost per request, everything in one run with the same load
 * generator (wrk): a trivial OpenAI-shaped backend (its own process, answers
 * at once, no tokenization: trivial-backend.ts) reached
 *   1. directly;
 *   2. through nginx (Debian's, one worker, upstream keep-alive, no buffering);
 *   3. through a minimal node:http + undici proxy (floor-proxy.ts: no kvgate
 *      logic at all), the floor of what Node itself costs: kvgate's targets
 *      are ratios of this row (0.8x its req/s on the tiny chat, 0.7x its
 *      streams/s on the 64-chunk stream);
 *   4. through `kvgate serve` with the bundled Qwen3 tokenizer and chat
 *      template, in kv mode with KV events, in kv mode without them
 *      (approximate), and in round-robin mode (KVGATE_BENCH_GATEWAY_MODES=kv,
 *      kv-no-events, round-robin picks some; the first is the one judged).
 * With KVGATE_BENCH_BEFORE_DIST=<dist of another build> (e.g. the commit
 * before a change, built in a second worktree) the kvgate rows run against
 * that build too, alternating with this one, so before and after share a run.
 *
 * Per front: req/s, median and p99 latency (and their excess over the backend
 * alone) and CPU per request (the front's process CPU time, children
 * included, from /proc/<pid>/stat, over the requests wrk completed) for the
 * tiny chat `{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}` at
 * KVGATE_BENCH_GATEWAY_CONNECTIONS connections (default 32) and at 1
 * connection; streamed chunks per second for a 64-chunk stream.
 * Needs `wrk` and `nginx` on PATH (apt-get install wrk nginx); without them
 * the rows are skipped with a note. KVGATE_BENCH_GATEWAY_SECONDS sets the
 * measured seconds per row (default 6). KVGATE_BENCH_GATEWAY_PROCESSES=2,4
 * adds, for each N, a row of this build in the first mode run as `kvgate
 * serve --processes N` and a row of nginx with N workers, and notes each
 * against one process and against that nginx.
 * KVGATE_BENCH_GATEWAY_CPUS pins wrk, the backend and the fronts to separate
 * cores (processes.ts), KVGATE_BENCH_GATEWAY_WRK_THREADS sets wrk's threads.
 * KVGATE_BENCH_GATEWAY_NATS=1 starts a `nats-server` on loopback and adds a
 * row of this build in kv mode with KV events syncing with one peer replica
 * over it (`--replica-sync-nats`; the peer takes no traffic but receives and
 * applies every booking), and notes the CPU per request sync adds.
 * KVGATE_BENCH_GATEWAY_ROUNDS=N measures every front N times, the fronts
 * interleaved in each round, and reports per front the median of its rounds
 * (req/s, latency and CPU each): on a shared machine one round's drift then
 * moves one sample, not the figure.
 * Run: npm run bench -- gateway (or node --expose-gc dist/bench/run.js gateway)
 */
import { type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BenchRow, type BenchSection } from '../util.js';
import {
  cpuSeconds,
  kvgateServeArgs,
  nginxName,
  onPath,
  pinNote,
  runWrk,
  startNats,
  startNginx,
  startProcess,
  stopAll,
  wrkScript,
  type Front,
  type WrkResult,
} from './processes.js';

export const title =
  'Gateway cost per request: kvgate serve vs the Node floor vs nginx vs a trivial backend (wrk, tiny chat and 64-chunk stream)';

const HERE = dirname(fileURLToPath(import.meta.url));
const MODEL = 'bench-model';
const DURATION_S = Number(process.env.KVGATE_BENCH_GATEWAY_SECONDS ?? '6');
/** `--processes` counts to measure beside one process, e.g. `2,4` (or `1,2,4`): each N > 1 adds kvgate x N and nginx with N workers. */
const PROCESSES = (process.env.KVGATE_BENCH_GATEWAY_PROCESSES ?? '1')
  .split(',')
  .map((s) => Number(s.trim()))
  .filter((n) => Number.isInteger(n) && n > 1);
const ROUNDS = Math.max(1, Number(process.env.KVGATE_BENCH_GATEWAY_ROUNDS ?? '1'));
const WITH_NATS = process.env.KVGATE_BENCH_GATEWAY_NATS === '1';
const CONNECTIONS = Math.max(1, Number(process.env.KVGATE_BENCH_GATEWAY_CONNECTIONS ?? '32'));
const STREAM_CHUNKS = 64;
/** The floor ratios the small-request work aims at: kvgate's req/s over the floor proxy's. */
const FLOOR_TARGET = { tiny: 0.8, stream: 0.7 };

type KvgateMode = 'kv mode, KV events' | 'kv mode, no KV events' | 'round-robin';
const ALL_MODES: Record<string, KvgateMode> = {
  kv: 'kv mode, KV events',
  'kv-no-events': 'kv mode, no KV events',
  'round-robin': 'round-robin',
};
/** KVGATE_BENCH_GATEWAY_MODES=kv[,kv-no-events,round-robin] picks the kvgate modes (default all three; the first is the one compared). */
const MODES: KvgateMode[] = (process.env.KVGATE_BENCH_GATEWAY_MODES ?? 'kv,kv-no-events,round-robin')
  .split(',')
  .map((m) => {
    const mode = ALL_MODES[m.trim()];
    if (mode === undefined)
      throw new Error(`KVGATE_BENCH_GATEWAY_MODES: unknown mode '${m}' (${Object.keys(ALL_MODES).join(', ')})`);
    return mode;
  });

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
    'front',
    'node',
    [bin, ...kvgateServeArgs(MODEL, worker), ...modeArgs, ...extraArgs],
    /at (http:\/\/127\.0\.0\.1:\d+)/,
    children,
  );
  const suffix =
    (processes > 1 ? ` x${processes} processes` : '') + (extra.nats === undefined ? '' : ' + NATS sync with 1 peer');
  return { name: `kvgate ${label}${suffix}, ${mode}`, url: m[1]!, pid };
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

/**
 * Every front measured ROUNDS times, interleaved (warmed up in the first round); per front the median of each figure.
 * Odd rounds run the fronts in reverse order, so no front is always measured right after the same other one (a
 * kvgate after the other build's kvgate, whose connections and timers are still winding down).
 */
async function measureAll(
  fronts: readonly Front[],
  script: string,
  connections: number,
): Promise<Record<string, Measured>> {
  const rounds: Record<string, Measured[]> = {};
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? fronts : [...fronts].reverse();
    for (const f of order) (rounds[f.name] ??= []).push(await measure(f, script, connections, r === 0));
  }
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

/**
 * The small-request targets, judged on one build's rows of the first mode: kvgate's req/s (streams/s) over the
 * floor proxy's, and the same ratio of CPU per request (floor over kvgate), which holds on a shared machine where
 * the req/s of a row also depends on what wrk and the backend got of the cores.
 */
function targetNotes(label: string, tiny: Record<string, Measured>, stream: Record<string, Measured>): string[] {
  const kv = `kvgate ${label}, ${MODES[0]}`;
  const t = tiny[kv];
  const s = stream[kv];
  const ft = tiny[FLOOR_NAME];
  const fs = stream[FLOOR_NAME];
  if (t === undefined || s === undefined || ft === undefined || fs === undefined) return [];
  const ok = (ratio: number, target: number): string =>
    ratio >= target ? 'met' : `missed: ${(ratio / target).toFixed(2)} of it`;
  const tinyRatio = t.rps / ft.rps;
  const streamRatio = s.rps / fs.rps;
  return [
    `${label}, ${MODES[0]}: ${tinyRatio.toFixed(2)}x the floor's req/s on the tiny chat (target >= ${FLOOR_TARGET.tiny}x: ` +
      `${ok(tinyRatio, FLOOR_TARGET.tiny)}), ${(ft.cpuMsPerRequest / t.cpuMsPerRequest).toFixed(2)}x by CPU per request ` +
      `(${(t.cpuMsPerRequest * 1000).toFixed(1)} µs vs ${(ft.cpuMsPerRequest * 1000).toFixed(1)} µs); ` +
      `${streamRatio.toFixed(2)}x the floor's streams/s on the ${STREAM_CHUNKS}-chunk stream (target >= ${FLOOR_TARGET.stream}x: ` +
      `${ok(streamRatio, FLOOR_TARGET.stream)}), ${(fs.cpuMsPerRequest / s.cpuMsPerRequest).toFixed(2)}x by CPU per stream.`,
  ];
}

const FLOOR_NAME = 'floor: node:http + undici proxy, no kvgate logic';

/** The fronts of one run: the backend alone, nginx (1 worker, and N for each N of PROCESSES), the floor, kvgate. */
async function startFronts(
  dir: string,
  children: ChildProcess[],
  notes: string[],
): Promise<{ fronts: Front[]; builds: [string, string][]; several: Front[]; synced: Front | undefined }> {
  const { m: line, pid: backendPid } = await startProcess(
    'backend',
    'node',
    [join(HERE, 'trivial-backend.js'), MODEL],
    /^(\{.*\})$/m,
    children,
  );
  const info = JSON.parse(line[1]!) as { url: string; kv_events: string };
  const backend = { url: info.url, kvEvents: info.kv_events };
  const fronts: Front[] = [{ name: 'backend direct', url: backend.url, pid: backendPid }];
  const backendPort = Number(new URL(backend.url).port);
  if (await onPath('nginx')) fronts.push(await startNginx(dir, backendPort, 1, children));
  else notes.push('nginx is not installed: its rows are skipped.');
  const { m: floorLine, pid: floorPid } = await startProcess(
    'front',
    'node',
    [join(HERE, 'floor-proxy.js'), backend.url],
    /^(\{.*\})$/m,
    children,
  );
  fronts.push({ name: FLOOR_NAME, url: (JSON.parse(floorLine[1]!) as { url: string }).url, pid: floorPid });
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
  const several: Front[] = [];
  for (const n of PROCESSES) {
    if (await onPath('nginx')) fronts.push(await startNginx(dir, backendPort, n, children));
    several.push(await startKvgate(after, 'after', MODES[0]!, backend, children, { processes: n }));
    fronts.push(several.at(-1)!);
  }
  let synced: Front | undefined;
  if (WITH_NATS && !(await onPath('nats-server')))
    notes.push('nats-server is not installed: the NATS sync row is skipped.');
  else if (WITH_NATS) {
    const url = await startNats(children);
    synced = await startKvgate(after, 'after', MODES[0]!, backend, children, { nats: { url, routerId: 'bench-a' } });
    await startKvgate(after, 'peer', MODES[0]!, backend, children, { nats: { url, routerId: 'bench-b' } });
    fronts.push(synced);
  }
  return { fronts, builds, several, synced };
}

const non2xx = (r: Measured): string => (r.non2xx > 0 ? `, ${r.non2xx} non-2xx` : '');

/** The rows of one run: tiny chat at CONNECTIONS and at 1 connection, the stream at CONNECTIONS. */
function rowsOf(
  fronts: readonly Front[],
  tiny: Record<string, Measured>,
  one: Record<string, Measured>,
  stream: Record<string, Measured>,
): BenchRow[] {
  const rows: BenchRow[] = [];
  const direct = fronts[0]!.name;
  const ref = tiny[nginxName(1)] ?? tiny[direct]!;
  const floor = tiny[FLOOR_NAME]!;
  for (const f of fronts) {
    const r = tiny[f.name]!;
    rows.push({
      name: `tiny chat, ${CONNECTIONS} connections: ${f.name}`,
      p50Us: r.p50Us,
      p99Us: r.p99Us,
      opsPerSec: r.rps,
      note:
        `${(r.rps / floor.rps).toFixed(2)}x floor, ${(r.rps / ref.rps).toFixed(2)}x nginx req/s; ` +
        `CPU ${r.cpuMsPerRequest.toFixed(3)} ms/request${non2xx(r)}`,
    });
  }
  const base1 = one[direct]!;
  for (const f of fronts) {
    const r = one[f.name]!;
    const added =
      f.name === direct
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
  const streamRef = stream[nginxName(1)] ?? stream[direct]!;
  const streamFloor = stream[FLOOR_NAME]!;
  for (const f of fronts) {
    const r = stream[f.name]!;
    rows.push({
      name: `${STREAM_CHUNKS}-chunk stream, ${CONNECTIONS} connections: ${f.name}`,
      p50Us: r.p50Us,
      p99Us: r.p99Us,
      opsPerSec: r.rps * STREAM_CHUNKS,
      note:
        `chunks/s; ${(r.rps / streamFloor.rps).toFixed(2)}x floor, ${(r.rps / streamRef.rps).toFixed(2)}x nginx; ` +
        `CPU ${((r.cpuMsPerRequest * 1000) / STREAM_CHUNKS).toFixed(2)} µs/chunk${non2xx(r)}`,
    });
  }
  return rows;
}

/** Each `--processes N` row against one process and against nginx with N workers. */
function processesNotes(
  several: readonly Front[],
  tiny: Record<string, Measured>,
  stream: Record<string, Measured>,
): string[] {
  const oneName = `kvgate after, ${MODES[0]}`;
  return several.map((f, i) => {
    const n = PROCESSES[i]!;
    const nginx = nginxName(n);
    const vsNginx =
      tiny[nginx] === undefined
        ? ''
        : `; ${(tiny[f.name]!.rps / tiny[nginx].rps).toFixed(2)}x the req/s and ` +
          `${(stream[f.name]!.rps / stream[nginx]!.rps).toFixed(2)}x the streams/s of nginx with ${n} workers`;
    return (
      `--processes ${n} (CPU summed over its processes; no NATS, sync over the cluster IPC channel): ` +
      `${(tiny[f.name]!.rps / tiny[oneName]!.rps).toFixed(2)}x the req/s of one process on the tiny chat at ${CONNECTIONS} connections, ` +
      `${(stream[f.name]!.rps / stream[oneName]!.rps).toFixed(2)}x its streamed chunks/s${vsNginx}.`
    );
  });
}

export async function run(): Promise<BenchSection> {
  const notes: string[] = [];
  if (!(await onPath('wrk'))) {
    return { title, rows: [], notes: ['skipped: wrk is not installed (apt-get install wrk nginx).'] };
  }
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-gw-bench-'));
  const children: ChildProcess[] = [];
  try {
    const { fronts, builds, several, synced } = await startFronts(dir, children, notes);
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
    const rows = rowsOf(fronts, tiny, one, stream);
    for (const [label] of builds) notes.push(...targetNotes(label, tiny, stream));
    notes.push(...processesNotes(several, tiny, stream));
    if (synced !== undefined) {
      const off = tiny[`kvgate after, ${MODES[0]}`]!;
      const on = tiny[synced.name]!;
      notes.push(
        `NATS sync with one peer (nats-server on loopback): ${(1000 * (on.cpuMsPerRequest - off.cpuMsPerRequest)).toFixed(1)} µs more CPU per request ` +
          `(${(on.cpuMsPerRequest / off.cpuMsPerRequest).toFixed(2)}x) and ${(on.rps / off.rps).toFixed(2)}x the req/s of sync off on the tiny chat at ${CONNECTIONS} connections; ` +
          'the peer replica and nats-server run on the same cores, and their CPU is not in the row.',
      );
    }
    if (ROUNDS > 1)
      notes.push(`${ROUNDS} rounds, the fronts interleaved in each; every figure is the median of its front's rounds.`);
    const base = tiny[fronts[0]!.name]!;
    notes.push(
      `wrk -d${DURATION_S}s per row after a 2 s warm-up; the backend answers at once (${base.rps.toFixed(0)} req/s alone at ${CONNECTIONS} connections), so the front's cost shows.`,
      `${pinNote()}.`,
      "CPU per request: the front's process CPU time (user + system, children and threads included, /proc/<pid>/stat) during the measured run over the requests wrk completed.",
      'kvgate runs with --tokenizer demo (the bundled Qwen3 tokenizer and chat template), default preprocessing, --log-level warn (no access log line per request), --max-concurrent-requests 4096.',
      'Compare rows of one run, not absolute numbers: on a shared machine every process competes for the same cores unless pinned.',
    );
    return { title, rows, notes };
  } finally {
    await stopAll(children);
    rmSync(dir, { recursive: true, force: true });
  }
}
