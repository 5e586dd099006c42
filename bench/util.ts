/**
 * Shared bench harness. Each bench module exports `title` and
 * `run(): Promise<BenchSection>`; bench/run.ts runs them and prints Markdown.
 * Figures are reported with a baseline measured in the same run, since this
 * machine is noisy; nothing here gates CI.
 */
import { createServer } from 'node:net';
import { Bench } from 'tinybench';

export interface BenchRow {
  name: string;
  /** Median latency in microseconds. */
  p50Us: number;
  /** 99th percentile latency in microseconds. */
  p99Us: number;
  /** Operations per second (mean). */
  opsPerSec: number;
  /** Free-form note (ratio against the baseline, unit conversions, ...). */
  note?: string;
}

export interface BenchSection {
  title: string;
  rows: BenchRow[];
  /** Extra lines printed after the table (targets met or missed, and why). */
  notes: string[];
}

export interface BenchModule {
  title: string;
  run(): Promise<BenchSection>;
}

export interface TimeOptions {
  time?: number;
  warmupTime?: number;
}

/** Times each named function with tinybench and returns one row per function. */
export async function timeAll(fns: Record<string, () => unknown>, opts: TimeOptions = {}): Promise<BenchRow[]> {
  const bench = new Bench({ time: opts.time ?? 1500, warmupTime: opts.warmupTime ?? 300 });
  for (const [name, fn] of Object.entries(fns)) bench.add(name, fn);
  await bench.run();
  return bench.tasks.map((task) => {
    const r = task.result;
    if (r.state !== 'completed') throw new Error(`bench task ${task.name} did not complete: ${r.state}`);
    return {
      name: task.name,
      p50Us: r.latency.p50 * 1000,
      p99Us: r.latency.p99 * 1000,
      opsPerSec: r.throughput.mean,
    };
  });
}

function fmtUs(us: number): string {
  if (us >= 1000) return `${(us / 1000).toFixed(2)} ms`;
  if (us >= 10) return `${us.toFixed(1)} µs`;
  return `${us.toFixed(2)} µs`;
}

export function ratio(a: number, b: number): string {
  return `${(a / b).toFixed(2)}x`;
}

export function renderSection(s: BenchSection): string {
  const lines = [`### ${s.title}`, '', '| case | median | p99 | ops/s | note |', '| --- | ---: | ---: | ---: | --- |'];
  for (const r of s.rows) {
    lines.push(
      `| ${r.name} | ${fmtUs(r.p50Us)} | ${fmtUs(r.p99Us)} | ${Math.round(r.opsPerSec).toLocaleString('en-US')} | ${r.note ?? ''} |`,
    );
  }
  if (s.notes.length > 0) lines.push('', ...s.notes.map((n) => `- ${n}`));
  return lines.join('\n');
}

/** A TCP port that was free a moment ago on 127.0.0.1 (for child processes that need a fixed port). */
export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => res(port));
    });
    s.on('error', rej);
  });
}

/** A comma-separated list of positive integers from environment variable `name` (bench sizes), or `fallback`. */
export function envIntList(name: string, fallback: number[]): number[] {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  return raw.split(',').map((s) => {
    const n = Number(s.trim());
    if (!Number.isSafeInteger(n) || n <= 0) throw new Error(`${name}: ${s} is not a positive integer`);
    return n;
  });
}
