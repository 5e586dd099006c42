/**
 * issue 12 item 9: the embedded demo keeps its promise. `kvgate serve` with no
 * config (what `npm start` runs) prints a curl command; running exactly that
 * command twice reaches the same engine the second time with a cached prefix.
 * The printed text is read from both output streams (the banner's stream is
 * not part of the contract), and README's quick start shows the same request.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliProcess } from '../../helpers/cli-process.js';
import { until } from '../../helpers/until.js';

const run = promisify(execFile);

/** The printed command: `curl ...` through its `-d '...'` line (a backslash continues a line). */
const CURL = /^[ \t]*(curl -si (http:\/\/[^/\s]+)\/v1\/chat\/completions[^\n]*\\\n[ \t]*-d '[^'\n]*')[ \t]*$/m;

interface Answer {
  worker: string | undefined;
  cached: number;
  promptTokens: number;
}

/** Runs the command as a shell would and reads `curl -si`'s output: status line, headers, JSON body. */
async function runPrinted(command: string): Promise<Answer> {
  const { stdout } = await run('bash', ['-c', command], { maxBuffer: 1 << 20 });
  const [head, body] = stdout.split(/\r\n\r\n/, 2) as [string, string];
  expect(head).toMatch(/^HTTP\/1\.1 200/);
  const worker = /^x-kvgate-worker: *(\S+)/im.exec(head)?.[1];
  const json = JSON.parse(body) as {
    usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
  };
  return {
    worker,
    cached: json.usage.prompt_tokens_details?.cached_tokens ?? 0,
    promptTokens: json.usage.prompt_tokens,
  };
}

describe("the embedded demo's printed curl command", () => {
  let serve: CliProcess;

  beforeAll(() => {
    serve = startCli(['serve', '--port', '0']);
  });

  afterAll(async () => {
    await serve?.stop();
  });

  it('run twice as printed: the same x-kvgate-worker, and cached_tokens > 0 the second time', async () => {
    const [, command, base] = await serve.waitFor(CURL, 'the printed curl command');
    const first = await runPrinted(command!);
    expect(first.worker).toMatch(/^[1-4]$/);
    expect(first.promptTokens).toBeGreaterThanOrEqual(3 * 16);
    // What a person's pause between the two sends gives: the engine's KV events reach the router.
    const body = /-d '([^']*)'/.exec(command!)![1]!;
    await until(
      async () => {
        const r = await fetch(`${base}/v1/route`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body,
        });
        return ((await r.json()) as { overlap_blocks: number }).overlap_blocks > 0;
      },
      "the first answer's blocks in the router's index",
      10_000,
    );
    const second = await runPrinted(command!);
    expect(second.worker).toBe(first.worker);
    expect(second.cached).toBeGreaterThan(0);
    expect(second.cached).toBe(Math.floor(second.promptTokens / 16) * 16);
  });

  it("README's quick start sends the same request", async () => {
    const [, command] = await serve.waitFor(CURL, 'the printed curl command');
    const readme = readFileSync(new URL('../../../README.md', import.meta.url), 'utf8');
    const printed = /-d '([^']*)'/.exec(command!)![1];
    const documented = CURL.exec(readme)?.[1];
    expect(documented).toBeDefined();
    expect(/-d '([^']*)'/.exec(documented!)![1]).toBe(printed);
  });
});
