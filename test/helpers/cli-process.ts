/**
 * `node bin/kvgate.js ...` as a real child process (the compiled CLI: run
 * `npm run build` first, as `npm test` does), with everything it writes on
 * stdout and stderr collected, so a test reads what an operator sees whichever
 * stream it went to.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { stopChild } from './child.js';
import { BIN, ROOT, assertBuilt } from './process.js';
import { until } from './until.js';

export interface CliProcess {
  readonly child: ChildProcess;
  /** stdout and stderr so far, interleaved as they arrived. */
  output(): string;
  /** Waits until the output matches `re` (fails early if the process exits); returns the match. */
  waitFor(re: RegExp, what: string, timeoutMs?: number): Promise<RegExpMatchArray>;
  /** SIGTERM, then waits for the exit (no-op once exited). */
  stop(): Promise<void>;
}

export function startCli(args: readonly string[]): CliProcess {
  assertBuilt();
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let text = '';
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => (text += chunk));
  const exited = (): boolean => child.exitCode !== null || child.signalCode !== null;
  return {
    child,
    output: () => text,
    async waitFor(re, what, timeoutMs = 20_000) {
      let m: RegExpMatchArray | null = null;
      await until(
        () => {
          m = text.match(re);
          if (m === null && exited())
            throw new Error(
              `kvgate ${args.join(' ')} exited (${child.exitCode ?? child.signalCode}) before ${what}:\n${text}`,
            );
          return m !== null;
        },
        what,
        timeoutMs,
      );
      return m!;
    },
    stop: () => stopChild(child),
  };
}

/** What `kvgate mocker` prints for each engine it started (the fields tests read). */
export interface MockerLine {
  readonly index: number;
  readonly url: string;
  readonly model: string;
  readonly kv_events: readonly string[];
}

/** Starts `kvgate mocker ARGS` (OS-chosen ports unless ARGS say otherwise) and waits for its engines' lines. */
export async function startMockerCli(
  args: readonly string[],
  count = 1,
): Promise<{ proc: CliProcess; engines: MockerLine[] }> {
  const proc = startCli(['mocker', '--port', '0', '--kv-events-port', '0', '--count', String(count), ...args]);
  const lines = (): MockerLine[] =>
    proc
      .output()
      .split('\n')
      .filter((l) => l.startsWith('{"index"'))
      .map((l) => JSON.parse(l) as MockerLine);
  await until(
    () => {
      if (proc.child.exitCode !== null) throw new Error(`kvgate mocker exited: ${proc.output()}`);
      return lines().length === count;
    },
    "the mocker engines' lines",
    20_000,
  );
  return { proc, engines: lines() };
}

/** Starts `kvgate serve -c FILE` and waits for it to listen; resolves with the process and its public URL. */
export async function startServeCli(configFile: string): Promise<{ proc: CliProcess; url: string }> {
  const proc = startCli(['serve', '-c', configFile]);
  const url = (await proc.waitFor(/"listen":"(http:\/\/[^"]+)"/, 'the gateway listening'))[1]!;
  return { proc, url };
}

/** The JSON log lines a process printed so far (pino lines; other output skipped). */
export function jsonLogLines(p: CliProcess): Record<string, unknown>[] {
  return p
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .flatMap((l) => {
      try {
        return [JSON.parse(l) as Record<string, unknown>];
      } catch {
        return [];
      }
    });
}
