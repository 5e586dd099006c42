/**
 * The agent-turn bench's processes: `kvgate` commands started as child processes, their CPU time read from
 * /proc/<pid>/task/<tid>/schedstat (nanoseconds, every thread; Linux only), and the idle background measured so
 * that a request is charged what it caused and not the process's timers.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** CPU nanoseconds of a process's main thread (its thread id is the process id). */
export function mainThreadCpuNs(pid: number): number {
  return Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[0]);
}

/** CPU nanoseconds of each thread of a process, by thread id. */
export function threadCpuNs(pid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.set(tid, Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]));
    } catch {
      // a thread that ended between the listing and the read
    }
  }
  return out;
}

/** CPU nanoseconds of every thread of a process. */
export function processCpuNs(pid: number): number {
  let ns = 0;
  for (const threadNs of threadCpuNs(pid).values()) ns += threadNs;
  return ns;
}

export interface Proc {
  child: ChildProcess;
  lines: string[];
}

export function startCli(root: string, args: string[], nodeArgs: string[] = []): Proc {
  const child = spawn(process.execPath, [...nodeArgs, join(root, 'bin/kvgate.js'), ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const p: Proc = { child, lines: [] };
  let buf = '';
  child.stdout!.setEncoding('utf8').on('data', (c: string) => {
    buf += c;
    const parts = buf.split('\n');
    buf = parts.pop()!;
    p.lines.push(...parts);
  });
  child.stderr!.resume();
  return p;
}

export async function lineOf(p: Proc, pick: (o: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    for (const l of p.lines) {
      try {
        const o = JSON.parse(l) as Record<string, unknown>;
        if (pick(o)) return o;
      } catch {
        // not JSON
      }
    }
    if (p.child.exitCode !== null || Date.now() > deadline)
      throw new Error(`process exited or timed out: ${p.lines.join('\n')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export interface Gateway {
  name: string;
  proc: Proc;
  url: string;
  /** The idle process's CPU per millisecond, all threads and the main thread's (nanoseconds; 0 until measured). */
  idleNsPerMs: number;
  idleMainNsPerMs: number;
}

/**
 * Waits (at most 2 s) until the gateway's process spends no more than its background CPU (`Gateway.idleNsPerMs`)
 * plus 0.1 ms in 25 ms, so that what a request leaves running (a chat turn's KV events from its engine, decoded after
 * its answer) counts in that request and not in the next one. A fixed threshold never settles on a machine where the
 * idle process alone spends more than it, and then every request was charged 2 s of background.
 */
export async function quiet(gw: Gateway): Promise<void> {
  const pid = gw.proc.child.pid!;
  const deadline = performance.now() + 2000;
  let last = processCpuNs(pid);
  let at = performance.now();
  while (performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 25));
    const now = processCpuNs(pid);
    const t = performance.now();
    if (now - last < 100_000 + gw.idleNsPerMs * (t - at)) return;
    last = now;
    at = t;
  }
}

/** Measures the idle gateway's CPU per millisecond (all threads, and the main thread), over 1 s with nothing in flight. */
export async function measureIdle(gw: Gateway): Promise<string> {
  const pid = gw.proc.child.pid!;
  await new Promise((r) => setTimeout(r, 500));
  const c0 = processCpuNs(pid);
  const m0 = mainThreadCpuNs(pid);
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, 1000));
  const ms = performance.now() - t0;
  gw.idleNsPerMs = (processCpuNs(pid) - c0) / ms;
  gw.idleMainNsPerMs = (mainThreadCpuNs(pid) - m0) / ms;
  const us = (ns: number): string => (ns / 1000).toFixed(1);
  return (
    `${gw.name}: idle background ${us(gw.idleNsPerMs)} µs of CPU per ms (main thread ${us(gw.idleMainNsPerMs)}), ` +
    `subtracted over each request's window`
  );
}

export async function stopProc(p: Proc): Promise<void> {
  if (p.child.exitCode !== null) return;
  const done = new Promise((r) => p.child.once('exit', r));
  p.child.kill('SIGTERM');
  await done;
}
