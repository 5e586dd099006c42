/**
 * `node bin/kvgate.js ...` as a child process (the compiled CLI: `npm run build`
 * first), with its stdout collected line by line, for tests and the soak that
 * need real engine or gateway processes.
 */
import { spawn, type ChildProcessByStdio } from 'node:child_process';
import type { Readable } from 'node:stream';
import { stopChild } from './child.js';
import { BIN, ROOT, assertBuilt } from './process.js';
import { until } from './until.js';

export interface KvgateProcess {
  readonly lines: string[];
  readonly stderr: string[];
  /** The first stdout line that is a JSON object matching `pick` (waits up to `timeoutMs`). */
  jsonLine(
    what: string,
    pick: (o: Record<string, unknown>) => boolean,
    timeoutMs?: number,
  ): Promise<Record<string, unknown>>;
  /** SIGTERM, then resolves when it has exited. */
  stop(): Promise<void>;
}

/** Starts `node [nodeFlags] bin/kvgate.js args...`. */
export function startKvgate(args: readonly string[], nodeFlags: readonly string[] = []): KvgateProcess {
  assertBuilt();
  const child: ChildProcessByStdio<null, Readable, Readable> = spawn(process.execPath, [...nodeFlags, BIN, ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const stderr: string[] = [];
  let buffered = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    buffered += chunk;
    const parts = buffered.split('\n');
    buffered = parts.pop()!;
    lines.push(...parts);
  });
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => stderr.push(chunk));
  const parse = (line: string): Record<string, unknown> | undefined => {
    try {
      const v: unknown = JSON.parse(line);
      return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : undefined;
    } catch {
      return undefined;
    }
  };
  return {
    lines,
    stderr,
    async jsonLine(what, pick, timeoutMs = 20_000) {
      let found: Record<string, unknown> | undefined;
      await until(
        () => {
          if (child.exitCode !== null)
            throw new Error(`kvgate ${args[0]} exited (${child.exitCode}) before ${what}: ${stderr.join('')}`);
          found = lines.map(parse).find((o) => o !== undefined && pick(o));
          return found !== undefined;
        },
        what,
        timeoutMs,
      );
      return found!;
    },
    stop: () => stopChild(child),
  };
}

/** A `kvgate serve` process's public URL, from the banner it writes on stderr once it serves (waits up to `timeoutMs`). */
export async function servingUrl(proc: KvgateProcess, timeoutMs = 30_000): Promise<string> {
  let url: string | undefined;
  await until(
    () => {
      url = /kvgate: serving .* at (http:\/\/[^\s]+?)\.?\n/.exec(proc.stderr.join(''))?.[1];
      return url !== undefined;
    },
    "the gateway's banner",
    timeoutMs,
  ).catch((err: unknown) => {
    throw new Error(`${(err as Error).message}: ${proc.stderr.join('')}`);
  });
  return url!;
}

/** A mocker engine process on `port` (0 = OS-chosen); resolves with its URL once it serves. */
export async function startMockerProcess(
  port = 0,
  extra: readonly string[] = [],
): Promise<{ proc: KvgateProcess; url: string; model: string }> {
  const proc = startKvgate(['mocker', '--port', String(port), '--no-kv-events', '--bootstrap-port', '0', ...extra]);
  const line = await proc.jsonLine("the mocker's URL", (o) => typeof o.url === 'string');
  return { proc, url: String(line.url), model: String(line.model) };
}
