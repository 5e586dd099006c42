/**
 * Where a small request's CPU goes: one front (`kvgate serve` in kv mode with
 * KV events, as the gateway bench runs it, or the Node floor proxy) in front of
 * the trivial backend, under wrk (32 connections, the bench's tiny chat or
 * 64-chunk stream), its main thread under `node --cpu-prof`. Prints, per
 * request, the CPU of each of the front's threads over the measured run
 * (/proc/<pid>/task/<tid>/schedstat: the main thread, then the others by
 * thread id) and the main thread's profiled time in categories (kvgate's own
 * code, the socket writes' syscall, node:http and streams, undici, task queues,
 * garbage collection, ...), with kvgate's largest functions.
 *
 * Run: npm run build && node dist/bench/gateway/profile.js kvgate|floor tiny|stream [seconds, default 8]
 * (needs wrk on PATH; a 2 s warm-up runs first).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { threadCpuNs } from '../frontend/gateway-process.js';
import { kvgateServeArgs, runWrk, startProcess, stopAll, wrkScript } from './processes.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  samples: number[];
  timeDeltas: number[];
}

const HERE = new URL('.', import.meta.url).pathname;
const ROOT = resolve(HERE, '../../..');
const MODEL = 'bench-model';

/** The category of a profiled frame; native frames (no URL) take their caller's, but for the socket writes. */
function category(node: ProfileNode, callerUrl: string | undefined): string | undefined {
  const { functionName: fn, url } = node.callFrame;
  if (fn === '(idle)') return undefined;
  if (fn === '(garbage collector)') return 'garbage collection';
  if (fn === '(program)') return 'other (V8, native)';
  if (url === '') {
    if (/^write(v|Buffer|Utf8String|Latin1String)$/.test(fn)) return 'socket writes (the syscall)';
    return callerUrl === undefined || callerUrl === '' ? 'other (V8, native)' : categoryOfUrl(callerUrl);
  }
  return categoryOfUrl(url);
}

function categoryOfUrl(url: string): string {
  if (url.includes('node_modules/undici')) return 'undici';
  if (url.includes('/dist/src/')) return "kvgate's own code";
  if (url.includes('node_modules/')) return 'other libraries (prom-client, pino, ...)';
  if (/task_queues|timers|promise|async_hooks/.test(url)) return 'promises, timers, task queues';
  if (/_http_|http|net|stream|events|buffer|url/.test(url)) return 'node:http, net, streams, events';
  return 'node, other';
}

async function main(): Promise<void> {
  const [front, kind, seconds = '8'] = process.argv.slice(2);
  if ((front !== 'kvgate' && front !== 'floor') || (kind !== 'tiny' && kind !== 'stream'))
    throw new Error('usage: node dist/bench/gateway/profile.js kvgate|floor tiny|stream [seconds]');
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-gw-profile-'));
  const children: ChildProcess[] = [];
  try {
    const backendLine = await startProcess(
      'backend',
      'node',
      [join(HERE, 'trivial-backend.js'), MODEL],
      /^(\{.*\})$/m,
      children,
    );
    const backend = JSON.parse(backendLine.m[1]!) as { url: string; kv_events: string };
    const profDir = join(dir, 'profile');
    const prof = ['--cpu-prof', `--cpu-prof-dir=${profDir}`];
    const started =
      front === 'floor'
        ? await startProcess(
            'front',
            'node',
            [...prof, join(HERE, 'floor-proxy.js'), backend.url],
            /^(\{.*\})$/m,
            children,
          )
        : await startProcess(
            'front',
            'node',
            [
              ...prof,
              join(ROOT, 'bin/kvgate.js'),
              ...kvgateServeArgs(MODEL, `url=${backend.url},kv_events=${backend.kv_events}`),
            ],
            /at (http:\/\/127\.0\.0\.1:\d+)/,
            children,
          );
    const url = front === 'floor' ? (JSON.parse(started.m[1]!) as { url: string }).url : started.m[1]!;
    const body = { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: kind === 'stream' ? 64 : 1 };
    const script = wrkScript(dir, 'request', kind === 'stream' ? { ...body, stream: true } : body);
    await runWrk(url, script, 2, 32);
    // V8's profile timestamps and hrtime are both the monotonic clock, in microseconds here.
    const threads0 = threadCpuNs(started.pid);
    const t0 = Number(process.hrtime.bigint() / 1000n);
    const measured = await runWrk(url, script, Number(seconds), 32);
    const t1 = Number(process.hrtime.bigint() / 1000n);
    const threads1 = threadCpuNs(started.pid);
    // The front writes its profile as it exits.
    await stopAll(children);
    const file = readdirSync(profDir)
      .filter((f) => f.endsWith('.cpuprofile'))
      .sort()[0]!;
    const profile = JSON.parse(readFileSync(join(profDir, file), 'utf8')) as CpuProfile;
    report(front, kind, profile, measured.requests, [t0, t1], threads0, threads1, started.pid);
  } finally {
    await stopAll(children);
    rmSync(dir, { recursive: true, force: true });
  }
}

function report(
  front: string,
  kind: string,
  profile: CpuProfile,
  requests: number,
  [t0, t1]: [number, number],
  threads0: Map<string, number>,
  threads1: Map<string, number>,
  pid: number,
): void {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const caller = new Map<number, ProfileNode>();
  for (const n of profile.nodes) for (const c of n.children ?? []) caller.set(c, n);
  const categories = new Map<string, number>();
  const functions = new Map<string, number>();
  let busy = 0;
  let t = profile.startTime;
  for (let i = 0; i < profile.samples.length; i++) {
    t += profile.timeDeltas[i]!;
    if (t < t0 || t > t1) continue;
    const node = byId.get(profile.samples[i]!)!;
    const c = category(node, caller.get(node.id)?.callFrame.url);
    if (c === undefined) continue;
    // A sample stands for the time until the next one.
    const us = profile.timeDeltas[i + 1] ?? profile.timeDeltas[i]!;
    categories.set(c, (categories.get(c) ?? 0) + us);
    busy += us;
    if (c === "kvgate's own code") {
      const key = `${node.callFrame.functionName || '(anonymous)'} ${node.callFrame.url.split('/').slice(-2).join('/')}`;
      functions.set(key, (functions.get(key) ?? 0) + us);
    }
  }
  const per = (us: number): string => `${(us / requests).toFixed(1)} µs`;
  const cpu = [...threads1]
    .map(([tid, ns]) => [tid, (ns - (threads0.get(tid) ?? 0)) / 1000] as const)
    .filter(([, us]) => us / requests >= 0.5)
    .map(([tid, us]) => `${tid === String(pid) ? 'main' : tid} ${per(us)}`);
  process.stdout.write(`${front}, ${kind}: ${requests} requests in the measured run\n`);
  process.stdout.write(`CPU per request by thread: ${cpu.join(', ')}\n`);
  process.stdout.write(`main thread, profiled: ${per(busy)} per request\n`);
  for (const [c, us] of [...categories].sort((a, b) => b[1] - a[1]))
    process.stdout.write(`  ${per(us).padStart(10)}  ${((100 * us) / busy).toFixed(1).padStart(5)} %  ${c}\n`);
  if (functions.size > 0) process.stdout.write("kvgate's largest functions:\n");
  for (const [f, us] of [...functions].sort((a, b) => b[1] - a[1]).slice(0, 12))
    process.stdout.write(`  ${per(us).padStart(10)}  ${f}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exitCode = 1;
});
